package status

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/streams"
)

// scope is the subject filters of one report's stream infos: every
// subscriber's ([everyone]) or a single one's ([only]). Each filter matches
// at most a few subjects per subscriber, never one per message, so that the
// answers grow with the number of subscribers and not with their backlogs.
type scope struct {
	// deliveries matches deliveries.<lane>.<subscriber> and
	// deliveries.overflow.<subscriber>: one subject per subscriber and
	// lane it has messages on.
	deliveries string
	// due matches retries.due.<subscriber>, one subject per subscriber;
	// empty in the overview, which counts no parked delivery by
	// subscriber. The parked deliveries that wait for their time are on
	// retries.wait.<subscriber>.<id>, one subject per message, and are
	// never listed: see [reader.waiting].
	due string
	// scheduled matches the subjects of the deliveries not due yet,
	// retries.at.<subscriber>.<id>, one subject per message: never listed,
	// only counted (see [reader.subjectTotal]).
	scheduled string
	// dlq matches dlq.<subscriber>.<reason>: at most one subject per
	// subscriber and reason.
	dlq string
}

// everyone is the scope of the whole report.
var everyone = scope{
	deliveries: streams.DeliveriesFilter,
	scheduled:  streams.RetryAtPrefix + ">",
	dlq:        streams.DeadLettersFilter,
}

// only is the scope of one subscriber's report.
func only(id string) scope {
	return scope{
		deliveries: streams.SubscriberDeliveries(id),
		due:        streams.RetryDuePrefix + id,
		scheduled:  streams.RetryAtPrefix + id + ".*",
		dlq:        streams.DeadLetterFilter(id),
	}
}

// counts is what the stream infos of one report say, per subscriber id.
type counts struct {
	// now is the server's time of the DELIVERIES stream info, the time
	// every judgement of the report is made at.
	now time.Time
	// firstSeq is DELIVERIES' first sequence, where the search for a
	// subscriber's oldest message starts.
	firstSeq uint64
	// queued counts messages on the lane subjects, overflow on the
	// overflow subject.
	queued, overflow map[string]uint64
	// retries is every message in RETRIES, parked, scheduled or due, of
	// any subscriber.
	retries uint64
	// scheduled counts the deliveries not due yet in scope: everyone's in
	// the overview, the subscriber's in its detail.
	scheduled uint64
	// due counts retries.due.<subscriber>.
	due map[string]uint64
	// waiting reports whether RETRIES holds messages that are not due,
	// that is parked or scheduled deliveries of some subscriber: without
	// any, none of the subscriber's needs to be counted.
	waiting bool
	// dead counts dead letters by subscriber and reason.
	dead map[string]map[string]uint64
	// dlqFirst and dlqLast are the DLQ's sequence range, where the search
	// for a subscriber's last dead letters runs.
	dlqFirst, dlqLast uint64
}

