package requests

import (
	"container/list"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
)

// Gate bounds the HTTP requests in flight over all subscribers of one relay,
// and shares them fairly: while it is full, the keys with waiters take turns
// at the freed slots, one slot per key per turn, however many goroutines each
// key has waiting. It is safe for concurrent use.
//
// The zero Gate is unlimited, like NewGate(0).
type Gate struct {
	// limit is fixed at construction; <= 0 means unlimited.
	limit int

	mu sync.Mutex
	// inFlight counts the slots held. While any waiter exists it equals
	// limit, because a released slot is handed straight to a waiter.
	inFlight int
	// waiting counts the waiters over all keys.
	waiting int
	// keys holds the queue of every key that has waiters, and no other.
	keys map[string]*keyQueue
	// turns is the FIFO of the keys with waiters (*keyQueue): the front key
	// is served next.
	turns list.List
}

// NewGate returns a gate that lets at most limit requests be in flight at
// once. A limit of zero or less means unlimited, so that a relay can turn the
// bound off without a second code path.
func NewGate(limit int) *Gate {
	return &Gate{limit: max(limit, 0)}
}

// Limit returns the most requests the gate lets be in flight at once, or 0
// when it is unlimited, for metrics and status output.
func (g *Gate) Limit() int { return g.limit }

// InFlight returns how many slots are held right now, for metrics: a gate
// that stays at its limit is what a too-small --max-requests looks like.
func (g *Gate) InFlight() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.inFlight
}

// Waiting returns how many callers are blocked in Acquire right now, over all
// keys, for metrics and for tests that must know a waiter has queued.
func (g *Gate) Waiting() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.waiting
}

// Acquire waits for a free request slot for key (a subscriber id) and returns
// the func that gives it back. While the gate is full, key waits its turn
// among the keys with waiters (see the package documentation), so one key's
// many waiters cannot crowd out another key's few.
//
// If ctx ends before a slot is free, or has already ended, Acquire returns an
// error wrapping [ErrNotAcquired] and ctx.Err(), and leaves no trace in the
// gate: a stopping relay must not start new requests, and must not lose a
// slot either.
//
// The release func may be called any number of times and from any goroutine;
// only the first call gives the slot back, so a deferred release next to an
// early one is harmless.
func (g *Gate) Acquire(ctx context.Context, key string) (release func(), err error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotAcquired, err)
	}
	g.mu.Lock()
	if g.limit <= 0 || g.inFlight < g.limit {
		g.inFlight++
		g.mu.Unlock()
		return g.releaser(), nil
	}
	w := g.enqueue(key)
	g.mu.Unlock()

	select {
	case <-w.ready:
		return g.releaser(), nil
	case <-ctx.Done():
	}

	g.mu.Lock()
	var next *waiter
	if w.granted {
		// The slot was handed over as ctx ended, and select picked ctx.
		// Pass the slot on rather than start a request for a caller that
		// has given up.
		next = g.releaseLocked()
	} else {
		g.dequeue(w)
	}
	g.mu.Unlock()
	next.notify(g)
	return nil, fmt.Errorf("%w: %w", ErrNotAcquired, ctx.Err())
}

// TryAcquire takes a slot if one is free and reports whether it did, without
// waiting. It needs no key: a free slot means nobody is waiting, so there is
// no turn to take. The release func is the same as Acquire's.
func (g *Gate) TryAcquire() (release func(), ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.limit > 0 && g.inFlight >= g.limit {
		return nil, false
	}
	g.inFlight++
	return g.releaser(), true
}

// releaser returns the release func of one slot just taken. Only its first
// call gives the slot back.
func (g *Gate) releaser() func() {
	var done atomic.Bool
	return func() {
		if done.Swap(true) {
			return
		}
		g.mu.Lock()
		w := g.releaseLocked()
		g.mu.Unlock()
		w.notify(g)
	}
}

