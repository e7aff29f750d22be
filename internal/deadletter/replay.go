package deadletter

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sourcegraph/conc/pool"

	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/streams"
)

// maxFailStreak is how many entries in a row a replay may fail to re-enqueue
// before it gives up: one failure is a full queue or a blip, ten in a row a
// cluster that cannot take writes.
const maxFailStreak = 10

// removeTimeout bounds the removal of an entry whose copy is stored.
const removeTimeout = 5 * time.Second

// replayWorkers is how many entries a replay has on their way at once.
const replayWorkers = 16

// replayMsgID is the Nats-Msg-Id of the copy a replay puts back on
// DELIVERIES (docs/dead-letters.md: replay-<DLQ sequence>), so that two replays of one
// entry at once, or a replay run again after a crash between its publish and
// its removal of the entry, enqueue one copy.
func replayMsgID(seq uint64) string { return streams.ReplayID(seq) }

// Replayer puts dead letters back on their subscriber's lane, where they go
// through the lane's rate limit, pause and breaker like any delivery, and
// removes each from the DLQ once JetStream has acknowledged its copy.
type Replayer struct {
	// JS is the JetStream context; required.
	JS jetstream.JetStream
	// Store is the subscriber bucket; required. A replay for a subscriber it
	// lacks is refused.
	Store *subscribers.Store
	// SharedLanes is relay run's --lanes, which decides each subscriber's
	// shared lane; required.
	SharedLanes int
	// IgnoreDeadline replays entries that died of their deadline, or whose
	// Relay-Deadline has passed, without that header. Without it such
	// entries are skipped: they would only die again.
	IgnoreDeadline bool
	// Enable enables the disabled subscribers of the selection before the
	// replay; without it a selection with one is refused.
	Enable bool
	// Now is the clock that judges deadlines; nil means time.Now.
	Now func() time.Time
	// Progress, when set, is called after each entry with how many of the
	// plan's entries are done.
	Progress func(done, total int)
}

// Plan is what a replay will do, decided before anything leaves the DLQ.
type Plan struct {
	// Selected is how many entries the filter selected.
	Selected int
	// Late is how many of them died of their deadline or are past it: they
	// are skipped unless [Replayer.IgnoreDeadline].
	Late int
	// Disabled lists the disabled subscribers of the selection.
	Disabled []string
	// Subscribers counts the selected entries by subscriber.
	Subscribers map[string]int
	// Unknown counts the selected entries by subscriber that no longer
	// exists (removed since they died): they are skipped, and stay in the
	// DLQ.
	Unknown map[string]int

	entries []planned
	lanes   map[string]string
}

// planned is one selected entry: enough to find it again, not its body.
type planned struct {
	seq        uint64
	subscriber string
	late       bool
	malformed  bool
}

// Summary is what a replay did.
type Summary struct {
	// Replayed entries were re-enqueued and removed from the DLQ.
	Replayed int
	// Skipped entries were left in the DLQ for their deadline, or were gone
	// or re-enqueued already (by another replay at the same time, or by one
	// that stopped half-way).
	Skipped int
	// Failed entries could not be re-enqueued and stay in the DLQ.
	Failed int
	// SkippedBy counts the skipped entries by why (the Skip… reasons).
	SkippedBy map[string]int
}

// Why a replay skips an entry, as [Summary.SkippedBy] counts them.
const (
	// SkipUnknown: its subscriber no longer exists.
	SkipUnknown = "subscriber removed"
	// SkipLate: it died of its deadline, or is past it.
	SkipLate = "past its deadline"
	// SkipNoBody: its body was lost before it could be sent (see
	// [Message.Bodiless]).
	SkipNoBody = "no body"
	// SkipGone: replayed or purged meanwhile, by another command.
	SkipGone = "gone meanwhile"
	// SkipMalformed: its event cannot be sent as published (reason
	// malformed); it would die again.
	SkipMalformed = "malformed"
)

// skip counts one skipped entry.
func (s *Summary) skip(why string) {
	s.Skipped++
	if s.SkippedBy == nil {
		s.SkippedBy = map[string]int{}
	}
	s.SkippedBy[why]++
}

