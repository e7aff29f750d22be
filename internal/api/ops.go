package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/relay-dev/relay/internal/attempts"
	"github.com/relay-dev/relay/internal/deadletter"
	"github.com/relay-dev/relay/internal/fanout"
	"github.com/relay-dev/relay/internal/opevent"
	"github.com/relay-dev/relay/internal/status"
	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/internal/testrequest"
	"github.com/relay-dev/relay/streams"
)

// Ops are the operations both ways in offer, each calling the package that
// owns its noun as the CLI does.
type Ops struct {
	// JS is the relay's JetStream context.
	JS jetstream.JetStream
	// Store is the subscriber bucket.
	Store *subscribers.Store
	// SharedLanes is relay run's --lanes, for the status.
	SharedLanes int
	// Now is the clock of a filter's "24h ago". Defaults to time.Now.
	Now func() time.Time

	mu         sync.Mutex
	maxMsg     int64
	maxMsgRead time.Time
}

func (o *Ops) now() time.Time {
	if o.Now == nil {
		return time.Now()
	}
	return o.Now()
}

// Status is what `relay status --json` prints: a row a subscriber.
func (o *Ops) Status(ctx context.Context) ([]status.Subscriber, error) {
	subs, err := o.Store.List(ctx)
	if err != nil && !errors.Is(err, subscribers.ErrCorrupt) {
		return nil, err
	}
	// Unreadable values are left out, as the CLI leaves them out.
	report, err := status.Collect(ctx, o.JS, subs, o.SharedLanes)
	if err != nil {
		return nil, err
	}
	if report.Subscribers == nil {
		return []status.Subscriber{}, nil
	}
	return report.Subscribers, nil
}

// Trace is what `relay trace ID --json` prints, with the subscribers a
// content filter skipped when filtered.
func (o *Ops) Trace(ctx context.Context, eventID string, filtered bool) (attempts.Trace, error) {
	if eventID == "" {
		return attempts.Trace{}, invalid("an event id is needed")
	}
	t, err := attempts.Find(ctx, o.JS, eventID)
	if err = attempts.Explain(err, eventID); err != nil {
		return attempts.Trace{}, err
	}
	if !filtered {
		t.Filtered = nil
	}
	return t, nil
}

// Subscriber is what `relay sub get ID --json` prints.
func (o *Ops) Subscriber(ctx context.Context, id string) (subscribers.Shown, error) {
	if err := subscribers.ValidateID(id); err != nil {
		return subscribers.Shown{}, err
	}
	s, err := o.Store.Get(ctx, id)
	if err != nil {
		return subscribers.Shown{}, err
	}
	return s.Show(false), nil
}

// Subscribers is a page of what `relay sub ls --json` prints: at most limit
// subscribers (0: [DefaultPage]) whose ids sort after after, of owner when
// owner is given, and the id to give as after for the next page, "" on the
// last.
func (o *Ops) Subscribers(ctx context.Context, after, owner string, limit int) ([]subscribers.Shown, string, error) {
	limit, err := pageSize(limit)
	if err != nil {
		return nil, "", err
	}
	if after != "" {
		if err := subscribers.ValidateID(after); err != nil {
			return nil, "", invalid("cursor: not a subscriber id")
		}
	}
	subs, err := o.Store.List(ctx)
	if err != nil && !errors.Is(err, subscribers.ErrCorrupt) {
		return nil, "", err
	}
	out := []subscribers.Shown{}
	next := ""
	for _, s := range subs {
		if s.ID <= after || owner != "" && s.Owner != owner {
			continue
		}
		if len(out) == limit {
			next = out[len(out)-1].ID
			break
		}
		out = append(out, s.Show(false))
	}
	return out, next, nil
}

// DeadLetters is a page of what `relay dlq ls --json` prints for the
// filter args: at most limit entries (0: [DefaultPage]) of DLQ sequences
// above after, oldest first, and the sequence to give as after for the
// next page, 0 on the last.
func (o *Ops) DeadLetters(ctx context.Context, args deadletter.FilterArgs, after uint64, limit int) ([]deadletter.Entry, uint64, error) {
	limit, err := pageSize(limit)
	if err != nil {
		return nil, 0, err
	}
	f, err := deadletter.ParseFilter(args, o.now())
	if err != nil {
		return nil, 0, err
	}
	f.After = after
	out := []deadletter.Entry{}
	var next uint64
	errFull := errors.New("page full")
	err = deadletter.Scan(ctx, o.JS, f, func(e deadletter.Entry) error {
		if len(out) == limit {
			next = out[len(out)-1].DLQSeq
			return errFull
		}
		out = append(out, e)
		return nil
	})
	if err != nil && !errors.Is(err, errFull) && !errors.Is(err, deadletter.ErrMalformedEntry) {
		return nil, 0, err
	}
	return out, next, nil
}