// releaseLocked gives one slot back: to the oldest waiter of the key whose
// turn it is, which then goes to the back of the turns if it still has
// waiters, or to the gate when nobody waits. g.mu must be held. It returns
// the waiter given the slot, whose notify the caller calls once g.mu is
// released; nil when nobody waited.
func (g *Gate) releaseLocked() *waiter {
	front := g.turns.Front()
	if front == nil {
		g.inFlight--
		return nil
	}
	q := front.Value.(*keyQueue)
	w := q.waiters.Remove(q.waiters.Front()).(*waiter)
	g.waiting--
	w.granted = true
	if w.ready != nil {
		close(w.ready)
	}
	if q.waiters.Len() == 0 {
		g.turns.Remove(q.turn)
		delete(g.keys, q.key)
		return w
	}
	g.turns.MoveToBack(q.turn)
	return w
}

// notify hands a slot just given to w to its grant func, if it waits with
// one rather than in Acquire. g.mu must not be held: the func may release
// a slot. A nil w does nothing.
func (w *waiter) notify(g *Gate) {
	if w == nil || w.grant == nil {
		return
	}
	w.grant(g.releaser())
}

// Queue is Acquire without a goroutine waiting: it takes a free slot at
// once and returns its release func, or, while the gate is full, queues
// for one in key's turn as Acquire does and returns a nil release. The slot
// is then handed to grant once it is key's, in the goroutine that released
// it and after the gate's lock is released: grant should do little (start
// a goroutine) and must give the slot back one way or another. A caller
// with many keys waiting thus costs the gate a waiter each, and no
// goroutine.
//
// cancel withdraws a queued request and reports whether it did; false when
// the slot was given already (grant is called, or was) or nothing was
// queued.
func (g *Gate) Queue(key string, grant func(release func())) (release func(), cancel func() bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.limit <= 0 || g.inFlight < g.limit {
		g.inFlight++
		return g.releaser(), func() bool { return false }
	}
	w := g.enqueue(key)
	w.ready = nil
	w.grant = grant
	return nil, func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		if w.granted || w.cancelled {
			return false
		}
		w.cancelled = true
		g.dequeue(w)
		return true
	}
}

// enqueue adds a waiter for key at the back of key's queue, and key at the
// back of the turns if it had no waiters yet. g.mu must be held.
func (g *Gate) enqueue(key string) *waiter {
	q := g.keys[key]
	if q == nil {
		if g.keys == nil {
			g.keys = make(map[string]*keyQueue)
		}
		q = &keyQueue{key: key}
		q.turn = g.turns.PushBack(q)
		g.keys[key] = q
	}
	w := &waiter{ready: make(chan struct{}), queue: q}
	w.place = q.waiters.PushBack(w)
	g.waiting++
	return w
}

// dequeue removes a waiter that was not granted a slot, and its key from the
// turns if that was the key's last waiter. g.mu must be held.
func (g *Gate) dequeue(w *waiter) {
	q := w.queue
	q.waiters.Remove(w.place)
	g.waiting--
	if q.waiters.Len() == 0 {
		g.turns.Remove(q.turn)
		delete(g.keys, q.key)
	}
}

// waiter is one caller blocked in Acquire, or one request of Queue.
type waiter struct {
	// ready is closed when a slot is handed to a waiter of Acquire; nil
	// for one of Queue, whose grant takes the slot instead.
	ready chan struct{}
	grant func(release func())
	// cancelled: the request of Queue was withdrawn.
	cancelled bool
	// granted is set, under Gate.mu, when ready is closed; a waiter whose
	// ctx ended reads it to know whether it holds a slot it must pass on.
	granted bool
	// queue is the key's queue this waiter is in, place its element there.
	queue *keyQueue
	place *list.Element
}

// keyQueue is one key's waiters (*waiter) in arrival order, and that key's
// element in the turns. Both are linked lists, so that a waiter that gives
// up, and a key whose last waiter did, leave in O(1).
type keyQueue struct {
	key     string
	waiters list.List
	turn    *list.Element
}
