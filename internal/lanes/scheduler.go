package lanes

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/internal/deadletter"
	"github.com/relay-dev/relay/internal/ratelimit"
	"github.com/relay-dev/relay/internal/subscribers"
)

// A subscriber's scheduler in a lane: offer takes each pulled delivery
// (Held, or InOverflow when the subscriber cannot take it now), and loop
// sends the head of the queue when the subscriber may take it. The queue is
// in queue.go, the share of the lane in share.go, pauses in pause.go, the
// way to and from overflow in refill.go, the request in send.go, its
// outcome in outcome.go; every transition of a delivery is in state.go.

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
	// lifted ends the wait of a pause or an open circuit (see
	// [scheduler.lift]).
	lifted chan struct{}
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
	// lifts counts the lifts (see [scheduler.lift]): a limiter's answer
	// asked for before the last one predates it, and begins no pause.
	lifts uint64
	// cautious: after an open circuit or a long pause, bring back one
	// message (the probe) at a time until a delivery succeeds.
	cautious bool
	// localStreak counts its requests in a row that failed locally.
	localStreak int
	// queued withdraws its request for a slot of the relay's
	// --max-requests while it waits for one, no goroutine of its own
	// waiting (see [scheduler.acquire]); nil otherwise.
	queued func() bool
}

func newScheduler(l *lane, id string) *scheduler {
	return &scheduler{
		lane:     l,
		id:       id,
		inFlight: make(map[jetstream.Msg]struct{}),
		wake:     make(chan struct{}, 1),
		lifted:   make(chan struct{}, 1),
	}
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
	s.holdLocked(d)
	s.syncLocked()
	start := !s.running
	s.running = true
	s.mu.Unlock()
	if start {
		s.lane.work.Go(func() { s.loop(ctx, nil) })
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

// loop sends held messages while there are any, each after a request slot
// of the relay, a token and a free in-flight slot; brings the backlog back
// when the queue runs low; and exits when there is nothing left to do.
//
// slot, when not nil, is a request slot the gate has handed it (see
// [scheduler.acquire]): the loop goes straight to its request.
func (s *scheduler) loop(ctx context.Context, slot func()) {
	for {
		release := slot
		slot = nil
		if release == nil {
			var again bool
			if release, again = s.ready(ctx); release == nil {
				if again {
					continue
				}
				return
			}
		}
		if s.request(ctx, release) {
			return
		}
	}
}

// ready makes one turn of the loop up to a request slot: it settles what
// must be settled before the head of the queue can go (a pause, an excess,
// a refill, late ones) and returns the slot for its request. Without one,
// again tells whether the loop takes another turn (something was settled,
// or waited for) or exits: nothing left to do, the lane stopping, or the
// gate full, with the scheduler queued for a slot, no goroutine waiting.
func (s *scheduler) ready(ctx context.Context) (release func(), again bool) {
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
		return nil, false
	}
	if !ok || sub.Disabled || sub.PausedAt(now) {
		s.leaveLocked(ctx, ok)
		return nil, false
	}
	if s.expect > 0 && !now.Before(s.expectUntil) {
		s.expect = 0
	}
	if now.Before(s.pausedUntil) {
		s.pauseLocked(ctx, now)
		return nil, true
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
		return nil, true
	}
	s.refillLocked(ctx, sub, hold, now)
	if len(s.queue) == 0 {
		if s.stopIfIdleLocked(now) {
			s.mu.Unlock()
			return nil, false
		}
		s.mu.Unlock()
		s.sleep(ctx, expectFor/4, true)
		return nil, true
	}
	if late := s.takeLateLocked(now); len(late) > 0 {
		// Past their deadline while they waited their turn: they die
		// without a token or a slot, so that what is behind them still
		// gets its chance.
		s.syncLocked()
		s.mu.Unlock()
		s.deadLetterAll(ctx, late)
		return nil, true
	}
	if len(s.inFlight) >= s.lane.cfg.Limiter.InFlight(s.id, sub.MaxInFlight) {
		// --max-in-flight, or fewer while the subscriber's failures
		// degrade it (ratelimit.DegradeFrom): a struggling receiver
		// gets less, not nothing.
		s.mu.Unlock()
		s.sleep(ctx, -1, true)
		return nil, true
	}
	s.mu.Unlock()
	// Queued for a slot (nil): the loop ends, and the gate starts it again.
	return s.acquire(ctx), false
}

// request makes the request of the head of the queue with the slot
// release, once the limiter allows; it reports whether the loop exits (it
// made the last request itself).
func (s *scheduler) request(ctx context.Context, release func()) bool {
	sub, ok := s.lane.cfg.Subscribers.Lookup(s.id)
	s.mu.Lock()
	var headDeadline time.Time
	if len(s.queue) > 0 {
		headDeadline = s.queue[0].deadline
	}
	lifts := s.lifts
	s.mu.Unlock()
	if !ok {
		// Gone while the slot was on its way: the loop's next turn
		// settles it.
		release()
		return false
	}

	// The limiter's word is the subscriber's wait: not a stall (see
	// stall.go).
	s.lane.waiting.Add(1)
	dec, err := s.lane.cfg.Limiter.Reserve(ctx, s.id, limitOf(*sub))
	s.lane.waiting.Add(-1)
	if err != nil {
		s.lane.log.Warn("lanes: rate limiter", "subscriber", s.id, "err", err)
		dec = ratelimit.Decision{Verdict: ratelimit.Token, Wait: limiterRetry}
	}
	if dec.Verdict != ratelimit.Go {
		release()
		s.wait(ctx, dec, headDeadline, lifts)
		return false
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
		return false
	}
	s.lane.begin()
	if s.lastOut() {
		// The loop would exit as soon as this request is out: it sends
		// it itself rather than start a goroutine for it, one hand-off
		// less for every event that finds its subscriber idle.
		s.attempt(ctx, d, fresh, dec, release)
		return true
	}
	s.lane.work.Go(func() { s.attempt(ctx, d, fresh, dec, release) })
	return false
}

// acquire returns a request slot of the relay's --max-requests for the
// head of the queue, or nil while they are all taken: the scheduler then
// waits its turn for one in the gate with no goroutine of its own, its loop
// ended but still marked as running, and the gate starts its loop again
// with the slot (see [scheduler.granted]). A burst over a hundred thousand
// subscribers then costs a waiter of the gate for each, not a goroutine and
// its stack.
func (s *scheduler) acquire(ctx context.Context) func() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped || s.lane.stopping.Load() {
		// Stopping: what it held is handed back by the stop, and a
		// waiter queued now would be withdrawn by no one.
		s.running = false
		return nil
	}
	// Under s.mu, so that granted, which takes it, finds queued set.
	release, cancel := s.lane.env.gate.Queue(s.id, func(release func()) { s.granted(ctx, release) })
	if release != nil {
		return release
	}
	// The wait for a request slot is the subscriber's: not a stall (see
	// stall.go).
	s.lane.waiting.Add(1)
	s.queued = cancel
	return nil
}

