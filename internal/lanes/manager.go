package lanes

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/sourcegraph/conc"

	"github.com/relay-dev/relay/internal/attempts"
	"github.com/relay-dev/relay/internal/clock"
	"github.com/relay-dev/relay/internal/deliver"
	"github.com/relay-dev/relay/internal/metrics"
	"github.com/relay-dev/relay/internal/opevent"
	"github.com/relay-dev/relay/internal/overflow"
	"github.com/relay-dev/relay/internal/ratelimit"
	"github.com/relay-dev/relay/internal/retry"
	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/internal/timeliness"
	"github.com/relay-dev/relay/internal/tracing"
	"github.com/relay-dev/relay/streams"
)

// ErrConfig is returned for a Config missing a required field.
var ErrConfig = errors.New("lanes: invalid config")

// BacklogMarks is what the lanes tell the fan-out: which subscribers have
// a backlog in overflow on this relay (see [overflow.Backlogged]).
type BacklogMarks interface {
	// Set marks id as having a backlog, or not.
	Set(id string, backlog bool)
}

// noMarks tells nobody.
type noMarks struct{}

func (noMarks) Set(string, bool) {}

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
	// Clock is the time of everything the lanes decide by the time (see
	// ackwait.go for what stays in real time); clock.Real by default. A fake
	// clock must be moved for the lanes' waits to end: the sweeps, the
	// retries after a failure, the shutdown timeout.
	Clock clock.Clock
	// AckWait of the lane consumers; held and in-flight messages are kept
	// alive with InProgress well within it. Defaults to 60s.
	AckWait time.Duration
	// MaxAckPending of each lane consumer: the most messages a lane can
	// have out, held or in flight; the pool its busy subscribers share.
	// Defaults to 20,000.
	MaxAckPending int
	// RetryPolicy gives a subscriber's retry schedule. Defaults to
	// retry.Exponential with the subscriber's --retry-base and --retry-max
	// and MaxPause.
	RetryPolicy func(sub subscribers.Subscriber) retry.Policy
	// MaxPause bounds a Retry-After (--max-pause). Defaults to 1h.
	MaxPause time.Duration
	// Disable turns a subscriber off after a 410 Gone (docs/delivery-rules.md: "the
	// subscriber is disabled until relay sub enable"). Nil leaves it on.
	// It returns when its write disabled the subscriber, zero when it was
	// disabled already (another relay's 410, or an operator's): only a
	// relay whose write did it announces relay.subscriber.disabled.
	Disable func(ctx context.Context, id, reason string) (time.Time, error)
	// Ops announces what the lanes do to a subscriber as operational
	// events (relay.subscriber.disabled, relay.delivery.dead); nil
	// announces nothing.
	Ops *opevent.Publisher
	// Records gets the record of each attempt and of each death (relay
	// trace, relay status --subscriber); nil records nothing.
	Records *attempts.Recorder
	// Backlogs is told which subscribers have a backlog in overflow, for
	// the fan-out to write their copies there at once (relay run gives
	// both the same [overflow.Backlogged]). Nil tells nobody.
	Backlogs BacklogMarks
	// MaxRequests bounds the requests in flight over all subscribers of
	// this relay (--max-requests), shared fairly among them. Defaults to
	// 4096; negative means unlimited.
	MaxRequests int
	// ShutdownTimeout is how long, once the relay stops, the requests in
	// flight may still run (--shutdown-timeout). Then they are abandoned:
	// cancelled, not counted as attempts, their messages handed back to
	// JetStream for the next relay. Defaults to 30s; negative abandons them
	// at once.
	ShutdownTimeout time.Duration
	// Hurry, once done, ends the stop at once (relay run's second signal):
	// the requests in flight are abandoned whatever ShutdownTimeout says,
	// and their messages handed back with the others. Defaults to a context
	// that is never done.
	Hurry context.Context
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Metrics may be nil.
	Metrics *metrics.Metrics
	// Timeliness counts, for `relay status`, the deliveries accepted in
	// time and those whose deadline was missed; may be nil.
	Timeliness *timeliness.Recorder
	// Tracer makes a span of each request, the child of the trace context
	// its delivery carries, whose context the receiver then gets in place
	// of the delivery's; nil makes none, and the receiver gets the
	// delivery's own traceparent and tracestate.
	Tracer *tracing.Tracer
}

