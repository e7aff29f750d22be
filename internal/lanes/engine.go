package lanes

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/internal/bodies"
	"github.com/relay-dev/relay/internal/overflow"
	"github.com/relay-dev/relay/internal/requests"
	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/streams"
)

// engine is what every lane of one relay shares.
type engine struct {
	cfg        Config
	gate       *requests.Gate
	refiller   *overflow.Refiller
	deliveries jetstream.Stream
	store      *subscribers.Store
	// writes are the contexts and windows of the lanes' writes (see
	// writes.go).
	writes *writers
	// bodies reads the bodies of deliveries that carry their event's
	// sequence (see body.go), one cache for every lane.
	bodies *bodies.Reader
	// finishing is the context of the requests in flight: not cancelled by
	// the relay's stop, but once Config.ShutdownTimeout has passed after it,
	// so that a request that hangs cannot hold the exit. Settling what a
	// request's outcome says (ack, park, dead letter) is not bound to it:
	// each of those steps has a timeout of its own.
	finishing context.Context

	mu     sync.Mutex
	known  map[string]*lookup
	logged map[string]time.Time
}

// lookup is the bucket's answer about one subscriber id, shared by every
// delivery that asks while it is on its way.
type lookup struct {
	ready   chan struct{}
	present bool
	// removed: absent, and removed with relay sub rm (see
	// [subscribers.Store.Removed]) rather than never added.
	removed bool
	err     error
	// started is when the read began: an absence it found holds for every
	// delivery this relay had received by then (unix nanoseconds, in the
	// ack-wait account, as a delivery's receipt is; see ackNow).
	started int64
	// began is when the read began, by Config.Clock: the next read of the
	// id waits for lookupFor after it.
	began time.Time
	// at is when the answer came; zero while the read is on its way.
	at time.Time
}

func newEngine(ctx, finishing context.Context, cfg Config) (*engine, error) {
	e := &engine{cfg: cfg, finishing: finishing, gate: requests.NewGate(cfg.MaxRequests),
		known: make(map[string]*lookup), logged: make(map[string]time.Time)}
	writes, err := newWriters(cfg.JS)
	if err != nil {
		return nil, err
	}
	refiller, err := overflow.NewRefiller(ctx, writes.refill, e.lateInOverflow)
	if err != nil {
		return nil, fmt.Errorf("lanes: %w", err)
	}
	deliveries, err := cfg.JS.Stream(ctx, streams.Deliveries)
	if err != nil {
		return nil, fmt.Errorf("lanes: %w", err)
	}
	store, err := subscribers.Open(ctx, cfg.JS)
	if err != nil {
		return nil, fmt.Errorf("lanes: %w", err)
	}
	e.refiller, e.deliveries, e.store, e.writes = refiller, deliveries, store, writes
	e.bodies = bodies.New(cfg.JS.Conn(), 0, cfg.Clock)
	return e, nil
}

// lookup asks the bucket whether a subscriber the live view lacks exists:
// present with a value this build refuses counts as existing. An answer
// "present" is kept for lookupFor. An answer "absent" serves a delivery
// only if its read began after the delivery was received (after, unix
// nanoseconds; 0: any answer within lookupFor): a delivery received since
// may be for a subscriber added since, whose copies another relay's
// fan-out already makes, and an absence is a dead letter. A newer read
// waits for lookupFor after the last one began, and one read serves every
// delivery waiting for it: at most one read a second for an id, however
// many deliveries ask. removed says, of an absent one, that it was removed
// with relay sub rm.
func (e *engine) lookup(ctx context.Context, id string, after int64) (present, removed bool, err error) {
	for {
		now := e.cfg.Clock.Now()
		e.mu.Lock()
		k, ok := e.known[id]
		switch {
		case ok && k.at.IsZero():
			e.mu.Unlock()
			select {
			case <-k.ready:
			case <-ctx.Done():
				return false, false, ctx.Err()
			}
			continue
		case ok && k.err != nil && now.Sub(k.at) < lookupFor:
			e.mu.Unlock()
			return false, false, k.err // a bucket that fails is asked once a second too
		case ok && k.err == nil && now.Sub(k.at) < lookupFor && (k.present || k.started >= after):
			e.mu.Unlock()
			return k.present, k.removed, nil
		case ok && k.err == nil && !k.present:
			if wait := k.began.Add(lookupFor).Sub(now); wait > 0 {
				e.mu.Unlock()
				select {
				case <-e.cfg.Clock.After(wait):
				case <-ctx.Done():
					return false, false, ctx.Err()
				}
				continue
			}
		}
		k = &lookup{ready: make(chan struct{}), started: ackNow(), began: now}
		e.known[id] = k
		e.mu.Unlock()

		present, removed, err := e.check(ctx, id)
		e.mu.Lock()
		k.present, k.removed, k.err, k.at = present, removed, err, e.cfg.Clock.Now()
		e.mu.Unlock()
		close(k.ready)
		return present, removed, err
	}
}

// check reads the bucket's answer about id, uncached: whether it is
// there, and if not, whether relay sub rm removed it.
//
// The reads are direct gets, which a replica of a replicated bucket may
// answer before it has the last writes: after relay sub rm and sub add of
// the same id, it may still say "removed". An absence drops or
// dead-letters deliveries, so it is not taken before the live view,
// brought up to every write the bucket's leader has (Live.Sync), lacks
// the id as well.
func (e *engine) check(ctx context.Context, id string) (present, removed bool, err error) {
	_, err = e.store.Get(ctx, id)
	switch {
	case err == nil, errors.Is(err, subscribers.ErrCorrupt):
		return true, false, nil
	case errors.Is(err, subscribers.ErrNotFound), errors.Is(err, subscribers.ErrInvalid):
		removed, err := e.store.Removed(ctx, id)
		if err != nil {
			return false, false, err
		}
		syncCtx, cancel := context.WithTimeout(ctx, lookupSyncFor)
		defer cancel()
		if err := e.cfg.Subscribers.Sync(syncCtx); err != nil {
			return false, false, err
		}
		if _, ok := e.cfg.Subscribers.Get(id); ok {
			return true, false, nil
		}
		return false, removed, nil
	}
	return false, false, err
}

// forget drops what is known of ids the live view now holds, and answers
// older than a minute, so the cache stays the size of its misses.
func (e *engine) forget(inView func(id string) bool) {
	now := e.cfg.Clock.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	for id, k := range e.known {
		if !k.at.IsZero() && (inView(id) || now.Sub(k.at) > logEvery) {
			delete(e.known, id)
		}
	}
	for key, at := range e.logged {
		if now.Sub(at) > logEvery {
			delete(e.logged, key)
		}
	}
}

// logOnce logs at warn, at most once every logEvery for the same key.
func (e *engine) logOnce(key, msg string, args ...any) {
	now := e.cfg.Clock.Now()
	e.mu.Lock()
	last, ok := e.logged[key]
	if ok && now.Sub(last) < logEvery {
		e.mu.Unlock()
		return
	}
	e.logged[key] = now
	e.mu.Unlock()
	e.cfg.Logger.Warn(msg, args...)
}
