// Package metrics owns what `relay run` serves on --metrics: Prometheus
// counters for fan-out and delivery, and the /healthz and /readyz probes an
// orchestrator uses to know whether the relay is alive and working.
package metrics

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics are the relay's Prometheus instruments. A nil *Metrics is valid
// and records nothing, so packages can be used without a registry in tests.
type Metrics struct {
	Registry   *prometheus.Registry
	FannedOut  prometheus.Counter
	Copies     prometheus.Counter
	Deliveries *prometheus.CounterVec
	Latency    prometheus.Histogram
	Overflowed prometheus.Counter

	ready atomic.Bool
}

// New registers the relay's instruments on a fresh registry, with the Go
// runtime and process collectors beside them.
func New() *Metrics {
	r := prometheus.NewRegistry()
	m := &Metrics{
		Registry: r,
		FannedOut: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "relay_events_fanned_out_total",
			Help: "Events read from EVENTS and fanned out to their subscribers.",
		}),
		Copies: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "relay_delivery_copies_total",
			Help: "Per-subscriber copies published on DELIVERIES by the fan-out.",
		}),
		Deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "relay_delivery_attempts_total",
			Help: "HTTP delivery attempts, by outcome class.",
		}, []string{"outcome"}),
		Latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "relay_delivery_duration_seconds",
			Help:    "Duration of HTTP delivery attempts.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
		}),
		Overflowed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "relay_deliveries_overflowed_total",
			Help: "Deliveries moved to their subscriber's overflow because it could not take them now: a backlog beyond its share of the lane, a pause, an open circuit, a disabled subscriber.",
		}),
	}
	r.MustRegister(m.FannedOut, m.Copies, m.Deliveries, m.Latency, m.Overflowed,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Attempt records one finished HTTP attempt.
func (m *Metrics) Attempt(outcome string, d time.Duration) {
	if m == nil {
		return
	}
	m.Deliveries.WithLabelValues(outcome).Inc()
	m.Latency.Observe(d.Seconds())
}

// Event records one event fanned out into n copies.
func (m *Metrics) Event(n int) {
	if m == nil {
		return
	}
	m.FannedOut.Inc()
	m.Copies.Add(float64(n))
}

// Overflow records a delivery moved to its subscriber's overflow.
func (m *Metrics) Overflow() {
	if m == nil {
		return
	}
	m.Overflowed.Inc()
}

// SetReady flips /readyz: ready once streams, fan-out and lanes run, not
// ready again while shutting down.
func (m *Metrics) SetReady(ok bool) {
	if m != nil {
		m.ready.Store(ok)
	}
}

// Handler serves /metrics, /healthz (the process is alive) and /readyz (the
// relay is consuming).
func (m *Metrics) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !m.ready.Load() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	return mux
}

// ServeListener serves Handler on ln until ctx is cancelled.
func (m *Metrics) ServeListener(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{Handler: m.Handler(), ReadHeaderTimeout: 5 * time.Second}
	stop := context.AfterFunc(ctx, func() {
		shutCtx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutCtx)
	})
	defer stop()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
