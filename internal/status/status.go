package status

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sourcegraph/conc/pool"

	"github.com/relay-dev/relay/internal/ratelimit"
	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/internal/timeliness"
	"github.com/relay-dev/relay/streams"
)

// HintBacklog is how much backlog, in time at its configured rate, a
// subscriber on a shared lane may have before the report suggests a
// dedicated lane. A minute of work queued behind one subscriber is when its
// share of the lane's consumer (MaxAckPending slots, pulls, hand-backs)
// starts to be worth isolating; below it, sharing costs nothing measurable.
const HintBacklog = time.Minute

// readers bounds how many per-subscriber reads (a message get, a consumer
// info) [Collect] has on the wire at once: enough to hide the round trips on a
// remote cluster with thousands of subscribers, few enough not to load it.
const readers = 16

// Enabled, Paused and Disabled are the values of [Subscriber.State].
const (
	// Enabled: the fan-out copies matching events to the subscriber and
	// its lane delivers them.
	Enabled = "enabled"
	// Paused: the fan-out still copies matching events to the
	// subscriber, and its lane holds them all, sending nothing: an
	// operator's pause (`relay sub pause`) until `relay sub resume` or
	// [Subscriber.ResumesAt], or the subscriber's own Retry-After until
	// [Subscriber.PausedUntil]; [Subscriber.PauseReason] says which.
	Paused = "paused"
	// Disabled: the fan-out skips the subscriber and its lane holds what
	// is queued, until `relay sub enable`. It wins over Paused.
	Disabled = "disabled"
)

