package status

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/sourcegraph/conc/pool"

	"github.com/relay-dev/relay/internal/lanes"
	"github.com/relay-dev/relay/internal/ratelimit"
	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/streams"
)

// Subject filters of the stream infos [Collect] makes, one per stream. The
// subscriber id is a fixed token of each subject, so the per-subject counts
// the server returns add up per subscriber.
const (
	// deliveriesFilter covers deliveries.<lane>.<subscriber>.
	deliveriesFilter = "deliveries.>"
	// retriesFilter covers retries.wait.<subscriber>.<id>, a delivery
	// waiting for its time, and retries.due.<subscriber>, one whose time
	// has come and that is on its way back to DELIVERIES: both are out of
	// the subscriber's queue yet not delivered.
	retriesFilter = "retries.>"
	// dlqFilter covers dlq.<subscriber>.<reason>.
	dlqFilter = "dlq.>"
)

// Token positions of the subscriber id in the subjects above, counted from
// zero.
const (
	deliveriesSubscriberToken = 2
	retriesSubscriberToken    = 2
	dlqSubscriberToken        = 1
)

// HintBacklog is how much backlog, in time at its configured rate, a
// subscriber on a shared lane may have before the report suggests a
// dedicated lane. A minute of work queued behind one subscriber is when its
// share of the lane's consumer (MaxAckPending slots, pulls, hand-backs)
// starts to be worth isolating; below it, sharing costs nothing measurable.
const HintBacklog = time.Minute

// readers bounds how many per-subscriber reads (a KV get, a message get)
// [Collect] has on the wire at once: enough to hide the round trips on a
// remote cluster with thousands of subscribers, few enough not to load it.
const readers = 16

// Enabled, Paused and Disabled are the values of [Subscriber.State].
const (
	// Enabled: the fan-out copies matching events to the subscriber and
	// its lane delivers them.
	Enabled = "enabled"
	// Paused: an operator's pause (`relay sub pause`); the fan-out still
	// copies matching events to the subscriber, and its lane holds them
	// all, sending nothing, until `relay sub resume` or [Subscriber.ResumesAt].
	Paused = "paused"
	// Disabled: the fan-out skips the subscriber and its lane holds what
	// is queued, until `relay sub enable`. It wins over Paused.
	Disabled = "disabled"
)

// Subscriber is the status of one subscriber, one row of `relay status` and
// one element of its --json array. Counts are of messages stored in NATS at
// the moment of the report; times are the server's, in UTC.
type Subscriber struct {
	// ID is the subscriber's id.
	ID string `json:"subscriber"`
	// State is [Enabled], [Paused] or [Disabled], so that a queue that
	// does not move is explained at once.
	State string `json:"state"`
	// ResumesAt is when an operator's pause ends by itself (`relay sub
	// pause --until`); zero when the subscriber is not paused, or paused
	// until `relay sub resume`. PausedUntil is another pause, the
	// subscriber's own Retry-After.
	ResumesAt time.Time `json:"resumes_at,omitzero"`
	// DisabledReason says why a disabled subscriber is disabled (a 410
	// Gone, `relay sub disable`); empty while enabled.
	DisabledReason string `json:"disabled_reason,omitempty"`
	// Lane is the lane the subscriber's deliveries go through: sNN for a
	// shared lane, d_<id> for a dedicated one.
	Lane string `json:"lane"`
	// Dedicated reports whether Lane is the subscriber's own.
	Dedicated bool `json:"dedicated"`
	// Pending counts the subscriber's messages in DELIVERIES, on any lane:
	// queued, held by a relay, or on the wire.
	Pending uint64 `json:"pending"`
	// Parked counts the subscriber's messages in RETRIES: deliveries that
	// wait outside the lane for a retry or for the end of a pause
	// (retries.wait.<id>.>), and the few whose time has come and that are
	// on their way back to DELIVERIES (retries.due.<id>), so that no
	// undelivered message is missing from the report.
	Parked uint64 `json:"parked"`
	// LaneInFlight is the number of messages the lane's consumer has handed
	// out and not yet had acknowledged (held, on the wire, or handed back
	// with a delay). JetStream keeps it per consumer, not per subject, so on
	// a shared lane it is the sum over every subscriber of that lane.
	LaneInFlight int `json:"lane_in_flight"`
	// Dead counts the subscriber's dead letters in DLQ.
	Dead uint64 `json:"dead"`
	// Rate is the configured rate in requests per second; 0 means
	// unlimited.
	Rate float64 `json:"rate"`
	// Burst is the configured bucket size, what Tokens can reach.
	Burst int `json:"burst"`
	// EffectiveRate is the rate in force: lower than Rate while the
	// adaptive rate is backing off after 429s; 0 when unlimited.
	EffectiveRate float64 `json:"effective_rate"`
	// Tokens is what the subscriber's token bucket holds now, the stored
	// tokens refilled at the effective rate since the entry was written;
	// nil when the subscriber is unlimited and has no bucket.
	Tokens *float64 `json:"tokens,omitempty"`
	// PausedUntil is the end of a subscriber-wide pause (a Retry-After) when
	// it is still in the future; zero otherwise.
	PausedUntil time.Time `json:"paused_until,omitzero"`
	// Circuit is the breaker's state: closed, open (cooling down, nothing is
	// sent) or half-open (one probe may go).
	Circuit ratelimit.Circuit `json:"circuit"`
	// Failures counts the consecutive failed attempts the breaker has seen.
	Failures int `json:"failures"`
	// OldestPendingAt is when the oldest of the Pending messages was stored
	// in DELIVERIES; zero when there are none.
	OldestPendingAt time.Time `json:"oldest_pending_at,omitzero"`
	// OldestPendingAge is how long ago OldestPendingAt was, as a duration
	// such as "1m30s" (to the second from one second on, else to the
	// millisecond), so that a stuck queue stands out; empty when there is
	// no pending message.
	OldestPendingAge string `json:"oldest_pending_age"`
	// Hint is advice for the operator, empty when there is none: at present
	// only that a subscriber on a shared lane has a backlog of more than
	// [HintBacklog] at its rate and would be better off on a dedicated lane.
	Hint string `json:"hint,omitempty"`
}