// granted starts the loop again with the slot the gate handed over, in the
// goroutine that released it (never one holding a scheduler's lock). A lane
// that stops keeps the slot aside, and gives it back once it no longer
// waits for its goroutines (see [lane.unqueue]).
func (s *scheduler) granted(ctx context.Context, release func()) {
	s.mu.Lock()
	s.queued = nil
	s.mu.Unlock()
	s.lane.waiting.Add(-1)
	if !s.lane.resume(func() { s.loop(ctx, release) }, release) {
		release()
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
// (see [lane.alive]) are let go on the way, once the lock is released: a
// let-go may hand a delivery back, and they come in storms.
func (s *scheduler) pop() (delivery, bool) {
	var stale []delivery
	defer func() {
		for _, d := range stale {
			s.lane.letGo(d, s.id)
		}
	}()
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.queue) > 0 && !s.stopped {
		d := s.popFrontLocked()
		if !s.lane.alive(d) {
			stale = append(stale, d)
			continue
		}
		if !d.dueBy(s.lane.cfg.Clock.Now()) {
			// Its deadline passed while the token was on its way: the
			// token goes to the next one.
			s.deadLetterAll(s.lane.ctx(), []delivery{d})
			continue
		}
		s.flyLocked(d)
		return d, true
	}
	s.syncLocked()
	return delivery{}, false
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