// ByOperator, ByRetryAfter and BySealedKey are the values of
// [Subscriber.PauseReason].
const (
	// ByOperator: `relay sub pause`, until `relay sub resume` or
	// [Subscriber.ResumesAt].
	ByOperator = "operator"
	// ByRetryAfter: the subscriber asked every relay to wait (a
	// Retry-After, or a rate-limit reset), until [Subscriber.PausedUntil].
	// An operator's pause wins when both hold.
	ByRetryAfter = "retry_after"
	// BySealedKey: the subscriber's secrets are sealed with a key that
	// the reader of the status was not given (see docs/secrets.md); a
	// relay without it holds the subscriber as it holds a pause.
	BySealedKey = "sealed_key"
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
	// PauseReason says what pauses a paused subscriber: [ByOperator],
	// [ByRetryAfter] or [BySealedKey]; empty unless State is [Paused].
	PauseReason string `json:"pause_reason,omitempty"`
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
	// Pending counts the subscriber's messages in DELIVERIES, on any lane
	// or in its overflow: queued, held by a relay, or on the wire. It is
	// Queued + Overflow.
	Pending uint64 `json:"pending"`
	// Queued counts the Pending messages on a lane subject,
	// deliveries.<lane>.<subscriber>: what the lanes have to hand.
	Queued uint64 `json:"queued"`
	// Overflow counts the Pending messages on the subscriber's overflow
	// subject, deliveries.overflow.<subscriber>: its backlog beyond its
	// share of the lane, and what waits while it is paused, its circuit
	// is open or it is disabled.
	Overflow uint64 `json:"overflow"`
	// Parked counts the subscriber's messages in RETRIES but the
	// scheduled ones: deliveries that wait outside the lane for a retry
	// (retries.wait.<id>.<unique id>, one subject each, as retry.Park
	// writes them: the server counts the subjects), and the few whose time
	// has come and that are on their way back to DELIVERIES
	// (retries.due.<id>, where a scheduled delivery that fell due goes
	// too), so that no undelivered message is missing from the report. Only [Describe] counts them: the server
	// has no count of them by subscriber but one request per subscriber
	// (see the package doc), so [Collect] leaves Parked nil and counts all
	// of RETRIES but the scheduled deliveries in [Summary.Parked].
	Parked *uint64 `json:"parked,omitempty"`
	// Scheduled counts the subscriber's deliveries that are not due yet:
	// copies of events whose Relay-Deliver-At is still ahead, held in
	// RETRIES on retries.at.<id>.<unique id> (one subject each) until
	// then. They are apart from Parked so that a subscriber with a
	// thousand deliveries booked for tomorrow does not look like one that
	// fails a thousand times. As Parked, only [Describe] counts them and
	// [Collect] counts them in all, in [Summary.Scheduled].
	Scheduled *uint64 `json:"scheduled,omitempty"`
	// LaneInFlight is the number of messages the lane's consumer has handed
	// out and not yet had acknowledged (held, on the wire, or handed back
	// with a delay). JetStream keeps it per consumer, not per subject, so on
	// a shared lane it is the sum over every subscriber of that lane.
	LaneInFlight int `json:"lane_in_flight"`
	// MaxBacklog is the subscriber's --max-backlog: past it the fan-out
	// dead-letters its new copies as backlog (see the hint).
	MaxBacklog int `json:"max_backlog"`
	// Dead counts the subscriber's dead letters in DLQ.
	Dead uint64 `json:"dead"`
	// DeadByReason splits Dead by reason (the last token of
	// dlq.<subscriber>.<reason>), so that a subscriber that rejects
	// everything stands apart from one that timed out; absent when Dead
	// is 0.
	DeadByReason map[string]uint64 `json:"dead_by_reason,omitempty"`
	// Met counts the subscriber's deliveries with a Relay-Deadline that it
	// accepted before the deadline, and Missed those dead-lettered because
	// the deadline had passed or a retry would have landed after it
	// (reasons deadline and expired), summed over every relay, from the
	// relay_timeliness bucket. They are apart from Dead because they
	// outlive the DLQ's max age, a replay and a purge: they are the
	// subscriber's whole record since it was added. Both are 0 when its
	// events carry no deadline, or the relays predate the bucket.
	Met    uint64 `json:"met"`
	Missed uint64 `json:"missed"`
	// InTime is Met/(Met+Missed), from 0 to 1: the success that counts
	// for a subscriber whose events have a deadline. Nil when both are 0,
	// which is no ratio rather than a ratio of 0.
	InTime *float64 `json:"in_time,omitempty"`
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
	// PausedUntil is the end of a subscriber-wide pause (a Retry-After or
	// a rate-limit reset) when it is still in the future; zero otherwise.
	PausedUntil time.Time `json:"paused_until,omitzero"`
	// Circuit is the breaker's state: closed, open (cooling down, nothing is
	// sent) or half-open (one probe may go).
	Circuit ratelimit.Circuit `json:"circuit"`
	// Failures is how many failures opened the circuit (the window of the
	// relay that opened it), until a success closes it.
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

// Report is what `relay status` prints: the summary line, a row per
// subscriber, and the streams' use against their limits.
type Report struct {
	// Summary adds the rows up.
	Summary Summary
	// Subscribers are the rows, sorted by id.
	Subscribers []Subscriber
	// Streams are EVENTS, DELIVERIES, RETRIES, DLQ and BODIES (where it
	// exists), in that order, from the stream infos the report reads
	// anyway (see [Streams]).
	Streams []Stream
}

// Collect reads the status of each of subs from NATS, as `relay status`
// prints it, with the rows sorted by id; an empty slice, not nil, when subs
// is empty, so that the JSON form is []; and the relay streams' use
// against their limits, with or without subscribers. sharedLanes is relay run's --lanes,
// which decides the lane of every subscriber without a dedicated one; below
// 1 Collect returns [ErrInvalidLanes].
//
// The streams and the relay_ratelimit bucket must exist (`relay run`
// creates them); a lane consumer that does not exist yet counts as nothing
// in flight, a subscriber without a relay_ratelimit entry has a full
// bucket and a closed breaker, as the rate limiter treats it, and one
// without a relay_timeliness entry (or a cluster without the bucket, whose
// relays predate it) has no deadline counts.
func Collect(ctx context.Context, js jetstream.JetStream, subs []subscribers.Subscriber, sharedLanes int) (Report, error) {
	if sharedLanes < 1 {
		return Report{}, fmt.Errorf("%w, got %d", ErrInvalidLanes, sharedLanes)
	}
	out := make([]Subscriber, len(subs))
	r, err := open(ctx, js)
	if err != nil {
		return Report{}, err
	}
	use := make([]Stream, 0, len(streamNames))
	for _, s := range []jetstream.Stream{r.events, r.deliveries, r.retries, r.dlq, r.bodies, r.attempts} {
		if s != nil {
			use = append(use, streamUse(s.CachedInfo()))
		}
	}
	if len(subs) == 0 {
		return Report{Subscribers: out, Streams: use}, nil
	}
	c, err := r.counts(ctx, everyone)
	if err != nil {
		return Report{}, err
	}
	entries, err := r.rateEntries(ctx, "*")
	if err != nil {
		return Report{}, err
	}
	deadlines, err := r.timelinessCounts(ctx, "*")
	if err != nil {
		return Report{}, err
	}
	if err := r.rows(ctx, c, entries, deadlines, subs, sharedLanes, out); err != nil {
		return Report{}, err
	}
	slices.SortFunc(out, func(a, b Subscriber) int { return cmp.Compare(a.ID, b.ID) })
	s := Summarize(out)
	// Both counts are of the same moment only roughly: a schedule that
	// fires in between must not make the parked count wrap around.
	s.Scheduled = c.scheduled
	s.Parked = c.retries - min(c.scheduled, c.retries)
	return Report{Summary: s, Subscribers: out, Streams: use}, nil
}

// reader holds what the reads of one report go through.
type reader struct {
	nc                       *nats.Conn
	deliveries, retries, dlq jetstream.Stream
	// events, bodies and attempts are read for the streams' use alone;
	// bodies and attempts are nil when the stream does not exist (relays
	// older than it, or that record no attempts).
	events, bodies, attempts jetstream.Stream
	// timeliness is the relay_timeliness bucket's stream, nil when the
	// bucket does not exist: relays older than it never created it, and
	// their cluster's report shows no deadline counts rather than fail.
	timeliness jetstream.Stream
}

// open looks up the streams and the buckets a report reads: seven stream
// infos without subjects, each a small request. EVENTS comes last: a user
// who may not read the buckets is told so first, as before the report
// showed the streams' use.
func open(ctx context.Context, js jetstream.JetStream) (*reader, error) {
	r := &reader{nc: js.Conn()}
	for _, s := range []struct {
		name string
		dst  *jetstream.Stream
	}{{streams.Deliveries, &r.deliveries}, {streams.Retries, &r.retries}, {streams.DLQ, &r.dlq}} {
		stream, err := js.Stream(ctx, s.name)
		if err != nil {
			return nil, streamErr(s.name, err)
		}
		*s.dst = stream
	}
	if _, err := js.KeyValue(ctx, streams.RateLimitBucket); err != nil {
		return nil, fmt.Errorf("opening KV bucket %s (relay run creates it): %w", streams.RateLimitBucket, err)
	}
	stream, err := js.Stream(ctx, "KV_"+streams.TimelinessBucket)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
	case err != nil:
		return nil, fmt.Errorf("opening KV bucket %s: %w", streams.TimelinessBucket, err)
	default:
		r.timeliness = stream
	}
	if r.events, err = js.Stream(ctx, streams.Events); err != nil {
		return nil, streamErr(streams.Events, err)
	}
	// BODIES' row is shown where it can be read: a cluster whose relays
	// predate it, or a user not yet granted its info, gets the others.
	if r.bodies, err = js.Stream(ctx, streams.Bodies); err != nil {
		r.bodies = nil
	}
	// ATTEMPTS' too: relays that record no attempts create none.
	if r.attempts, err = js.Stream(ctx, streams.Attempts); err != nil {
		r.attempts = nil
	}
	return r, nil
}

