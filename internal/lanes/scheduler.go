package lanes

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/internal/deadletter"
	"github.com/relay-dev/relay/internal/deliver"
	"github.com/relay-dev/relay/internal/overflow"
	"github.com/relay-dev/relay/internal/ratelimit"
	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/streams"
)

// Where a delivery is, and who moves it next (docs/delivery-rules.md
// "Isolation"):
//
//   - held: in its subscriber's queue in the lane, its ack wait kept alive;
//     the scheduler sends it when a token, an in-flight slot and a request
//     slot of the relay are free.
//   - in flight: its request is on the wire; the outcome settles it.
//   - parked: in RETRIES after a failed attempt, until its retry is due;
//     the mover puts it back on the lane (package retry).
//   - in overflow: on deliveries.overflow.<subscriber>, beyond the
//     subscriber's share of the lane, or because the subscriber is paused
//     (by a Retry-After or by an operator), its circuit open or it is
//     disabled; the scheduler brings it back when its queue runs low
//     (package overflow). An operator's pause is held as a disabled
//     subscriber is: the loop stops, and a subscriber change (resume) or
//     the sweep (a pause whose time has passed) starts it again.
//   - dead: in the DLQ (package deadletter).
//
// A held message goes to overflow once on its way (one write) and comes
// back once (one more), whatever the backlog's length and the rate: nothing
// cycles on a timer, and a message brought back stays held (through a
// shrinking share, or a pause shorter than keepBroughtBack) rather than go
// out again. Only a pause or open circuit longer than that sends it out a
// second time: then two more writes are nothing beside the wait.

func limitOf(sub subscribers.Subscriber) ratelimit.Limit {
	return ratelimit.Limit{Rate: sub.Rate, Burst: sub.Burst}
}

// HoldLimit is how many messages a subscriber may hold in a lane of
// maxAckPending slots shared with busy-1 other busy subscribers, when it
// drains drainRate messages a second: a few seconds of its work, at least
// max-in-flight, at most its fair share of the lane.
func HoldLimit(sub *subscribers.Subscriber, maxAckPending, busy int, drainRate float64) int {
	share := (maxAckPending - maxAckPending/reserveDiv) / max(1, busy)
	window := holdWindow
	if sub.Rate <= 0 {
		if busy <= 1 {
			// Alone on its lane, an unlimited subscriber takes its share
			// whatever its pace (a response time estimated on a loaded
			// machine would send a burst to overflow for nobody's sake).
			return max(1, share)
		}
		window = unlimitedHoldWindow
	}
	want := sub.MaxInFlight
	if drainRate > 0 {
		want = max(want, int(min(math.Ceil(drainRate*window.Seconds()), float64(maxAckPending))))
	}
	return max(1, min(share, want))
}

// scheduler is one subscriber's share of a lane: its held messages, its
// requests in flight, its backlog in overflow, and the loop that sends and
// refills them when the subscriber may take them.
type scheduler struct {
	lane *lane
	id   string

	mu    sync.Mutex
	queue []delivery
	// buf is the whole array the queue was last given; the pops leave room
	// at its front, which pushLocked uses before it grows the queue.
	buf      []delivery
	inFlight map[jetstream.Msg]struct{}
	running  bool
	stopped  bool
	wake     chan struct{}
	// latency is a moving average of its response time.
	latency time.Duration
	busy    bool

	// backlog: deliveries of this subscriber may wait in its overflow, and
	// new ones go behind them so that the backlog keeps its order.
	backlog   bool
	refilling bool
	// next is the overflow sequence to read from next.
	next uint64
	// expect counts messages brought back and not yet arrived, until
	// expectUntil.
	expect      int
	expectUntil time.Time
	// puts counts the deliveries stored in overflow, so that a refill that
	// read nothing does not clear a backlog stored while it ran.
	puts uint64
	// marked: the relay's Backlogs holds this subscriber.
	marked bool
	// kept is the queue's length after the last move of its excess to
	// overflow (all of it brought back already, so kept): no excess to
	// look for until the queue grows past it.
	kept int
	// pausedUntil: the subscriber is paused or its circuit open until then;
	// nothing of it waits in the lane meanwhile.
	pausedUntil time.Time
	// cautious: after an open circuit or a long pause, bring back one
	// message (the probe) at a time until a delivery succeeds.
	cautious bool
	// localStreak counts its requests in a row that failed locally.
	localStreak int
}