func (c *Config) setDefaults() error {
	if c.JS == nil || c.Subscribers == nil || c.SharedLanes <= 0 || c.Client == nil || c.Limiter == nil {
		return ErrConfig
	}
	if c.Clock == nil {
		c.Clock = clock.Real
	}
	if c.Backlogs == nil {
		c.Backlogs = noMarks{}
	}
	if c.AckWait == 0 {
		c.AckWait = defaultAckWait
	}
	if c.MaxAckPending == 0 {
		c.MaxAckPending = defaultMaxAckPending
	}
	if c.MaxPause == 0 {
		c.MaxPause = retry.DefaultMaxPause
	}
	if c.MaxRequests == 0 {
		c.MaxRequests = DefaultMaxRequests
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
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
	if c.Hurry == nil {
		c.Hurry = context.Background()
	}
	return nil
}

// Run starts every shared lane, and a dedicated lane for each subscriber
// that has one, follows subscriber changes (dedicated lanes start and stop
// as soon as the watch of the bucket delivers `relay sub add/rm`), and
// returns once ctx is cancelled and every lane has finished or handed back
// its messages.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.setDefaults(); err != nil {
		return err
	}
	// Once ctx is cancelled, the requests in flight have ShutdownTimeout
	// to finish; then finishing is cancelled. The timer's goroutine ends
	// with Run, after every lane has stopped.
	finishing, abandon := context.WithCancel(context.WithoutCancel(ctx))
	stopped := make(chan struct{})
	var timer conc.WaitGroup
	timer.Go(func() {
		select {
		case <-ctx.Done():
		case <-stopped:
			return
		}
		select {
		case <-cfg.Clock.After(max(cfg.ShutdownTimeout, 0)):
			cfg.Logger.Warn("lanes: shutdown timeout passed; abandoning the requests still in flight and handing their messages back",
				"shutdown_timeout", max(cfg.ShutdownTimeout, 0))
			abandon()
		case <-cfg.Hurry.Done():
			cfg.Logger.Warn("lanes: told to stop at once; abandoning the requests still in flight and handing their messages back")
			abandon()
		case <-stopped:
		}
	})
	defer func() {
		close(stopped)
		timer.Wait()
		abandon()
	}()
	env, err := newEngine(ctx, finishing, cfg)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	m := &manager{cfg: cfg, env: env, lanes: make(map[string]*runningLane), stopping: make(map[string]bool)}
	defer m.work.Wait()
	defer m.stopAll()

	// A shared lane that cannot start for good (the stream's consumer limit,
	// a definition the server refuses) stops the relay, as a broken set-up
	// should; one that meets an outage or a cluster electing is tried
	// again while the others deliver.
	for i := range cfg.SharedLanes {
		if err := m.start(ctx, subscribers.SharedLane(i)); err != nil {
			if ctx.Err() != nil {
				return nil // stopped while starting
			}
			if !streams.Transient(err) {
				return err
			}
			cfg.Logger.Warn("lanes: starting lane, trying again", "lane", subscribers.SharedLane(i), "err", err)
		}
	}

	// Lanes left by an earlier run (a larger --lanes, a dedicated subscriber
	// since moved to a shared lane) still hold messages: keep draining them.
	leftovers := false
	sweep := cfg.Clock.After(sweepEvery)
	lf, _ := cfg.Limiter.(lifter)
	var lifted <-chan struct{}
	if lf != nil {
		lifted = lf.Lifted()
	}
	m.sweep(ctx)
	for {
		changed := cfg.Subscribers.Changed()
		ok := m.startShared(ctx)
		ok = m.syncDedicated(ctx) && ok
		if !leftovers {
			leftovers = m.startExisting(ctx)
		}
		// A lane that could not start (NATS briefly unavailable) is tried
		// again in a second, not only at the next subscriber change.
		var retry <-chan time.Time
		if !ok || !leftovers {
			retry = cfg.Clock.After(failedRetry)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
			// An enabled subscriber, a lifted pause or one this relay
			// could not use before: its backlog moves again at once.
			m.kickAll()
		case <-lifted:
			// A pause or an open circuit ended by a write (relay sub
			// resume, or another relay's probe): its wait ends now,
			// not at the time it was known to end.
			m.lift(lf.TakeLifted())
		case <-retry:
		case <-sweep:
			m.sweep(ctx)
			sweep = cfg.Clock.After(sweepEvery)
		}
	}
}