// rows fills out[i] with the status of subs[i] from the counts c, the
// relay_ratelimit entries, the relay_timeliness counts and the reads that
// have no aggregate form: an oldest message each that has a queue, and a
// consumer info per lane in use, [readers] of them on the wire at once.
func (r *reader) rows(ctx context.Context, c counts, entries map[string]kvEntry, deadlines map[string]timeliness.Counts, subs []subscribers.Subscriber, sharedLanes int, out []Subscriber) error {
	lanesInUse := map[string]*int{}
	for i, sub := range subs {
		out[i] = baseRow(sub, sharedLanes, c)
		if e, ok := entries[sub.ID]; ok {
			rateState(sub, &e, c.now, &out[i])
		} else {
			rateState(sub, nil, c.now, &out[i])
		}
		inTime(deadlines[sub.ID], &out[i])
		if lanesInUse[out[i].Lane] == nil {
			lanesInUse[out[i].Lane] = new(int)
		}
	}

	p := pool.New().WithMaxGoroutines(readers).WithContext(ctx).WithCancelOnError().WithFirstError()
	for lane, n := range lanesInUse {
		p.Go(func(ctx context.Context) error {
			// Reads, asked again when unanswered: on a loaded server one
			// of thousands may wait past its timeout, and the report
			// should not fail for it.
			return streams.AskAgain(ctx, func(ctx context.Context) error {
				v, err := laneInFlight(ctx, r.deliveries, lane)
				*n = v
				return err
			})
		})
	}
	for i := range out {
		if out[i].Pending == 0 {
			continue
		}
		row := &out[i]
		p.Go(func(ctx context.Context) error {
			return streams.AskAgain(ctx, func(ctx context.Context) error {
				return readOldest(ctx, r.deliveries, c.firstSeq, c.now, row)
			})
		})
	}
	if err := p.Wait(); err != nil {
		return err
	}
	for i := range out {
		out[i].LaneInFlight = *lanesInUse[out[i].Lane]
		settle(&out[i], subs[i], c.now)
	}
	return nil
}