// Collect reads the status of each of subs from NATS, as `relay status`
// prints it, and returns it sorted by id; an empty slice, not nil, when subs
// is empty, so that the JSON form is []. sharedLanes is relay run's --lanes,
// which decides the lane of every subscriber without a dedicated one; below
// 1 Collect returns [ErrInvalidLanes].
//
// The streams and the relay_ratelimit bucket must exist (`relay run`
// creates them); a lane consumer that does not exist yet counts as nothing
// in flight, and a subscriber without a relay_ratelimit entry has a full
// bucket and a closed breaker, as the rate limiter treats it.
func Collect(ctx context.Context, js jetstream.JetStream, subs []subscribers.Subscriber, sharedLanes int) ([]Subscriber, error) {
	if sharedLanes < 1 {
		return nil, fmt.Errorf("%w, got %d", ErrInvalidLanes, sharedLanes)
	}
	out := make([]Subscriber, len(subs))
	if len(subs) == 0 {
		return out, nil
	}
	deliveries, err := js.Stream(ctx, streams.Deliveries)
	if err != nil {
		return nil, streamErr(streams.Deliveries, err)
	}
	info, err := deliveries.Info(ctx, jetstream.WithSubjectFilter(deliveriesFilter))
	if err != nil {
		return nil, streamErr(streams.Deliveries, err)
	}
	now := info.TimeStamp.UTC()
	if info.TimeStamp.IsZero() {
		// A server too old to stamp its answers: the local clock is the
		// best there is.
		now = time.Now().UTC()
	}
	pending := countBySubscriber(info.State.Subjects, deliveriesSubscriberToken)
	parked, err := subjectCounts(ctx, js, streams.Retries, retriesFilter, retriesSubscriberToken)
	if err != nil {
		return nil, err
	}
	dead, err := subjectCounts(ctx, js, streams.DLQ, dlqFilter, dlqSubscriberToken)
	if err != nil {
		return nil, err
	}
	kv, err := js.KeyValue(ctx, streams.RateLimitBucket)
	if err != nil {
		return nil, fmt.Errorf("status: opening KV bucket %s (relay run creates it): %w", streams.RateLimitBucket, err)
	}

	inFlight := map[string]int{}
	for i, sub := range subs {
		lane := sub.Lane(sharedLanes)
		out[i] = Subscriber{
			ID:        sub.ID,
			State:     Enabled,
			Lane:      lane,
			Dedicated: sub.Dedicated,
			Pending:   pending[sub.ID],
			Parked:    parked[sub.ID],
			Dead:      dead[sub.ID],
			Rate:      sub.Rate,
			Burst:     sub.Burst,
			Circuit:   ratelimit.Closed,
		}
		switch {
		case sub.Disabled:
			out[i].State, out[i].DisabledReason = Disabled, sub.DisabledReason
		case sub.PausedAt(now):
			out[i].State, out[i].ResumesAt = Paused, utcOrZero(sub.PausedUntil)
		}
		if _, seen := inFlight[lane]; !seen {
			n, err := laneInFlight(ctx, deliveries, lane)
			if err != nil {
				return nil, err
			}
			inFlight[lane] = n
		}
		out[i].LaneInFlight = inFlight[lane]
	}

	p := pool.New().WithMaxGoroutines(readers).WithContext(ctx).WithCancelOnError().WithFirstError()
	for i, sub := range subs {
		row := &out[i]
		p.Go(func(ctx context.Context) error {
			if err := readRateState(ctx, kv, sub, now, row); err != nil {
				return err
			}
			if row.Pending > 0 {
				if err := readOldest(ctx, deliveries, info.State.FirstSeq, now, row); err != nil {
					return err
				}
			}
			row.Hint = hint(*row)
			return nil
		})
	}
	if err := p.Wait(); err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b Subscriber) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