func (r *Replayer) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// Plan selects the entries f names and checks that they can be replayed:
// f.Subscriber, when given, exists (else an error wrapping
// [ErrUnknownSubscriber]); the entries of other subscribers that no longer
// exist are counted in Unknown and skipped; none is disabled unless Enable (else [ErrSubscriberDisabled]),
// and every lane they go to has its consumer on DELIVERIES (else
// [ErrNoLane]: a lane no relay reads would hold them for ever). Nothing is
// changed. A plan keeps 8 bytes or so per entry, not the entries.
func (r *Replayer) Plan(ctx context.Context, f Filter) (*Plan, error) {
	if r.JS == nil || r.Store == nil || r.SharedLanes < 1 {
		return nil, errors.New("a Replayer needs JS, Store and SharedLanes")
	}
	p := &Plan{Subscribers: map[string]int{}, Unknown: map[string]int{}, lanes: map[string]string{}}
	now := r.now()
	names := map[string]string{} // interned subscriber ids
	err := Scan(ctx, r.JS, f, func(e Entry) error {
		id, ok := names[e.Subscriber]
		if !ok {
			id = e.Subscriber
			names[id] = id
		}
		late := r.late(e, now)
		p.entries = append(p.entries, planned{seq: e.DLQSeq, subscriber: id, late: late, malformed: e.Reason == Malformed})
		p.Subscribers[id]++
		if late {
			p.Late++
		}
		return nil
	})
	if err != nil && !errors.Is(err, ErrMalformedEntry) {
		return nil, err
	}
	malformed := err
	p.Selected = len(p.entries)
	ids := slices.Sorted(maps.Keys(p.Subscribers))
	if f.Subscriber != "" && p.Subscribers[f.Subscriber] == 0 {
		ids = append(ids, f.Subscriber)
	}
	for _, id := range ids {
		sub, err := r.Store.Get(ctx, id)
		if (errors.Is(err, subscribers.ErrNotFound) || errors.Is(err, subscribers.ErrInvalid)) && id != f.Subscriber {
			// Removed, or no subscriber at all (dlq.~.unroutable).
			p.Unknown[id] = p.Subscribers[id]
			continue
		}
		if errors.Is(err, subscribers.ErrNotFound) {
			return nil, fmt.Errorf("%w: %s (relay sub ls lists them; relay sub add it again, or purge its dead letters)", ErrUnknownSubscriber, id)
		}
		if err != nil {
			return nil, err
		}
		if sub.Disabled {
			p.Disabled = append(p.Disabled, id)
		}
		p.lanes[id] = sub.Lane(r.SharedLanes)
	}
	if len(p.Disabled) > 0 && !r.Enable {
		return nil, fmt.Errorf("%w: %s", ErrSubscriberDisabled, strings.Join(p.Disabled, ", "))
	}
	checked := map[string]bool{}
	for _, lane := range p.lanes {
		if checked[lane] {
			continue
		}
		checked[lane] = true
		_, err := r.JS.Consumer(ctx, streams.Deliveries, streams.LaneConsumer(lane))
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			return nil, fmt.Errorf("%w: no consumer lane_%s on %s (give --lanes as relay run has it, and run relay once since the subscriber was added)", ErrNoLane, lane, streams.Deliveries)
		}
		if err != nil {
			return nil, fmt.Errorf("checking lane %s: %w", lane, err)
		}
	}
	return p, malformed
}

// Run replays the plan's entries, oldest first (a few at a time, so they
// may reach their lane a little out of order, as webhooks may). Each goes back to
// deliveries.<lane>.<subscriber> with its body and event headers (so the
// same webhook-id), without the DLQ's headers and the attempt headers (a
// fresh attempt count and first-attempt time) and with Nats-Msg-Id
// replay-<DLQ sequence>; only once JetStream has acknowledged the copy is
// the entry removed from the DLQ. Late entries are skipped unless
// IgnoreDeadline, which drops their Relay-Deadline. With Enable, the
// disabled subscribers of the plan are enabled first.
//
// It stops at ctx's end, or after [maxFailStreak] entries in a row failed,
// and returns what it did with the error; entries not replayed stay in the
// DLQ, and running the replay again finishes it.
func (r *Replayer) Run(ctx context.Context, p *Plan) (Summary, error) {
	var sum Summary
	if r.Enable {
		for _, id := range p.Disabled {
			if err := r.Store.SetDisabled(ctx, id, false, ""); err != nil {
				return sum, fmt.Errorf("enabling %s: %w", id, err)
			}
		}
	}
	stream, err := r.JS.Stream(ctx, streams.DLQ)
	if err != nil {
		return sum, fmt.Errorf("opening stream %s: %w", streams.DLQ, err)
	}
	// A few entries are on their way at once: each costs three round trips
	// (read, publish, remove), and one at a time would leave the server
	// idle between them.
	var (
		mu       sync.Mutex
		firstErr error
		streak   int
		done     int
	)
	work, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	workers := pool.New().WithMaxGoroutines(replayWorkers)
	for _, e := range p.entries {
		if work.Err() != nil {
			break
		}
		workers.Go(func() {
			if work.Err() != nil {
				return
			}
			why, err := r.replay(work, stream, e, p.lanes[e.subscriber])
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil && work.Err() != nil:
				return // stopping: not this entry's failure
			case err != nil:
				sum.Failed++
				streak++
				if firstErr == nil {
					firstErr = err
				}
				if streak >= maxFailStreak {
					stop(fmt.Errorf("stopped after %d failures in a row: %w", streak, err))
				}
			case why == "":
				sum.Replayed++
				streak = 0
			default:
				sum.skip(why)
				streak = 0
			}
			done++
			if r.Progress != nil {
				r.Progress(done, len(p.entries))
			}
		})
	}
	workers.Wait()
	if err := context.Cause(work); err != nil && !errors.Is(err, context.Canceled) {
		return sum, err
	}
	if err := ctx.Err(); err != nil {
		return sum, err
	}
	return sum, firstErr
}

