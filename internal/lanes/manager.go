package lanes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/sourcegraph/conc"

	"github.com/relay-dev/relay/internal/clock"
	"github.com/relay-dev/relay/internal/deliver"
	"github.com/relay-dev/relay/internal/metrics"
	"github.com/relay-dev/relay/internal/ratelimit"
	"github.com/relay-dev/relay/internal/retry"
	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/streams"
)

// ErrConfig is returned for a Config missing a required field.
var ErrConfig = errors.New("lanes: invalid config")

// Config wires the lanes of one relay.
type Config struct {
	// JS is the JetStream context; required.
	JS jetstream.JetStream
	// Subscribers is the live subscriber view; required.
	Subscribers *subscribers.Live
	// SharedLanes is --lanes; required.
	SharedLanes int
	// Client sends the HTTP requests; required.
	Client *deliver.Client
	// Limiter hands out tokens and keeps the pause and the breaker;
	// required (ratelimit.Shared on a cluster).
	Limiter ratelimit.Limiter
	// Clock defaults to clock.Real.
	Clock clock.Clock
	// AckWait of the lane consumers; held and in-flight messages are kept
	// alive with InProgress well within it. Defaults to 60s.
	AckWait time.Duration
	// MaxAckPending of each lane consumer: the most messages a lane can
	// have out, held, in flight or handed back with a delay. Defaults to
	// 20,000.
	MaxAckPending int
	// RetryPolicy gives a subscriber's retry schedule. Defaults to
	// retry.Exponential with the subscriber's --retry-base and --retry-max
	// and MaxPause.
	RetryPolicy func(sub subscribers.Subscriber) retry.Policy
	// MaxPause bounds a Retry-After (--max-pause). Defaults to 1h.
	MaxPause time.Duration
	// Disable turns a subscriber off after a 410 Gone (DESIGN.md: "the
	// subscriber is disabled until relay sub enable"). Nil leaves it on.
	Disable func(ctx context.Context, id, reason string) error
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Metrics may be nil.
	Metrics *metrics.Metrics
}

func (c *Config) setDefaults() error {
	if c.JS == nil || c.Subscribers == nil || c.SharedLanes <= 0 || c.Client == nil || c.Limiter == nil {
		return ErrConfig
	}
	if c.Clock == nil {
		c.Clock = clock.Real
	}
	if c.AckWait == 0 {
		c.AckWait = 60 * time.Second
	}
	if c.MaxAckPending == 0 {
		c.MaxAckPending = 20_000
	}
	if c.MaxPause == 0 {
		c.MaxPause = retry.DefaultMaxPause
	}
	if c.RetryPolicy == nil {
		maxPause := c.MaxPause
		c.RetryPolicy = func(sub subscribers.Subscriber) retry.Policy {
			return retry.Exponential{Base: sub.RetryBase.Std(), Max: sub.RetryMax.Std(), MaxPause: maxPause}
		}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// SharedLane is the name of shared lane i.
func SharedLane(i int) string { return fmt.Sprintf("s%02d", i) }

// ConsumerName is the durable consumer of a lane.
func ConsumerName(lane string) string { return "lane_" + lane }

// Run starts every shared lane, and a dedicated lane for each subscriber
// that has one, follows subscriber changes (dedicated lanes start and stop
// as soon as the watch of the bucket delivers `relay sub add/rm`), and
// returns once ctx is cancelled and every lane has finished or handed back
// its messages.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.setDefaults(); err != nil {
		return err
	}
	m := &manager{cfg: cfg, lanes: make(map[string]*runningLane)}
	defer m.stopAll()

	for i := range cfg.SharedLanes {
		if err := m.start(ctx, SharedLane(i)); err != nil {
			if ctx.Err() != nil {
				return nil // stopped while starting
			}
			return err
		}
	}
	// Lanes left by an earlier run (a larger --lanes, a dedicated subscriber
	// since moved to a shared lane) still hold messages: keep draining them.
	leftovers := false
	for {
		changed := cfg.Subscribers.Changed()
		ok := m.syncDedicated(ctx)
		if !leftovers {
			leftovers = m.startExisting(ctx)
		}
		// A lane that could not start (NATS briefly unavailable) is tried
		// again in a second, not only at the next subscriber change.
		var retry <-chan time.Time
		if !ok || !leftovers {
			retry = time.After(time.Second)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-retry:
		}
	}
}

