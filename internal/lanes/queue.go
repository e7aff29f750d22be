package lanes

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// The queue of a subscriber's held deliveries, in order: pushed at the back
// by offer, popped at the front by the loop, and taken whole or in part to
// overflow or the DLQ.

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