// counts reads the stream infos of scope sc: one of DELIVERIES and one of
// DLQ; and, when RETRIES holds any message (its lookup said how many), one
// count of the scheduled deliveries in scope: in the overview at once, for
// one subscriber after a stream info of its due subject, and only when
// RETRIES holds more than those. Each is a single request unless its
// subject list exceeds what the server sends in one answer (100,000
// subjects).
func (r *reader) counts(ctx context.Context, sc scope) (counts, error) {
	info, err := r.deliveries.Info(ctx, jetstream.WithSubjectFilter(sc.deliveries))
	if err != nil {
		return counts{}, streamErr(streams.Deliveries, err)
	}
	c := counts{
		now:      info.TimeStamp.UTC(),
		firstSeq: info.State.FirstSeq,
		queued:   map[string]uint64{},
		overflow: map[string]uint64{},
		due:      map[string]uint64{},
		dead:     map[string]map[string]uint64{},
	}
	if info.TimeStamp.IsZero() {
		// A server too old to stamp its answers: the local clock is the
		// best there is.
		c.now = time.Now().UTC()
	}
	for subject, n := range info.State.Subjects {
		if id, ok := strings.CutPrefix(subject, streams.OverflowPrefix); ok {
			c.overflow[id] += n
		} else if id, ok := streams.SubjectToken(subject, 2); ok {
			c.queued[id] += n
		}
	}

	// The message count came with the stream's lookup, a moment ago; only
	// when RETRIES holds messages are its due subjects worth asking for.
	retries := r.retries.CachedInfo()
	c.retries = retries.State.Msgs
	if retries.State.Msgs > 0 && sc.due != "" {
		due, err := r.retries.Info(ctx, jetstream.WithSubjectFilter(sc.due))
		if err != nil {
			return counts{}, streamErr(streams.Retries, err)
		}
		var allDue uint64
		for subject, n := range due.State.Subjects {
			if id, ok := streams.SubjectToken(subject, 2); ok {
				c.due[id] += n
			}
			allDue += n
		}
		// Parked deliveries are what is not due. Both counts are of the
		// same moment only roughly; a park in between errs on the side
		// of counting.
		c.waiting = max(retries.State.Msgs, due.State.Msgs) > allDue
	}
	if retries.State.Msgs > 0 && (sc.due == "" || c.waiting) {
		if c.scheduled, err = r.subjectTotal(ctx, streams.Retries, sc.scheduled); err != nil {
			return counts{}, err
		}
	}

	dlq, err := r.dlq.Info(ctx, jetstream.WithSubjectFilter(sc.dlq))
	if err != nil {
		return counts{}, streamErr(streams.DLQ, err)
	}
	c.dlqFirst, c.dlqLast = dlq.State.FirstSeq, dlq.State.LastSeq
	for subject, n := range dlq.State.Subjects {
		id, ok := streams.SubjectToken(subject, 1)
		reason, rok := streams.SubjectToken(subject, 2)
		if !ok || !rok {
			continue
		}
		if c.dead[id] == nil {
			c.dead[id] = map[string]uint64{}
		}
		c.dead[id][reason] += n
	}
	return c, nil
}

// subjectTotalRequest is a stream info request that asks how many subjects
// match a filter and for none of them: an offset past the end leaves the
// answer's subject list empty, and its "total" still counts the matches.
type subjectTotalRequest struct {
	SubjectsFilter string `json:"subjects_filter"`
	Offset         int    `json:"offset"`
}

// subjectTotalResponse is the part of a stream info answer that
// [reader.subjectTotal] reads.
type subjectTotalResponse struct {
	Total int                 `json:"total"`
	Error *jetstream.APIError `json:"error,omitempty"`
}

// apiTimeout bounds one raw JetStream API request made without a deadline,
// as nats.go bounds its own.
const apiTimeout = 5 * time.Second

// waiting counts a subscriber's parked deliveries that wait for their time,
// on retries.wait.<subscriber>.<id>. Each is on a subject of its own (a
// JetStream message schedule is keyed by its subject), so the count of
// subjects is the count of messages, and the server computes it without
// sending a single subject: the answer is a stream info of constant size
// whatever the backlog, where listing the subjects would send one per
// parked message.
func (r *reader) waiting(ctx context.Context, id string) (uint64, error) {
	return r.subjectTotal(ctx, streams.Retries, streams.RetryWaitPrefix+id+".*")
}

// subjectTotal asks the server how many subjects of stream match filter.
func (r *reader) subjectTotal(ctx context.Context, stream, filter string) (uint64, error) {
	req, err := json.Marshal(subjectTotalRequest{SubjectsFilter: filter, Offset: math.MaxInt32})
	if err != nil {
		return 0, fmt.Errorf("counting %s: %w", filter, err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, apiTimeout)
		defer cancel()
	}
	msg, err := r.nc.RequestWithContext(ctx, "$JS.API.STREAM.INFO."+stream, req)
	if err != nil {
		return 0, fmt.Errorf("counting %s in stream %s: %w", filter, stream, err)
	}
	var resp subjectTotalResponse
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return 0, fmt.Errorf("counting %s in stream %s: %w", filter, stream, err)
	}
	if resp.Error != nil {
		return 0, streamErr(stream, resp.Error)
	}
	return uint64(max(resp.Total, 0)), nil
}
