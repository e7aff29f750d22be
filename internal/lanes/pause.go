package lanes

import (
	"context"
	"time"

	"github.com/relay-dev/relay/internal/ratelimit"
	"github.com/relay-dev/relay/internal/subscribers"
)

// Pauses: a Retry-After or an open circuit, which the rate limiter reports,
// and an operator's pause, which the subscriber's record says. Through a
// pause long enough (parkAfter) what the subscriber holds waits in
// overflow. An operator's pause is kept as a disabled subscriber is: the
// loop stops, and a subscriber change (resume) or the sweep (a pause whose
// time has passed) starts it again.

// heldUntilLocked is when the subscriber may next be sent to, as far as is
// known for certain at now: the end of a Retry-After pause or an open
// circuit, or of an operator's pause that has an end; now when nothing
// holds it (an operator's pause without an end, or a disabled subscriber,
// may end at any time).
func (s *scheduler) heldUntilLocked(sub subscribers.Subscriber, now time.Time) time.Time {
	until := now
	if now.Before(s.pausedUntil) {
		until = s.pausedUntil
	}
	if sub.PausedAt(now) && !sub.PausedUntil.IsZero() && sub.PausedUntil.After(until) {
		until = sub.PausedUntil
	}
	return until
}

// leaveLocked ends the loop of a subscriber that is disabled, paused or
// gone: what it holds waits in overflow (a gone one's is settled as
// unknown; what it left in overflow is the sweep's). It is called with s.mu
// held and returns with it released.
func (s *scheduler) leaveLocked(ctx context.Context, inView bool) {
	var held []delivery
	if inView {
		held = s.takeLocked(0, false)
	} else {
		held = append([]delivery(nil), s.queue...)
		s.queue, s.buf = nil, nil
		s.backlog, s.next = false, 0
	}
	s.running = false
	s.expect = 0
	s.syncLocked()
	s.mu.Unlock()
	for _, d := range held {
		if inView {
			s.lane.toOverflow(d, s.id, s.stored)
		} else {
			s.lane.work.Go(func() { s.lane.unknownSubscriber(context.WithoutCancel(ctx), d, s.id) })
		}
	}
}

// pauseLocked waits out a pause or an open circuit: what the subscriber
// holds leaves the lane until then, holding no slot and burning no attempt
// (what was brought back already stays through a short wait); what the
// wait carries past its deadline dies now. It is called with s.mu held and
// returns with it released.
func (s *scheduler) pauseLocked(ctx context.Context, now time.Time) {
	doomed := s.takeDoomedLocked(s.pausedUntil)
	held := s.takeLocked(0, s.pausedUntil.Sub(now) < keepBroughtBack)
	until := s.pausedUntil
	select {
	case <-s.lifted: // a lift that came while no wait was on
	default:
	}
	s.syncLocked()
	s.mu.Unlock()
	s.deadLetterAll(ctx, doomed)
	s.toOverflow(held)
	s.lane.waiting.Add(1) // the subscriber's wait: not a stall (see stall.go)
	select {
	case <-ctx.Done():
	case <-s.lifted:
	case <-s.lane.cfg.Clock.After(until.Sub(now)):
	}
	s.lane.waiting.Add(-1)
}

// lift ends a pause or an open circuit before the time it was known to
// end, as the limiter saw it end by a write (relay sub resume, or another
// relay's probe): the loop's wait in pauseLocked ends, and what waits in
// overflow comes back, one delivery first after an open circuit.
func (s *scheduler) lift() {
	s.mu.Lock()
	waiting := s.lane.cfg.Clock.Now().Before(s.pausedUntil)
	s.pausedUntil = time.Time{}
	s.lifts++
	s.mu.Unlock()
	if waiting {
		select {
		case s.lifted <- struct{}{}:
		default:
		}
	}
}

// wait acts on a decision that holds the next request: a pause or an open
// circuit long enough to park for begins a pause (see pauseLocked); a
// shorter wait, for a token among them, is slept here, waking by the head's
// deadline to let it go rather than a token later. lifts is the count of
// lifts when the limiter was asked: an answer that a lift has overtaken
// since (relay sub resume) begins no pause, and the loop asks again.
func (s *scheduler) wait(ctx context.Context, dec ratelimit.Decision, headDeadline time.Time, lifts uint64) {
	if dec.Verdict != ratelimit.Token && dec.Wait >= parkAfter {
		s.mu.Lock()
		if s.lifts != lifts {
			s.mu.Unlock()
			return
		}
		now := s.lane.cfg.Clock.Now()
		if !now.Before(s.pausedUntil) {
			// A pause begins (not one extended): once per pause or open
			// circuit, on each relay.
			s.lane.log.Info("lanes: pausing a subscriber's deliveries", "subscriber", s.id,
				"why", dec.Verdict.String(), "for", dec.Wait.Round(time.Millisecond).String())
		}
		s.pausedUntil = now.Add(dec.Wait)
		// After an open circuit, or a pause long enough to send what was
		// brought back out again, one message comes back first: a
		// subscriber that is still down costs one.
		s.cautious = s.cautious || dec.Verdict == ratelimit.CircuitOpen || dec.Wait >= keepBroughtBack
		s.mu.Unlock()
		return
	}
	s.lane.waiting.Add(1) // the subscriber's wait: not a stall (see stall.go)
	defer s.lane.waiting.Add(-1)
	waitFrom := s.lane.cfg.Clock.Now()
	wait := dec.Wait
	if !headDeadline.IsZero() {
		wait = max(0, min(wait, headDeadline.Sub(waitFrom)+time.Millisecond))
	}
	s.sleep(ctx, wait, false)
	if dec.Verdict == ratelimit.Token {
		s.lane.cfg.Metrics.TokenWait(s.id, s.lane.cfg.Clock.Now().Sub(waitFrom))
	}
}
