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
	err     error
	at      time.Time
}

// lookupFor is how long the bucket's answer about an id this relay's view
// lacks is kept: a flood of deliveries for it costs one read a second.
const lookupFor = time.Second

// logEvery is how often a condition that lasts (deliveries held for a
// subscriber this relay cannot use) is logged again.
const logEvery = time.Minute

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
	e.bodies = bodies.New(cfg.JS.Conn(), 0)
	return e, nil
}

// lookup asks the bucket whether a subscriber the live view lacks exists:
// present with a value this build refuses counts as existing.
func (e *engine) lookup(ctx context.Context, id string) (bool, error) {
	e.mu.Lock()
	k, ok := e.known[id]
	if ok && (k.at.IsZero() || time.Since(k.at) < lookupFor) {
		e.mu.Unlock()
		<-k.ready
		return k.present, k.err
	}
	k = &lookup{ready: make(chan struct{})}
	e.known[id] = k
	e.mu.Unlock()

	k.present, k.err = e.check(ctx, id)
	e.mu.Lock()
	k.at = time.Now()
	if k.err != nil {
		delete(e.known, id) // ask again next time
	}
	e.mu.Unlock()
	close(k.ready)
	return k.present, k.err
}

// check reads the bucket's answer about id, uncached.
func (e *engine) check(ctx context.Context, id string) (bool, error) {
	_, err := e.store.Get(ctx, id)
	switch {
	case err == nil, errors.Is(err, subscribers.ErrCorrupt):
		return true, nil
	case errors.Is(err, subscribers.ErrNotFound), errors.Is(err, subscribers.ErrInvalid):
		return false, nil
	}
	return false, err
}

// forget drops what is known of ids the live view now holds, and answers
// older than a minute, so the cache stays the size of its misses.
func (e *engine) forget(inView func(id string) bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for id, k := range e.known {
		if !k.at.IsZero() && (inView(id) || time.Since(k.at) > logEvery) {
			delete(e.known, id)
		}
	}
	for key, at := range e.logged {
		if time.Since(at) > logEvery {
			delete(e.logged, key)
		}
	}
}

// logOnce logs at warn, at most once every logEvery for the same key.
func (e *engine) logOnce(key, msg string, args ...any) {
	e.mu.Lock()
	last, ok := e.logged[key]
	if ok && time.Since(last) < logEvery {
		e.mu.Unlock()
		return
	}
	e.logged[key] = time.Now()
	e.mu.Unlock()
	e.cfg.Logger.Warn(msg, args...)
}