// utcOrZero returns t in UTC, leaving the zero time zero.
func utcOrZero(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.UTC()
}

func streamErr(name string, err error) error {
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("status: stream %s does not exist (relay run creates it): %w", name, err)
	}
	return fmt.Errorf("status: reading stream %s: %w", name, err)
}

// subjectCounts makes one stream info with a subject filter and adds the
// per-subject counts up per subscriber.
func subjectCounts(ctx context.Context, js jetstream.JetStream, name, filter string, token int) (map[string]uint64, error) {
	stream, err := js.Stream(ctx, name)
	if err != nil {
		return nil, streamErr(name, err)
	}
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return nil, streamErr(name, err)
	}
	return countBySubscriber(info.State.Subjects, token), nil
}

// countBySubscriber adds up per-subject message counts by the subject's
// token-th token, the subscriber id. A subject too short to have one was not
// written by relay and is left out.
func countBySubscriber(subjects map[string]uint64, token int) map[string]uint64 {
	counts := make(map[string]uint64, len(subjects))
	for subject, n := range subjects {
		parts := strings.SplitN(subject, ".", token+2)
		if len(parts) <= token {
			continue
		}
		counts[parts[token]] += n
	}
	return counts
}

// laneInFlight is the NumAckPending of a lane's consumer, 0 when the lane
// has no consumer yet (no relay has started it).
func laneInFlight(ctx context.Context, deliveries jetstream.Stream, lane string) (int, error) {
	c, err := deliveries.Consumer(ctx, lanes.ConsumerName(lane))
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("status: reading consumer %s: %w", lanes.ConsumerName(lane), err)
	}
	return c.CachedInfo().NumAckPending, nil
}

// readRateState fills the rate-limit fields of row from the subscriber's
// relay_ratelimit entry, read at the server time now.
func readRateState(ctx context.Context, kv jetstream.KeyValue, sub subscribers.Subscriber, now time.Time, row *Subscriber) error {
	limit := ratelimit.Limit{Rate: sub.Rate, Burst: sub.Burst}
	var st ratelimit.State
	written := now
	full := true
	e, err := kv.Get(ctx, sub.ID)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		// No entry: nothing was sent lately (or the entry expired), which
		// the rate limiter reads as a full bucket and a closed breaker.
	case err != nil:
		return fmt.Errorf("status: reading %s in KV bucket %s: %w", sub.ID, streams.RateLimitBucket, err)
	default:
		// A value that is not a State was written around relay; the rate
		// limiter starts such a subscriber over from a full bucket, and so
		// does the report.
		if json.Unmarshal(e.Value(), &st) == nil {
			written, full = e.Created(), false
		} else {
			st = ratelimit.State{}
		}
	}
	row.EffectiveRate = ratelimit.EffectiveRate(st, limit)
	if !limit.Unlimited() {
		var tokens float64
		if full {
			// Refill never goes beyond the bucket's capacity, so an
			// unbounded start gives exactly a full bucket.
			tokens = ratelimit.Refill(math.Inf(1), now, now, 0, limit)
		} else {
			tokens = st.TokensAt(written, now, limit)
		}
		tokens = math.Round(tokens*1000) / 1000
		row.Tokens = &tokens
	}
	if st.PausedUntil.After(now) {
		row.PausedUntil = st.PausedUntil.UTC()
	}
	row.Circuit = st.CircuitAt(now)
	row.Failures = st.Failures
	return nil
}

// readOldest fills the oldest-pending fields of row: the first message at
// or after firstSeq on deliveries.*.<id>, whichever lane it is on. A queue
// drained since the counts were taken leaves them empty.
func readOldest(ctx context.Context, deliveries jetstream.Stream, firstSeq uint64, now time.Time, row *Subscriber) error {
	msg, err := deliveries.GetMsg(ctx, max(firstSeq, 1), jetstream.WithGetMsgSubject("deliveries.*."+row.ID))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("status: reading the oldest delivery of %s: %w", row.ID, err)
	}
	row.OldestPendingAt = msg.Time.UTC()
	row.OldestPendingAge = formatAge(now.Sub(msg.Time))
	return nil
}

// formatAge writes an age as `relay status` shows it: to the second from
// one second on ("1m30s"), to the millisecond below ("250ms"), and "0s" for
// anything not in the past (a message stored after the server's time was
// read), so that it is never empty when there is a message.
func formatAge(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d >= time.Second:
		return d.Round(time.Second).String()
	default:
		return d.Round(time.Millisecond).String()
	}
}

// hint is the advice of [Subscriber.Hint] for row.
func hint(row Subscriber) string {
	if row.Dedicated || row.Rate <= 0 {
		return ""
	}
	backlog := float64(row.Pending + row.Parked)
	if backlog <= row.Rate*HintBacklog.Seconds() {
		return ""
	}
	return fmt.Sprintf("backlog of %.0f s at its rate: consider --lane dedicated", backlog/row.Rate)
}