func newScheduler(l *lane, id string) *scheduler {
	return &scheduler{
		lane:     l,
		id:       id,
		inFlight: make(map[jetstream.Msg]struct{}),
		wake:     make(chan struct{}, 1),
	}
}

// drainRate is how fast a subscriber's queue empties on this relay: its
// rate, or for an unlimited one what its in-flight slots allow at the
// response time seen lately.
func (s *scheduler) drainRate(sub *subscribers.Subscriber) float64 {
	if sub.Rate > 0 {
		return sub.Rate
	}
	latency := s.latency
	if latency <= 0 {
		latency = assumedLatency
	}
	return float64(sub.MaxInFlight) / max(latency.Seconds(), 0.0001)
}

// share is the most a subscriber may hold in its lane with the lane-mates
// busy now, whatever its rate.
func (s *scheduler) share() int {
	return HoldLimit(&anyPace, s.lane.cfg.MaxAckPending, int(s.lane.busy.Load()), 0)
}

// anyPace is a subscriber whose hold only its share of the lane bounds.
var anyPace = subscribers.Subscriber{MaxInFlight: math.MaxInt}

func (s *scheduler) holdLimit(sub *subscribers.Subscriber) int {
	return HoldLimit(sub, s.lane.cfg.MaxAckPending, int(s.lane.busy.Load()), s.drainRate(sub))
}

// offer takes a message from the lane: held, or sent to overflow when the
// subscriber cannot take it now or has a backlog there already.
func (s *scheduler) offer(ctx context.Context, d delivery, sub subscribers.Subscriber) {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		s.lane.handBack(d.msg)
		return
	}
	now := s.lane.cfg.Clock.Now()
	refilled := d.broughtBack
	if refilled && s.expect > 0 {
		s.expect--
	}
	if until := s.heldUntilLocked(sub, now); !d.dueBy(until) {
		// Paused, or its circuit open, past the delivery's deadline: it
		// can never be sent in time, so it dies now rather than then.
		s.syncLocked()
		s.mu.Unlock()
		s.deadLetterAll(ctx, []delivery{d})
		return
	}
	hold := true
	switch {
	case sub.Disabled, sub.PausedAt(now):
		// Disabled or paused by an operator: everything of it waits in
		// overflow, at no cost, until it is enabled or resumed.
		hold = false
	case now.Before(s.pausedUntil):
		// Paused or open: only what was brought back already (a refill on
		// its way as the pause began) stays, through a short pause.
		hold = refilled && s.pausedUntil.Sub(now) < keepBroughtBack
	case refilled, d.attempts > 0:
		// Brought back because there was room, or a retry of a message
		// that was in flight: it has waited its turn.
	case s.backlog, len(s.queue) >= s.holdLimit(&sub):
		hold = false
	}
	if !hold {
		s.backlog = true
		s.syncLocked()
		s.mu.Unlock()
		s.lane.toOverflow(d, s.id, s.stored)
		return
	}
	s.pushLocked(d)
	s.syncLocked()
	start := !s.running
	s.running = true
	s.mu.Unlock()
	if start {
		s.lane.work.Go(func() { s.loop(ctx) })
	} else {
		s.signal()
	}
}

// pushLocked appends d to the queue. Each pop leaves a slot at the front of
// the queue's array that append cannot see; with a steady backlog, append
// would then make a new array every few hundred messages. So the queue
// grows to twice its length, and once it fills what is left of its array
// while taking at most half of it, it moves back to the array's front: one
// copy of a delivery per push at most, and no allocation in a steady state.
func (s *scheduler) pushLocked(d delivery) {
	if n := len(s.queue); n == cap(s.queue) {
		if n > 0 && n <= cap(s.buf)/2 && sameArrayEnd(s.buf, s.queue) {
			whole := s.buf[:cap(s.buf)]
			copy(whole, s.queue)
			clear(whole[n:])
			s.queue = whole[:n]
		} else {
			grown := make([]delivery, n, max(2*n, 2))
			copy(grown, s.queue)
			s.queue, s.buf = grown, grown[:0]
		}
	}
	s.queue = append(s.queue, d)
}

// popFrontLocked takes the queue's head, which must exist.
func (s *scheduler) popFrontLocked() delivery {
	d := s.queue[0]
	s.queue[0] = delivery{}
	s.queue = s.queue[1:]
	return d
}

