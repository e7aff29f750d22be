package lanes

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

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

	mu     sync.Mutex
	known  map[string]lookup
	logged map[string]time.Time
}

// lookup is a cached answer of the bucket about one subscriber id.
type lookup struct {
	present bool
	at      time.Time
}

// lookupFor is how long the bucket's answer about an id this relay's view
// lacks is kept: a flood of deliveries for it costs one read a second.
const lookupFor = time.Second

// logEvery is how often a condition that lasts (deliveries held for a
// subscriber this relay cannot use) is logged again.
const logEvery = time.Minute

func newEngine(ctx context.Context, cfg Config) (*engine, error) {
	refiller, err := overflow.NewRefiller(ctx, cfg.JS)
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
	return &engine{
		cfg:        cfg,
		gate:       requests.NewGate(cfg.MaxRequests),
		refiller:   refiller,
		deliveries: deliveries,
		store:      store,
		known:      make(map[string]lookup),
		logged:     make(map[string]time.Time),
	}, nil
}

// lookup asks the bucket whether a subscriber the live view lacks exists:
// present with a value this build refuses counts as existing.
func (e *engine) lookup(ctx context.Context, id string) (bool, error) {
	e.mu.Lock()
	if k, ok := e.known[id]; ok && time.Since(k.at) < lookupFor {
		e.mu.Unlock()
		return k.present, nil
	}
	e.mu.Unlock()
	_, err := e.store.Get(ctx, id)
	var present bool
	switch {
	case err == nil, errors.Is(err, subscribers.ErrCorrupt):
		present = true
	case errors.Is(err, subscribers.ErrNotFound), errors.Is(err, subscribers.ErrInvalid):
	default:
		return false, err
	}
	e.mu.Lock()
	e.known[id] = lookup{present: present, at: time.Now()}
	e.mu.Unlock()
	return present, nil
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
