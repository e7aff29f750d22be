package lanes

import (
	"context"
	"errors"
	"time"

	"github.com/relay-dev/relay/internal/deadletter"
	"github.com/relay-dev/relay/internal/overflow"
	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/streams"
)

// The way to and from overflow. A held message goes to overflow once on its
// way (one write) and comes back once (one more), whatever the backlog's
// length and the rate: nothing cycles on a timer, and a message brought
// back stays held (through a shrinking share, or a pause shorter than
// keepBroughtBack) rather than go out again. Only a pause or open circuit
// longer than that sends it out a second time: then two more writes are
// nothing beside the wait.

// lateInOverflow dead-letters, as a refill reads it, a delivery whose
// deadline passed while it waited in its subscriber's overflow: bringing it
// back would cost two writes for a message that can only die.
func (e *engine) lateInOverflow(id string, m overflow.Msg) func(context.Context) error {
	// An unreadable deadline is not judged here: brought back, the copy is
	// dead-lettered as malformed (see dispatch).
	deadline, malformed := streams.TimeOf(m.Header, streams.HeaderDeadline)
	if malformed != "" || deadline.IsZero() || e.cfg.Clock.Now().Before(deadline) {
		return nil
	}
	return func(ctx context.Context) error {
		death := deadletter.Death{Reason: deadletter.Deadline, OriginSeq: m.Seq}
		death.Attempts, death.FirstAttemptAt = streams.AttemptsOf(m.Header)
		seq, err := e.deadLetter(ctx, id, m.Data, m.Header, death)
		if err == nil {
			e.recordDeath(m.Header.Get(streams.HeaderEventID), id, death, seq)
		}
		return err
	}
}

// stored is told when a delivery of this subscriber reached its overflow:
// the backlog is there for sure, whatever a refill read meanwhile.
func (s *scheduler) stored() {
	s.mu.Lock()
	s.backlog = true
	s.puts++
	s.syncLocked()
	s.mu.Unlock()
	s.signal()
}

// marks returns whether the scheduler takes its subscriber for one with a
// backlog, and how many of its deliveries it has stored in overflow so far.
func (s *scheduler) marks() (backlog bool, puts uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.backlog, s.puts
}

// noBacklog is told that a look at the stream, begun when the scheduler had
// stored puts deliveries in overflow, found none of its subscriber's there:
// unless one was stored since or a refill is on its way, it has no backlog.
// A relay whose refills another relay made (see [scheduler.refillLocked])
// learns so here, within a sweep, and its fan-out and lane stop sending
// new copies to overflow.
func (s *scheduler) noBacklog(puts uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.backlog || s.refilling || s.puts != puts {
		return
	}
	s.backlog, s.next = false, 0
	s.syncLocked()
}

// kick makes sure a scheduler with a backlog runs: after a subscriber is
// enabled, when a sweep finds a backlog, when a pause ends.
func (s *scheduler) kick(ctx context.Context, backlog bool) {
	s.lane.starting.RLock()
	defer s.lane.starting.RUnlock()
	s.mu.Lock()
	if s.stopped || s.lane.stopping.Load() {
		s.mu.Unlock()
		return
	}
	s.backlog = s.backlog || backlog
	s.syncLocked()
	start := !s.running && (s.backlog || len(s.queue) > 0)
	s.running = s.running || start
	s.mu.Unlock()
	if start {
		s.lane.work.Go(func() { s.loop(ctx, nil) })
	} else {
		s.signal()
	}
}

// refillLocked starts bringing the backlog back when the queue has run down
// to half its hold limit, one refill at a time.
//
// One relay at a time refills a subscriber (see [overflow.Refiller.Refill]):
// while another does, this one starts none, and the copies that relay brings
// back reach this one's queue as well.
func (s *scheduler) refillLocked(ctx context.Context, sub *subscribers.Subscriber, hold int, now time.Time) {
	if !s.backlog || s.refilling || s.lane.env.refiller.Busy(s.id) {
		return
	}
	if s.expect > 0 && !now.Before(s.expectUntil) {
		s.expect = 0
	}
	room := hold - len(s.queue) - s.expect
	if room < max(1, hold/2) {
		return
	}
	if s.cautious {
		if len(s.queue)+s.expect+len(s.inFlight) > 0 {
			return
		}
		room = 1
	}
	room = min(room, maxRefill)
	s.refilling = true
	// The copies may arrive before the refill returns: they are expected
	// from now on, and what did not come back is taken off after.
	s.expect += room
	s.expectUntil = now.Add(expectFor)
	from, subject, puts := s.next, streams.DeliverySubject(sub.Lane(s.lane.cfg.SharedLanes), s.id), s.puts
	s.lane.work.Go(func() {
		moved, next, more, err := s.lane.env.refiller.Refill(context.WithoutCancel(ctx), s.id, subject, from, room)
		switch {
		case errors.Is(err, overflow.ErrLeased):
			// Another relay is at it; Busy keeps this one from asking
			// again for a while.
		case err != nil:
			s.lane.log.Warn("lanes: bringing back a backlog", "subscriber", s.id, "err", err)
			s.sleep(ctx, failedRetry, false)
		}
		s.mu.Lock()
		s.refilling = false
		s.next = next
		s.expect = max(0, s.expect-(room-moved))
		s.expectUntil = s.lane.cfg.Clock.Now().Add(expectFor)
		if err == nil && !more {
			// Nothing left from next on: read from the start next time,
			// whatever became of the stream's sequence meanwhile.
			s.next = 0
			if s.puts == puts {
				s.backlog = false
			}
		}
		s.syncLocked()
		s.mu.Unlock()
		s.signal()
	})
}

func (s *scheduler) toOverflow(held []delivery) {
	for _, d := range held {
		s.lane.toOverflow(d, s.id, s.stored)
	}
}