// sweep finds the subscribers with a backlog in overflow and makes their
// schedulers bring it back (one relay at a time refills each, see
// [scheduler.refillLocked]), and tells the schedulers that take their
// subscriber for one with a backlog when it has none left.
func (m *manager) sweep(ctx context.Context) {
	marked := make(map[*scheduler]uint64)
	for _, l := range m.running() {
		for _, s := range l.markedSchedulers(false) {
			if backlog, puts := s.marks(); backlog {
				marked[s] = puts
			}
		}
	}
	backlogs, err := overflow.Backlogs(ctx, m.env.deliveries)
	if err != nil {
		if ctx.Err() == nil {
			m.cfg.Logger.Warn("lanes: looking for backlogs", "err", err)
		}
		return
	}
	for s, puts := range marked {
		if _, ok := backlogs[s.id]; !ok {
			s.noBacklog(puts)
		}
	}
	var gone []string
	for id := range backlogs {
		sub, ok := m.cfg.Subscribers.Get(id)
		if ok {
			if l := m.lane(sub.Lane(m.cfg.SharedLanes)); l != nil {
				l.scheduler(id).kick(l.ctx(), true)
			}
			continue
		}
		switch present, _, err := m.env.lookup(ctx, id, 0); {
		case err != nil || present:
			m.env.logOnce("sweep."+id, "lanes: a backlog waits for a subscriber this relay cannot use", "subscriber", id, "waiting", backlogs[id])
		default:
			gone = append(gone, id)
		}
	}
	if len(gone) > 0 && m.settling.CompareAndSwap(false, true) {
		// Left by subscribers removed while their deliveries were on the
		// way to overflow: back to their shared lanes, whose relays drop
		// them as removed (relay sub rm's mark), or dead-letter them as
		// unroutable if the id was never added (see unknownSubscriber).
		// Aside, one batch at a time, so the sweep never waits on it.
		m.work.Go(func() {
			defer m.settling.Store(false)
			for _, id := range gone {
				lane := streams.DeliverySubject(subscribers.LaneFor(id, m.cfg.SharedLanes), id)
				_, _, _, err := m.env.refiller.Refill(ctx, id, lane, 0, maxRefill)
				if err != nil && ctx.Err() == nil && !errors.Is(err, overflow.ErrLeased) {
					m.cfg.Logger.Warn("lanes: settling the backlog of a removed subscriber", "subscriber", id, "err", err)
				}
			}
		})
	}
	m.prune()
}

// prune forgets the lookups it no longer needs and, when the view has lost
// a subscriber since the last look (or pruneEvery has passed, for what was
// still busy then), the schedulers and the limiter's state of subscribers
// the view no longer holds once they have nothing left to do. Those hold
// an entry for every subscriber delivered to: looking at them all every
// sweep is what a hundred thousand idle subscribers would cost.
func (m *manager) prune() {
	inView := func(id string) bool { _, ok := m.cfg.Subscribers.Get(id); return ok }
	m.env.forget(inView)
	now, removals := m.cfg.Clock.Now(), m.cfg.Subscribers.Removals()
	if removals == m.prunedRemovals && now.Sub(m.prunedAt) < pruneEvery {
		return
	}
	m.prunedRemovals, m.prunedAt = removals, now
	if f, ok := m.cfg.Limiter.(forgetter); ok {
		f.Forget(inView)
	}
	for _, l := range m.running() {
		l.prune(inView)
	}
}

// forgetter is a limiter that holds state per subscriber, which the sweep
// prunes with the subscriber set (ratelimit.Shared).
type forgetter interface {
	Forget(keep func(id string) bool)
}

// lifter is a limiter that tells when a subscriber's pause or open circuit
// ended before the time it was known to end (ratelimit.Shared).
type lifter interface {
	Lifted() <-chan struct{}
	TakeLifted() []string
}

// lift ends the wait of the schedulers of ids that wait out a pause or an
// open circuit.
func (m *manager) lift(ids []string) {
	for _, l := range m.running() {
		for _, id := range ids {
			if s := l.existing(id); s != nil {
				s.lift()
			}
		}
	}
}

// running lists the lanes running now.
func (m *manager) running() []*lane {
	m.mu.Lock()
	defer m.mu.Unlock()
	all := make([]*lane, 0, len(m.lanes))
	for _, rl := range m.lanes {
		all = append(all, rl.lane)
	}
	return all
}

// kickAll wakes every scheduler with a backlog, and the busy ones (a
// pause lifted, a subscriber enabled): a kick does nothing to any other.
func (m *manager) kickAll() {
	for _, l := range m.running() {
		for _, s := range l.markedSchedulers(true) {
			s.kick(l.ctx(), false)
		}
	}
}