// sameArrayEnd reports whether a and b, both of non-zero capacity, reach
// to the same end of the same array.
func sameArrayEnd(a, b []delivery) bool {
	return cap(a) > 0 && cap(b) > 0 && &a[:cap(a)][cap(a)-1] == &b[:cap(b)][cap(b)-1]
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
		s.lane.work.Go(func() { s.loop(ctx) })
	} else {
		s.signal()
	}
}

func (s *scheduler) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// syncLocked keeps the lane's count of busy schedulers, and the relay's set
// of subscribers with a backlog, in step with this scheduler.
func (s *scheduler) syncLocked() {
	// A backlog alone (a disabled or paused subscriber's) holds no slot.
	busy := len(s.queue) > 0 || len(s.inFlight) > 0 || s.refilling || s.expect > 0
	if busy != s.busy {
		s.busy = busy
		if busy {
			s.lane.busy.Add(1)
		} else {
			s.lane.busy.Add(-1)
		}
	}
	if s.backlog != s.marked {
		s.marked = s.backlog
		s.lane.cfg.Backlogs.Set(s.id, s.backlog)
	}
}

// takeLocked takes the held messages from the queue's from-th on and
// returns them, but for those brought back from overflow when keep is set:
// they stay, so that nothing goes out and back twice.
func (s *scheduler) takeLocked(from int, keep bool) []delivery {
	var held []delivery
	kept := s.queue[:from]
	for _, d := range s.queue[from:] {
		if keep && d.broughtBack {
			kept = append(kept, d)
		} else {
			held = append(held, d)
		}
	}
	clear(s.queue[len(kept):])
	s.queue = kept
	if len(held) > 0 {
		s.backlog = true
	}
	return held
}

// takeLateLocked takes the held messages at the head of the queue whose
// deadline has passed at now. Only the head is looked at, so that the loop
// costs the same for every message whatever the queue's length; a late one
// further back is let go when it is popped (see [scheduler.pop]).
func (s *scheduler) takeLateLocked(now time.Time) []delivery {
	n := 0
	for n < len(s.queue) && !s.queue[n].dueBy(now) {
		n++
	}
	if n == 0 {
		return nil
	}
	late := append([]delivery(nil), s.queue[:n]...)
	clear(s.queue[:n])
	s.queue = s.queue[n:]
	return late
}

// takeDoomedLocked takes the held messages whose deadline comes before
// until, the end of a pause or an open circuit: the wait would carry them
// past it. It keeps the others in order; it runs once as a pause begins, so
// its look at the whole queue is not paid per message.
func (s *scheduler) takeDoomedLocked(until time.Time) []delivery {
	var doomed []delivery
	kept := s.queue[:0]
	for _, d := range s.queue {
		if d.dueBy(until) {
			kept = append(kept, d)
		} else {
			doomed = append(doomed, d)
		}
	}
	clear(s.queue[len(kept):])
	s.queue = kept
	return doomed
}

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

// deadLetterAll dead-letters deliveries that cannot be sent by their
// deadline, each in its own goroutine of the lane: a DLQ copy waits for its
// PubAck.
func (s *scheduler) deadLetterAll(ctx context.Context, ds []delivery) {
	for _, d := range ds {
		s.lane.work.Go(func() {
			s.lane.deadLetter(context.WithoutCancel(ctx), d, s.id, deadletter.Death{Reason: d.lateReason()})
		})
	}
}

func (s *scheduler) toOverflow(held []delivery) {
	for _, d := range held {
		s.lane.toOverflow(d, s.id, s.stored)
	}
}

