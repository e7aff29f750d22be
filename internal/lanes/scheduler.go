package lanes

import (
	"context"
	"math"
	"math/rand/v2"
	"time"

	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/internal/ratelimit"
	"github.com/relay-dev/relay/internal/subscribers"
)

// Bounds of what one subscriber may hold in its lane. A subscriber holds
// about holdWindow of work at its rate, at least max-in-flight messages and
// at most maxHold, so a throttled subscriber holds few of the lane's
// MaxAckPending slots and a fast one is never starved of messages.
const (
	holdWindow       = 2 * time.Second
	unlimitedHoldMul = 8
	maxHold          = 4096
	// maxHandBack bounds how long a handed-back message stays away.
	maxHandBack = 10 * time.Minute
	// parkAfter is the shortest wait for which a message leaves its lane
	// (parked in RETRIES) instead of waiting in it: shorter waits are not
	// worth a publish, longer ones must not hold the lane's MaxAckPending.
	parkAfter = time.Second
)

func limitOf(sub subscribers.Subscriber) ratelimit.Limit {
	return ratelimit.Limit{Rate: sub.Rate, Burst: sub.Burst}
}

// HoldLimit is how many messages a subscriber may hold in its lane before
// more are handed back.
func HoldLimit(sub subscribers.Subscriber) int {
	if sub.Rate <= 0 {
		return min(maxHold, sub.MaxInFlight*unlimitedHoldMul)
	}
	return max(sub.MaxInFlight, min(maxHold, int(math.Ceil(sub.Rate*holdWindow.Seconds()))))
}

// ReturnSlot schedules the return of a message handed back over the hold
// limit. Handed-back messages come back one every 1/rate, after the held
// ones drain and after those already handed back: about as fast as the
// subscriber takes them, so its queue stays fed without a backlog being
// cycled through RETRIES again and again. next is the first free slot (zero
// when none is taken); ReturnSlot returns the message's slot and the next
// free one.
//
// A slot more than maxHandBack away is not taken: the message comes back at
// maxHandBack and next stays where it was, so that the slots before it are
// still handed out (were they skipped, a backlog longer than maxHandBack at
// the rate would come back all at once and leave the subscriber idle).
func ReturnSlot(now, next time.Time, held int, rate float64) (at, after time.Time) {
	secs := float64(held) / rate
	if secs >= maxHandBack.Seconds() {
		return now.Add(maxHandBack), next
	}
	per := time.Duration(float64(time.Second) / rate)
	at = now.Add(time.Duration(secs * float64(time.Second)))
	if next.After(at) {
		at = next
	}
	if at.Sub(now) > maxHandBack {
		return now.Add(maxHandBack), next
	}
	return at, at.Add(per)
}

// assumedLatency stands for a subscriber's response time until one is seen.
const assumedLatency = 50 * time.Millisecond

// drainRate is how fast a subscriber's queue empties on this relay: its
// rate, or for an unlimited one what its in-flight slots allow at the
// response time seen lately. Response time, not the rate requests were seen
// to finish at, since that falls whenever the queue runs short and would
// spread the returns ever thinner.
func (s *scheduler) drainRate(sub subscribers.Subscriber) float64 {
	if sub.Rate > 0 {
		return sub.Rate
	}
	latency := s.latency
	if latency <= 0 {
		latency = assumedLatency
	}
	return float64(sub.MaxInFlight) / max(latency.Seconds(), 0.001)
}

// scheduler is one subscriber's share of a lane: its held messages, its
// requests in flight, and the loop that sends them when the subscriber may
// take them.
type scheduler struct {
	lane *lane
	id   string

	mu       sync.Mutex
	queue    []delivery
	inFlight map[jetstream.Msg]struct{}
	running  bool
	stopped  bool
	wake     chan struct{}

	// nextReturn is the first free return slot for a handed-back message.
	nextReturn time.Time
	// latency is a moving average of its response time.
	latency time.Duration
}

func newScheduler(l *lane, id string) *scheduler {
	return &scheduler{
		lane:     l,
		id:       id,
		inFlight: make(map[jetstream.Msg]struct{}),
		wake:     make(chan struct{}, 1),
	}
}

// offer holds msg, or hands it back when the subscriber already holds its
// limit.
func (s *scheduler) offer(ctx context.Context, d delivery, sub subscribers.Subscriber) {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		_ = d.msg.Nak()
		return
	}
	if n := len(s.queue); n >= HoldLimit(sub) {
		now := s.lane.cfg.Clock.Now()
		var at time.Time
		at, s.nextReturn = ReturnSlot(now, s.nextReturn, n, s.drainRate(sub))
		s.mu.Unlock()
		s.lane.handBack(ctx, d, sub, at.Sub(now))
		return
	}
	s.queue = append(s.queue, d)
	start := !s.running
	s.running = true
	s.mu.Unlock()
	if start {
		s.lane.work.Go(func() { s.loop(ctx) })
	}
}