func (m *manager) lane(name string) *lane {
	m.mu.Lock()
	defer m.mu.Unlock()
	if rl, ok := m.lanes[name]; ok {
		return rl.lane
	}
	return nil
}

// startShared starts the shared lanes not running yet; it reports whether
// they all run. One that cannot start (its consumer not created, NATS
// briefly away, a cluster electing) is logged and tried again by Run, not
// fatal: the other lanes deliver meanwhile.
func (m *manager) startShared(ctx context.Context) bool {
	ok := true
	for i := range m.cfg.SharedLanes {
		name := subscribers.SharedLane(i)
		if err := m.start(ctx, name); err != nil {
			if ctx.Err() == nil {
				m.cfg.Logger.Error("lanes: starting lane", "lane", name, "err", err)
			}
			ok = false
		}
	}
	return ok
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
			if ctx.Err() == nil && !errors.Is(err, errLaneStopping) {
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
	cfg Config
	env *engine
	// work owns the settling of removed subscribers' backlogs, and the
	// stops of their dedicated lanes; settling says a settling is running.
	work     conc.WaitGroup
	settling atomic.Bool
	mu       sync.Mutex
	lanes    map[string]*runningLane
	// stopping names the dedicated lanes being retired (see
	// [manager.retire]).
	stopping map[string]bool
	// prunedAt and prunedRemovals are when the last full prune ran, and
	// the view's removals then (see [manager.prune]); the sweep's
	// goroutine alone uses them.
	prunedAt       time.Time
	prunedRemovals uint64
}

// errLaneStopping is a start refused while a lane of the same name stops;
// the manager tries again a second later.
var errLaneStopping = errors.New("lanes: the lane is still stopping")

// existingLanes lists lane consumers already on DELIVERIES.
func (m *manager) existingLanes(ctx context.Context) ([]string, error) {
	stream, err := m.cfg.JS.Stream(ctx, streams.Deliveries)
	if err != nil {
		return nil, err
	}
	var names []string
	lister := stream.ConsumerNames(ctx)
	for name := range lister.Name() {
		if lane, ok := streams.LaneOfConsumer(name); ok {
			if id, dedicated := subscribers.DedicatedOf(lane); dedicated {
				if _, exists := m.cfg.Subscribers.Get(id); !exists {
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
				if ctx.Err() == nil && !errors.Is(err, errLaneStopping) {
					m.cfg.Logger.Error("lanes: starting dedicated lane", "subscriber", sub.ID, "err", err)
				}
				ok = false
			}
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, rl := range m.lanes {
		if id, ok := subscribers.DedicatedOf(name); ok {
			if _, exists := m.cfg.Subscribers.Get(id); !exists {
				delete(m.lanes, name)
				m.retire(ctx, name, rl)
			}
		}
	}
	return ok
}

// retire stops a removed subscriber's dedicated lane and deletes its
// consumer, in a goroutine of the manager's work: the lane waits for its
// requests in flight, up to the subscriber's --timeout, and meanwhile the
// manager still sweeps, starts lanes and wakes the others' schedulers. Until
// it is done the lane's name is stopping, and no lane of that name starts
// (see [manager.start]): one started meanwhile would lose its consumer to
// the delete. The caller holds m.mu.
func (m *manager) retire(ctx context.Context, name string, rl *runningLane) {
	m.stopping[name] = true
	rl.cancel()
	m.work.Go(func() {
		rl.wg.Wait()
		err := m.cfg.JS.DeleteConsumer(context.WithoutCancel(ctx), streams.Deliveries, streams.LaneConsumer(name))
		if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			m.cfg.Logger.Warn("lanes: deleting dedicated lane", "lane", name, "err", err)
		}
		m.mu.Lock()
		delete(m.stopping, name)
		m.mu.Unlock()
	})
}

func (m *manager) start(ctx context.Context, name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.lanes[name]; ok {
		return nil
	}
	if m.stopping[name] {
		return errLaneStopping
	}
	laneCtx, cancel := context.WithCancel(ctx)
	l, err := newLane(laneCtx, m.cfg, m.env, name)
	if err != nil {
		cancel()
		return err
	}
	rl := &runningLane{lane: l, cancel: cancel}
	rl.wg.Go(func() { l.run(laneCtx) })
	m.lanes[name] = rl
	return nil
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