// DeadLetter is what `relay dlq show SEQ --json` prints.
func (o *Ops) DeadLetter(ctx context.Context, seq uint64) (deadletter.Shown, error) {
	if seq == 0 {
		return deadletter.Shown{}, invalid("a DLQ sequence is a whole number from 1 (relay dlq ls shows them)")
	}
	m, err := deadletter.Get(ctx, o.JS, seq)
	if err != nil {
		return deadletter.Shown{}, err
	}
	return m.Show(), nil
}

// pageSize checks a page's size: 0 takes [DefaultPage].
func pageSize(limit int) (int, error) {
	switch {
	case limit == 0:
		return DefaultPage, nil
	case limit < 0 || limit > MaxPage:
		return 0, invalid(fmt.Sprintf("limit: must be 1 to %d, got %d", MaxPage, limit))
	}
	return limit, nil
}

// Event is an event to publish.
type Event struct {
	// Type is the event's type, the subject after "events.".
	Type string
	// Body is published byte for byte.
	Body []byte
	// ID is the event's id, its Nats-Msg-Id; "" makes one.
	ID string
	// Header holds the headers that pass through: Content-Type,
	// Relay-Deliver-At, Relay-Deadline, traceparent and tracestate.
	Header http.Header
}

// passed are the headers of a request an event keeps.
var passed = []string{"Content-Type", streams.HeaderDeliverAt, streams.HeaderDeadline, "traceparent", "tracestate"}

// Published is the answer to a publish.
type Published struct {
	ID        string `json:"id"`
	Seq       uint64 `json:"seq"`
	Duplicate bool   `json:"duplicate"`
}

// CheckEventType says whether t may be published: an event type
// ([testrequest.CheckType], the rule of relay sub test --type) that is not
// one of relay's own operational events.
func CheckEventType(t string) error {
	if err := testrequest.CheckType(t); err != nil {
		return invalid(strings.TrimPrefix(err.Error(), testrequest.ErrInvalid.Error()+": "))
	}
	if strings.HasPrefix(t, opevent.Prefix) {
		return invalid(fmt.Sprintf("%q: event types beginning %s are relay's own operational events", t, opevent.Prefix))
	}
	return nil
}

// MaxEventBody is the largest body an event may have: EVENTS' max message
// size, read again every [eventsLimitEvery].
func (o *Ops) MaxEventBody(ctx context.Context) (int64, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.maxMsgRead.IsZero() && o.now().Sub(o.maxMsgRead) < eventsLimitEvery {
		return o.maxMsg, nil
	}
	s, err := o.JS.Stream(ctx, streams.Events)
	if err != nil {
		return 0, err
	}
	n := int64(s.CachedInfo().Config.MaxMsgSize)
	if n <= 0 {
		n = o.JS.Conn().MaxPayload()
	}
	o.maxMsg, o.maxMsgRead = n, o.now()
	return n, nil
}

// Publish stores e in EVENTS, once: the same id again is a duplicate.
func (o *Ops) Publish(ctx context.Context, e Event) (Published, error) {
	if err := CheckEventType(e.Type); err != nil {
		return Published{}, err
	}
	switch {
	case e.ID == "":
		e.ID = "evt_" + nuid.Next()
	case !fanout.StableID(e.ID):
		return Published{}, invalid(fmt.Sprintf("Idempotency-Key: must be 1 to %d bytes without control characters or spaces at either end", fanout.MaxEventID))
	case strings.HasPrefix(e.ID, opevent.IDPrefix):
		// relay's own operational events are stored under such ids: one
		// taken first would make relay's event a duplicate, never sent.
		return Published{}, invalid(fmt.Sprintf("Idempotency-Key: keys beginning %s are relay's own", opevent.IDPrefix))
	}
	msg := nats.NewMsg(fanout.SubjectPrefix + e.Type)
	msg.Data = e.Body
	for _, name := range passed {
		if v := e.Header.Get(name); v != "" {
			msg.Header.Set(name, v)
		}
	}
	// What relay would dead-letter as malformed, unsent, is refused now.
	if why := streams.Malformed(msg.Header); why != "" {
		return Published{}, invalid(why)
	}
	ack, err := o.JS.PublishMsg(ctx, msg, jetstream.WithMsgID(e.ID))
	if err != nil {
		if Status(err) == http.StatusRequestEntityTooLarge {
			return Published{}, &tooLargeError{msg: "the event is larger than EVENTS' max message size"}
		}
		return Published{}, err
	}
	return Published{ID: e.ID, Seq: ack.Sequence, Duplicate: ack.Duplicate}, nil
}