// loop sends held messages while there are any, each after a request slot
// of the relay, a token and a free in-flight slot; brings the backlog back
// when the queue runs low; and exits when there is nothing left to do.
func (s *scheduler) loop(ctx context.Context) {
	for {
		// The view's own entry, by pointer, never modified: this loop runs
		// for every delivery, and a copy of the subscriber would be one
		// more allocation each time (and a larger stack for every send
		// that starts here).
		sub, ok := s.lane.cfg.Subscribers.Lookup(s.id)
		now := s.lane.cfg.Clock.Now()
		s.mu.Lock()
		if s.stopped || ctx.Err() != nil {
			s.running = false
			s.mu.Unlock()
			return
		}
		if !ok || sub.Disabled || sub.PausedAt(now) {
			s.leaveLocked(ctx, ok)
			return
		}
		if s.expect > 0 && !now.Before(s.expectUntil) {
			s.expect = 0
		}
		if now.Before(s.pausedUntil) {
			s.pauseLocked(ctx, now)
			continue
		}
		hold := s.holdLimit(sub)
		share := s.share()
		if len(s.queue) <= share {
			s.kept = 0
		}
		if len(s.queue) > 2*share && len(s.queue) > s.kept {
			// Its share shrank, lane-mates got busy: the excess waits in
			// overflow rather than in their way. (Only the share: a hold
			// that follows the response time would move messages out and
			// back whenever the response time moved.)
			excess := s.takeLocked(share, true)
			s.kept = len(s.queue) // what stayed was brought back: not again
			s.syncLocked()
			s.mu.Unlock()
			s.toOverflow(excess)
			continue
		}
		s.refillLocked(ctx, sub, hold, now)
		if len(s.queue) == 0 {
			if s.stopIfIdleLocked(now) {
				s.mu.Unlock()
				return
			}
			s.mu.Unlock()
			s.sleep(ctx, expectFor/4, true)
			continue
		}
		if late := s.takeLateLocked(now); len(late) > 0 {
			// Past their deadline while they waited their turn: they die
			// without a token or a slot, so that what is behind them still
			// gets its chance.
			s.syncLocked()
			s.mu.Unlock()
			s.deadLetterAll(ctx, late)
			continue
		}
		if len(s.inFlight) >= sub.MaxInFlight {
			s.mu.Unlock()
			s.sleep(ctx, -1, true)
			continue
		}
		headDeadline := s.queue[0].deadline
		s.mu.Unlock()

		release, err := s.lane.env.gate.Acquire(ctx, s.id)
		if err != nil {
			continue // stopping
		}
		dec, err := s.lane.cfg.Limiter.Reserve(ctx, s.id, limitOf(*sub))
		if err != nil {
			s.lane.log.Warn("lanes: rate limiter", "subscriber", s.id, "err", err)
			dec = ratelimit.Decision{Verdict: ratelimit.Token, Wait: limiterRetry}
		}
		if dec.Verdict != ratelimit.Go {
			release()
			s.wait(ctx, dec, headDeadline)
			continue
		}

		// The waits for a request slot and a token may have outlasted a
		// change of the subscriber: a pause or a disable that returned
		// must stop this request, and a rotated secret must sign it.
		fresh, ok := s.lane.cfg.Subscribers.Lookup(s.id)
		held := !ok || fresh.Disabled || fresh.PausedAt(s.lane.cfg.Clock.Now())
		if ok {
			sub = fresh
		}
		var d delivery
		found := false
		if !held {
			d, found = s.pop()
		}
		if !found {
			release()
			if dec.Probe {
				// Nothing to probe with after all (or held now, which the
				// loop's first check settles): let the probe go.
				_ = s.lane.cfg.Limiter.Observe(context.WithoutCancel(ctx), s.id, limitOf(*sub), ratelimit.Result{Probe: true})
			}
			continue
		}
		s.lane.flight.Begin()
		send := func() {
			// An in-flight request finishes even when the relay is stopping,
			// within --shutdown-timeout: its outcome is then acked, parked or
			// dead-lettered, never lost; one still open then is abandoned and
			// handed back.
			defer release()
			defer s.lane.flight.End()
			start := s.lane.cfg.Clock.Now()
			s.mu.Lock()
			localIsAttempt := s.localStreak >= maxLocalStreak
			s.mu.Unlock()
			out := s.lane.send(context.WithoutCancel(ctx), s.lane.env.finishing, d, fresh, dec.Probe, localIsAttempt)
			took := s.lane.cfg.Clock.Now().Sub(start)
			s.mu.Lock()
			delete(s.inFlight, d.msg)
			if out.Class == deliver.Local {
				s.localStreak++
			} else {
				s.localStreak = 0
				s.latency = movingAverage(s.latency, took)
			}
			if out.Class == deliver.Delivered {
				if s.cautious {
					s.lane.log.Info("lanes: subscriber accepts deliveries again", "subscriber", s.id)
				}
				s.cautious = false
			}
			s.syncLocked()
			s.mu.Unlock()
			s.signal()
		}
		if s.lastOut() {
			// The loop would exit as soon as this request is out: it sends
			// it itself rather than start a goroutine for it, one hand-off
			// less for every event that finds its subscriber idle.
			send()
			return
		}
		s.lane.work.Go(send)
	}
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
	s.syncLocked()
	s.mu.Unlock()
	s.deadLetterAll(ctx, doomed)
	s.toOverflow(held)
	s.sleep(ctx, until.Sub(now), false)
}