// replay re-enqueues one entry and removes it from the DLQ. It returns why
// it skipped the entry (a Skip… reason), or "" once it replayed it.
func (r *Replayer) replay(ctx context.Context, stream jetstream.Stream, e planned, lane string) (string, error) {
	switch {
	case lane == "":
		return SkipUnknown, nil
	case e.malformed:
		return SkipMalformed, nil
	case e.late && !r.IgnoreDeadline:
		return SkipLate, nil
	}
	m, err := get(ctx, stream, e.seq)
	if errors.Is(err, ErrNotFound) {
		return SkipGone, nil
	}
	if err != nil {
		return "", err
	}
	if m.Bodiless() {
		return SkipNoBody, nil
	}
	msg := &nats.Msg{
		Subject: streams.DeliverySubject(lane, m.Subscriber),
		Header:  replayHeader(m.Header, r.IgnoreDeadline),
		Data:    m.Body,
	}
	ack, err := r.JS.PublishMsg(ctx, msg, jetstream.WithMsgID(replayMsgID(e.seq)))
	if err != nil {
		return "", fmt.Errorf("re-enqueueing DLQ sequence %d on %s: %w", e.seq, msg.Subject, err)
	}
	// Once its copy is stored the entry must go, even when the replay is
	// being stopped: left behind, it would be enqueued again by a run after
	// the duplicate window.
	rmCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), removeTimeout)
	defer cancel()
	if err := remove(rmCtx, stream, e.seq); err != nil {
		return "", fmt.Errorf("DLQ sequence %d was re-enqueued but not removed (a replay run again will not enqueue it twice within %s): %w",
			e.seq, "the DELIVERIES duplicate window", err)
	}
	if ack.Duplicate {
		return SkipGone, nil // re-enqueued already, by a replay at the same time
	}
	return "", nil
}

// replayHeader is the header of a replayed copy: the dead letter's without
// JetStream's, the DLQ's own and the attempt headers, and without
// Relay-Deadline when the deadline is ignored.
func replayHeader(h nats.Header, dropDeadline bool) nats.Header {
	return streams.CopyHeader(h, 0, isOwnHeader, isAttemptHeader, func(k string) bool {
		return dropDeadline && strings.EqualFold(k, streams.HeaderDeadline)
	})
}

// isAttemptHeader reports the headers a delivery's attempts and its trips
// through overflow leave on it, which a replay resets; and Relay-Event-Seq,
// which a dead letter that holds its body never needs, and which would
// make the replayed copy look for its body elsewhere.
func isAttemptHeader(name string) bool {
	return strings.EqualFold(name, streams.HeaderAttempt) || strings.EqualFold(name, streams.HeaderOverflowSeq) ||
		strings.EqualFold(name, streams.HeaderEventSeq)
}

// Skips reports whether Run would leave e in the DLQ for its deadline,
// because its event is malformed, or because its body was lost.
func (r *Replayer) Skips(e Entry) bool {
	return e.Reason == Malformed || e.Reason == BodyLost || (!r.IgnoreDeadline && r.late(e, r.now()))
}

// late reports whether e died of its deadline or is past it.
func (r *Replayer) late(e Entry, now time.Time) bool {
	return e.Reason == Deadline || e.Reason == Expired || (e.Deadline != nil && !now.Before(*e.Deadline))
}