// startExisting starts the lanes whose consumers exist on DELIVERIES; it
// reports whether it could list them.
func (m *manager) startExisting(ctx context.Context) bool {
	names, err := m.existingLanes(ctx)
	if err != nil {
		if ctx.Err() == nil {
			m.cfg.Logger.Warn("lanes: listing existing lanes", "err", err)
		}
		return false
	}
	ok := true
	for _, name := range names {
		if err := m.start(ctx, name); err != nil {
			if ctx.Err() == nil {
				m.cfg.Logger.Error("lanes: starting lane", "lane", name, "err", err)
			}
			ok = false
		}
	}
	return ok
}

type runningLane struct {
	lane   *lane
	cancel context.CancelFunc
	wg     conc.WaitGroup
}

type manager struct {
	cfg   Config
	mu    sync.Mutex
	lanes map[string]*runningLane
}

// existingLanes lists lane consumers already on DELIVERIES.
func (m *manager) existingLanes(ctx context.Context) ([]string, error) {
	stream, err := m.cfg.JS.Stream(ctx, streams.Deliveries)
	if err != nil {
		return nil, err
	}
	var names []string
	lister := stream.ConsumerNames(ctx)
	for name := range lister.Name() {
		if lane, ok := strings.CutPrefix(name, "lane_"); ok {
			if strings.HasPrefix(lane, "d_") {
				if _, exists := m.cfg.Subscribers.Get(strings.TrimPrefix(lane, "d_")); !exists {
					continue
				}
			}
			names = append(names, lane)
		}
	}
	return names, lister.Err()
}

// syncDedicated starts the dedicated lanes of new dedicated subscribers and
// removes those of deleted ones (their messages were purged by `relay sub
// rm`).
func (m *manager) syncDedicated(ctx context.Context) bool {
	ok := true
	for _, sub := range m.cfg.Subscribers.All() {
		if sub.Dedicated {
			if err := m.start(ctx, sub.Lane(m.cfg.SharedLanes)); err != nil {
				if ctx.Err() == nil {
					m.cfg.Logger.Error("lanes: starting dedicated lane", "subscriber", sub.ID, "err", err)
				}
				ok = false
			}
		}
	}
	m.mu.Lock()
	var gone []string
	for name := range m.lanes {
		if id, ok := strings.CutPrefix(name, "d_"); ok {
			if _, exists := m.cfg.Subscribers.Get(id); !exists {
				gone = append(gone, name)
			}
		}
	}
	m.mu.Unlock()
	for _, name := range gone {
		m.stop(name)
		err := m.cfg.JS.DeleteConsumer(context.WithoutCancel(ctx), streams.Deliveries, ConsumerName(name))
		if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			m.cfg.Logger.Warn("lanes: deleting dedicated lane", "lane", name, "err", err)
		}
	}
	return ok
}

func (m *manager) start(ctx context.Context, name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.lanes[name]; ok {
		return nil
	}
	l, err := newLane(ctx, m.cfg, name)
	if err != nil {
		return err
	}
	laneCtx, cancel := context.WithCancel(ctx)
	rl := &runningLane{lane: l, cancel: cancel}
	rl.wg.Go(func() { l.run(laneCtx) })
	m.lanes[name] = rl
	return nil
}

func (m *manager) stop(name string) {
	m.mu.Lock()
	rl, ok := m.lanes[name]
	delete(m.lanes, name)
	m.mu.Unlock()
	if ok {
		rl.cancel()
		rl.wg.Wait()
	}
}

func (m *manager) stopAll() {
	m.mu.Lock()
	all := m.lanes
	m.lanes = make(map[string]*runningLane)
	m.mu.Unlock()
	for _, rl := range all {
		rl.cancel()
	}
	for _, rl := range all {
		rl.wg.Wait()
	}
}
