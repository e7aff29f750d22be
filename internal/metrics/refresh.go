package metrics

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/relay-dev/relay/internal/ratelimit"
	"github.com/relay-dev/relay/internal/subscribers"
)

// ErrConfig is returned by [Metrics.Run] for Sources missing a required
// field.
var ErrConfig = errors.New("metrics: invalid sources")

// refreshTimeout bounds one refresh, so that a scrape is answered (with the
// last values) even while NATS does not answer.
const refreshTimeout = 2 * time.Second

// Sources are what the gauges about the whole cluster are read from: the
// queues in DELIVERIES, the subscribers' pauses, and the flow-control state
// every relay shares.
type Sources struct {
	// JS is the JetStream context; required.
	JS jetstream.JetStream
	// Subscribers is the live subscriber view; required. Only subscribers
	// it holds have series: the others' are deleted.
	Subscribers *subscribers.Live
	// Limiter is the shared rate limiter, whose watch of relay_ratelimit
	// gives every subscriber's Retry-After pause, breaker and rate in force
	// without a read; nil leaves those gauges out.
	Limiter *ratelimit.Shared
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// source is the Sources of a running [Metrics.Run], with its context.
type source struct {
	Sources
	ctx context.Context
}

// Run gives the metrics their sources until ctx is cancelled: the gauges
// read at scrape time come from them, ids the view does not hold are
// counted as unknown, and every [Options.RankEvery] the top subscribers are
// chosen again and the series of removed subscribers deleted. It returns
// nil once ctx is cancelled.
func (m *Metrics) Run(ctx context.Context, src Sources) error {
	if m == nil {
		<-ctx.Done()
		return nil
	}
	if src.JS == nil || src.Subscribers == nil {
		return ErrConfig
	}
	if src.Logger == nil {
		src.Logger = slog.Default()
	}
	m.src.Store(&source{Sources: src, ctx: ctx})
	inView := func(id string) bool { _, ok := src.Subscribers.Lookup(id); return ok }
	t := time.NewTicker(m.opts.RankEvery)
	defer t.Stop()
	// changed is closed once the view changes: the removed subscribers are
	// looked for only then, so that an idle relay does nothing per
	// subscriber.
	changed := src.Subscribers.Changed()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			select {
			case <-changed:
				changed = src.Subscribers.Changed()
				m.subs.forget(inView)
			default:
			}
			m.subs.rank()
		}
	}
}

// refresher computes the gauges read from NATS and from the shared
// flow-control state, when /metrics is scraped and the last values are
// older than [Options.MinRefresh].
type refresher struct {
	m  *Metrics
	mu sync.Mutex
	at time.Time
	// deliveries is the DELIVERIES stream, opened at the first refresh.
	deliveries jetstream.Stream

	pending, oldest                  *sparse
	pausedOperator, pausedRetryAfter *sparse
	circuitOpen, effectiveRate       *sparse
}

func (r *refresher) init(m *Metrics) {
	r.m = m
	linger := m.opts.Linger
	r.pending = newSparse(m.queuePending, "", linger)
	r.oldest = newSparse(m.queueOldestAge, "", linger)
	r.pausedOperator = newSparse(m.paused, "operator", linger)
	r.pausedRetryAfter = newSparse(m.paused, "retry_after", linger)
	r.circuitOpen = newSparse(m.circuitOpen, "", linger)
	r.effectiveRate = newSparse(m.effectiveRate, "", linger)
}

// refreshIfStale refreshes the gauges unless they are fresher than
// [Options.MinRefresh], or no [Metrics.Run] gives their sources. Scrapes at
// once wait for one refresh.
func (r *refresher) refreshIfStale(ctx context.Context) {
	src := r.m.src.Load()
	if src == nil || src.ctx.Err() != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.at.IsZero() && time.Since(r.at) < r.m.opts.MinRefresh {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, refreshTimeout)
	defer cancel()
	stop := context.AfterFunc(src.ctx, cancel)
	defer stop()
	r.refresh(ctx, src)
	// A refresh that failed counts too: a NATS that does not answer is not
	// asked again at every scrape.
	r.at = time.Now()
}

// refresh computes every gauge; r.mu is held.
func (r *refresher) refresh(ctx context.Context, src *source) {
	now := time.Now()
	inView := func(id string) bool { _, ok := src.Subscribers.Lookup(id); return ok }
	if r.m.opts.Series.Mode == SeriesNone {
		// No series per subscriber: the gauges are not read.
		return
	}
	r.refreshQueues(ctx, src, inView)
	r.refreshFlow(src, inView, now)
	// A subscriber with something to report has counters of its own too.
	flagged := map[string]bool{}
	for _, g := range []*sparse{r.pending, r.pausedOperator, r.pausedRetryAfter} {
		for id, since := range g.shown {
			if since.IsZero() {
				flagged[id] = true
			}
		}
	}
	for id, since := range r.circuitOpen.shown {
		if since.IsZero() && r.circuitOpen.last[id] > 0 {
			flagged[id] = true
		}
	}
	r.m.subs.flag(flagged)
}