// wait acts on a decision that holds the next request: a pause or an open
// circuit long enough to park for begins a pause (see pauseLocked); a
// shorter wait, for a token among them, is slept here, waking by the head's
// deadline to let it go rather than a token later.
func (s *scheduler) wait(ctx context.Context, dec ratelimit.Decision, headDeadline time.Time) {
	if dec.Verdict != ratelimit.Token && dec.Wait >= parkAfter {
		s.mu.Lock()
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

// lastOut reports whether the loop has nothing left to do once the request
// just popped is out (see [scheduler.stopIfIdleLocked]); if so the loop is
// marked as not running, as it would mark itself at its next turn, and a
// message offered from now on starts a new one.
func (s *scheduler) lastOut() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopIfIdleLocked(s.lane.cfg.Clock.Now())
}

// stopIfIdleLocked marks the loop as not running, and reports so, when it
// has nothing left to do at now: nothing held, nothing being brought back
// or expected, and no request out with a backlog behind it (a probe: what
// waits is brought back after it).
func (s *scheduler) stopIfIdleLocked(now time.Time) bool {
	if len(s.queue) > 0 || s.refilling || (s.expect > 0 && now.Before(s.expectUntil)) ||
		(s.backlog && len(s.inFlight) > 0) {
		return false
	}
	s.running = false
	s.expect = 0
	s.syncLocked()
	return true
}

// pop takes the next live held message and counts it in flight; stale ones
// (see [lane.alive]) are let go on the way.
func (s *scheduler) pop() (delivery, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.queue) > 0 && !s.stopped {
		d := s.popFrontLocked()
		if !s.lane.alive(d) {
			s.lane.letGo(d, s.id)
			continue
		}
		if !d.dueBy(s.lane.cfg.Clock.Now()) {
			// Its deadline passed while the token was on its way: the
			// token goes to the next one.
			s.deadLetterAll(s.lane.ctx(), []delivery{d})
			continue
		}
		s.inFlight[d.msg] = struct{}{}
		return d, true
	}
	s.syncLocked()
	return delivery{}, false
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

// movingAverage folds one response time into the average (a fifth of the
// weight to the new one). It starts from assumedLatency rather than the
// first response, which pays for a new connection: a burst's first replies
// must not make a fast subscriber look slow.
func movingAverage(avg, took time.Duration) time.Duration {
	if avg <= 0 {
		avg = assumedLatency
	}
	return avg + (took-avg)/5
}

// sleep waits for d (d < 0: no limit); woken, it also ends when a request
// finishes or a message arrives. It ends early when the lane stops.
func (s *scheduler) sleep(ctx context.Context, d time.Duration, woken bool) {
	var wake <-chan struct{}
	if woken {
		wake = s.wake
	}
	var timer <-chan time.Time
	if d >= 0 {
		timer = s.lane.cfg.Clock.After(d)
	}
	select {
	case <-ctx.Done():
	case <-wake:
	case <-timer:
	}
}

// idle reports whether the scheduler holds, sends and waits for nothing.
func (s *scheduler) idle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.running && !s.busy && !s.backlog && len(s.queue) == 0 && len(s.inFlight) == 0
}

// outstanding lists the messages held or in flight.
func (s *scheduler) outstanding() []jetstream.Msg {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]jetstream.Msg, 0, len(s.queue)+len(s.inFlight))
	for _, d := range s.queue {
		out = append(out, d.msg)
	}
	for msg := range s.inFlight {
		out = append(out, msg)
	}
	return out
}

// drain stops the scheduler and returns the messages it held but had not
// started sending.
func (s *scheduler) drain() []jetstream.Msg {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped = true
	held := make([]jetstream.Msg, 0, len(s.queue))
	for _, d := range s.queue {
		held = append(held, d.msg)
	}
	s.queue, s.buf = nil, nil
	s.backlog = false // this relay's lane no longer brings it back
	s.syncLocked()
	return held
}