// loop sends held messages while there are any, each after a token and a
// free in-flight slot, and exits when the queue is empty.
func (s *scheduler) loop(ctx context.Context) {
	for {
		sub, ok := s.lane.cfg.Subscribers.Get(s.id)
		s.mu.Lock()
		if len(s.queue) == 0 || s.stopped || ctx.Err() != nil {
			s.running = false
			s.mu.Unlock()
			return
		}
		if !ok || sub.Disabled {
			held := s.queue
			s.queue = nil
			s.running = false
			s.mu.Unlock()
			for _, d := range held {
				if ok {
					s.lane.holdDisabled(ctx, d, sub)
				} else {
					s.lane.unknownSubscriber(d.msg, s.id)
				}
			}
			return
		}
		if len(s.inFlight) >= sub.MaxInFlight {
			s.mu.Unlock()
			s.sleep(ctx, -1)
			continue
		}
		s.mu.Unlock()

		dec, err := s.lane.cfg.Limiter.Reserve(ctx, s.id, limitOf(sub))
		if err != nil {
			s.lane.log.Warn("lanes: rate limiter", "subscriber", s.id, "err", err)
			dec = ratelimit.Decision{Hold: ratelimit.Token, Wait: 100 * time.Millisecond}
		}
		if dec.Hold != ratelimit.Go {
			if dec.Hold != ratelimit.Token && dec.Wait >= parkAfter {
				// Paused or open for a while: the held messages leave the
				// lane until then, holding no slot and burning no attempt.
				s.parkAll(ctx, sub, s.lane.cfg.Clock.Now().Add(dec.Wait))
				continue
			}
			s.sleep(ctx, dec.Wait)
			continue
		}

		s.mu.Lock()
		if len(s.queue) == 0 || s.stopped {
			s.mu.Unlock()
			if dec.Probe {
				// Nothing to probe with after all: let the probe go.
				_ = s.lane.cfg.Limiter.Observe(context.WithoutCancel(ctx), s.id, limitOf(sub), ratelimit.Result{Probe: true})
			}
			continue
		}
		d := s.queue[0]
		s.queue[0] = delivery{}
		s.queue = s.queue[1:]
		s.inFlight[d.msg] = struct{}{}
		s.mu.Unlock()

		s.lane.work.Go(func() {
			// An in-flight request finishes even when the relay is stopping:
			// its outcome is then acked, parked or dead-lettered, never lost.
			start := s.lane.cfg.Clock.Now()
			s.lane.send(context.WithoutCancel(ctx), d, sub, dec.Probe)
			took := s.lane.cfg.Clock.Now().Sub(start)
			s.mu.Lock()
			delete(s.inFlight, d.msg)
			s.latency = movingAverage(s.latency, took)
			s.mu.Unlock()
			select {
			case s.wake <- struct{}{}:
			default:
			}
		})
	}
}

// movingAverage folds one response time into the average (a fifth of the
// weight to the new one).
func movingAverage(avg, took time.Duration) time.Duration {
	if avg <= 0 {
		return took
	}
	return avg + (took-avg)/5
}

// parkAll parks every held message until about at (spread over a second,
// so they do not all come back at once).
func (s *scheduler) parkAll(ctx context.Context, sub subscribers.Subscriber, at time.Time) {
	s.mu.Lock()
	held := s.queue
	s.queue = nil
	// The return slots were planned for a subscriber taking messages; it
	// takes none until at, so they start again from then.
	s.nextReturn = time.Time{}
	s.mu.Unlock()
	for _, d := range held {
		s.lane.cfg.Metrics.HandBack()
		jitter := time.Duration(rand.Int64N(int64(time.Second)))
		s.lane.park(context.WithoutCancel(ctx), d, sub, copyHeader(d.msg.Headers()), at.Add(jitter))
	}
}

// sleep waits for d, or, with d < 0, for a request to finish; either way
// it ends early when the lane stops. A wait for tokens does not end when a
// request finishes: asking again before the bucket can hold a lease would
// only cost a KV read.
func (s *scheduler) sleep(ctx context.Context, d time.Duration) {
	wake, timer := s.wake, (<-chan time.Time)(nil)
	if d >= 0 {
		wake, timer = nil, s.lane.cfg.Clock.After(d)
	}
	select {
	case <-ctx.Done():
	case <-wake:
	case <-timer:
	}
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
	s.queue = nil
	return held
}