// refreshQueues sets relay_queue_pending and relay_queue_oldest_age_seconds;
// when DELIVERIES cannot be read, the last values stay.
func (r *refresher) refreshQueues(ctx context.Context, src *source, inView func(string) bool) {
	if r.deliveries == nil {
		stream, err := src.JS.Stream(ctx, deliveriesStream)
		if err != nil {
			src.Logger.Warn("metrics: opening DELIVERIES for the queue gauges", "err", err)
			return
		}
		r.deliveries = stream
	}
	q, err := readQueues(ctx, src.JS.Conn(), r.deliveries, inView)
	if err != nil {
		if src.ctx.Err() == nil {
			src.Logger.Warn("metrics: reading the queues for the queue gauges", "err", err)
		}
		return
	}
	pending := make(map[string]float64, len(q.pending))
	for id, n := range q.pending {
		pending[id] = float64(n)
	}
	ages := make(map[string]float64, len(q.oldest))
	for id, at := range q.oldest {
		ages[id] = max(0, q.at.Sub(at).Seconds())
	}
	r.pending.set(q.at, pending, inView)
	// A queue that emptied shows an age of 0 for a while; one that is not
	// measured this time (not among the oldest or the longest) shows
	// nothing rather than a stale age.
	r.oldest.set(q.at, ages, func(id string) bool { return inView(id) && q.pending[id] == 0 })
}

// refreshFlow sets the pause, breaker and rate gauges: an operator's pause
// from the subscriber view, the rest from the entries of relay_ratelimit
// that the limiter's watch holds (left as they were while the watch is
// down).
func (r *refresher) refreshFlow(src *source, inView func(string) bool, now time.Time) {
	operator := map[string]float64{}
	for _, sub := range src.Subscribers.All() {
		if sub.PausedAt(now) {
			operator[sub.ID] = 1
		}
	}
	r.pausedOperator.set(now, operator, inView)
	if src.Limiter == nil {
		return
	}
	entries, server, ok := src.Limiter.Watched()
	if !ok {
		return
	}
	retryAfter := map[string]float64{}
	circuit := make(map[string]float64, len(entries))
	rate := make(map[string]float64, len(entries))
	for id, st := range entries {
		sub, ok := src.Subscribers.Lookup(id)
		if !ok {
			continue
		}
		if server.Before(st.PausedUntil) {
			retryAfter[id] = 1
		}
		circuit[id] = 0
		if st.CircuitAt(server) != ratelimit.Closed {
			circuit[id] = 1
		}
		if limit := (ratelimit.Limit{Rate: sub.Rate, Burst: sub.Burst}); !limit.Unlimited() {
			rate[id] = ratelimit.EffectiveRate(st, limit)
		}
	}
	r.pausedRetryAfter.set(now, retryAfter, inView)
	// An entry is kept a day after its last write (the bucket's TTL): a
	// subscriber without one has a closed breaker and its configured rate,
	// and nothing to report.
	never := func(string) bool { return false }
	r.circuitOpen.set(now, circuit, never)
	r.effectiveRate.set(now, rate, never)
}

// sparse is a gauge vector that has a series only for the subscribers with
// something to report: a value, then for a while after (if keepZero says
// so) a zero, so that a graph shows the drop and an alert resolves at once
// rather than when the series goes stale; then nothing.
type sparse struct {
	vec *prometheus.GaugeVec
	// kind is the second label value, empty when the vector has only the
	// subscriber label.
	kind   string
	linger time.Duration
	// shown holds the subscribers with a series: the time since which it
	// shows 0, the zero time while it has a value.
	shown map[string]time.Time
	// last is the values of the last set.
	last map[string]float64
}

func newSparse(vec *prometheus.GaugeVec, kind string, linger time.Duration) *sparse {
	return &sparse{vec: vec, kind: kind, linger: linger, shown: map[string]time.Time{}}
}

func (g *sparse) child(id string) prometheus.Gauge {
	if g.kind == "" {
		return g.vec.WithLabelValues(id)
	}
	return g.vec.WithLabelValues(id, g.kind)
}

func (g *sparse) remove(id string) {
	delete(g.shown, id)
	if g.kind == "" {
		g.vec.DeleteLabelValues(id)
	} else {
		g.vec.DeleteLabelValues(id, g.kind)
	}
}

// set shows values, and for the subscribers shown before and not in values
// a zero for the linger (keepZero true) or nothing (keepZero false).
func (g *sparse) set(now time.Time, values map[string]float64, keepZero func(id string) bool) {
	g.last = values
	for id, v := range values {
		g.child(id).Set(v)
		g.shown[id] = time.Time{}
	}
	for id, since := range g.shown {
		if _, ok := values[id]; ok {
			continue
		}
		switch {
		case !keepZero(id):
			g.remove(id)
		case since.IsZero():
			g.child(id).Set(0)
			g.shown[id] = now
		case now.Sub(since) >= g.linger:
			g.remove(id)
		}
	}
}