// baseRow is the row of sub from its configuration and the counts c, before
// the per-subscriber reads.
func baseRow(sub subscribers.Subscriber, sharedLanes int, c counts) Subscriber {
	row := Subscriber{
		ID:         sub.ID,
		State:      Enabled,
		Lane:       sub.Lane(sharedLanes),
		Dedicated:  sub.Dedicated,
		Queued:     c.queued[sub.ID],
		Overflow:   c.overflow[sub.ID],
		Rate:       sub.Rate,
		Burst:      sub.Burst,
		Circuit:    ratelimit.Closed,
		MaxBacklog: sub.Backlog(),
	}
	row.Pending = row.Queued + row.Overflow
	if dead := c.dead[sub.ID]; len(dead) > 0 {
		row.DeadByReason = maps.Clone(dead)
		for _, n := range dead {
			row.Dead += n
		}
	}
	return row
}

// settle decides the state of row once everything is read: disabled wins
// over an operator's pause, which wins over a Retry-After pause; and the
// hint, which needs the parked count when there is one.
func settle(row *Subscriber, sub subscribers.Subscriber, now time.Time) {
	switch {
	case sub.Disabled:
		row.State, row.DisabledReason = Disabled, sub.DisabledReason
	case sub.SealedWith() != "":
		row.State, row.PauseReason = Paused, BySealedKey
	case sub.PausedAt(now):
		row.State, row.PauseReason, row.ResumesAt = Paused, ByOperator, utcOrZero(sub.PausedUntil)
	case !row.PausedUntil.IsZero():
		row.State, row.PauseReason = Paused, ByRetryAfter
	}
	row.Hint = hint(*row)
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
		return fmt.Errorf("stream %s does not exist (relay run creates it): %w", name, err)
	}
	return fmt.Errorf("reading stream %s: %w", name, err)
}

// laneInFlight is the NumAckPending of a lane's consumer, 0 when the lane
// has no consumer yet (no relay has started it).
func laneInFlight(ctx context.Context, deliveries jetstream.Stream, lane string) (int, error) {
	c, err := deliveries.Consumer(ctx, streams.LaneConsumer(lane))
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("reading consumer %s: %w", streams.LaneConsumer(lane), err)
	}
	return c.CachedInfo().NumAckPending, nil
}

// readOldest fills the oldest-pending fields of row: the first message at
// or after firstSeq on deliveries.*.<id>, whichever lane it is on. A queue
// drained since the counts were taken leaves them empty.
func readOldest(ctx context.Context, deliveries jetstream.Stream, firstSeq uint64, now time.Time, row *Subscriber) error {
	msg, err := deliveries.GetMsg(ctx, max(firstSeq, 1), jetstream.WithGetMsgSubject(streams.SubscriberDeliveries(row.ID)))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the oldest delivery of %s: %w", row.ID, err)
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

// hint is the advice of [Subscriber.Hint] for row: its pending deliveries,
// and its parked ones where they were counted, against its --max-backlog
// (the fan-out is shedding its copies); an open circuit, which relay sub
// resume closes; a disabled subscriber, which gets no copy of new events;
// and, for a subscriber neither paused nor broken, its backlog against its
// rate, which a lane of its own may help. The backlog of a pause or an
// open circuit is theirs, not its rate's, and gets no advice about lanes.
func hint(row Subscriber) string {
	backlog := float64(row.Pending)
	if row.Parked != nil {
		backlog += float64(*row.Parked)
	}
	if row.MaxBacklog > 0 && backlog >= float64(row.MaxBacklog) {
		return fmt.Sprintf("%.0f deliveries wait, its --max-backlog is %d: new copies are dead-lettered as backlog (relay dlq replay --subscriber %s --reason backlog once it recovers)",
			backlog, row.MaxBacklog, row.ID)
	}
	switch {
	case row.State == Disabled:
		return fmt.Sprintf("disabled: new events are not copied to it; what waits is held until relay sub enable %s", row.ID)
	case row.Circuit != ratelimit.Closed && row.Circuit != "":
		// Its backlog is the open circuit's, not its rate's: a lane of
		// its own would not move it.
		return fmt.Sprintf("its circuit is %s: once its receiver answers (relay sub test %s), relay sub resume %s closes it", row.Circuit, row.ID, row.ID)
	case row.State == Paused:
		return ""
	}
	if row.Dedicated || row.Rate <= 0 {
		return ""
	}
	if backlog <= row.Rate*HintBacklog.Seconds() {
		return ""
	}
	return fmt.Sprintf("backlog of %.0f s at its rate: consider --lane dedicated", backlog/row.Rate)
}
