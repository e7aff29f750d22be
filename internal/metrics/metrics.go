// Package metrics owns what `relay run` serves on --metrics: the Prometheus
// series of the fan-out, the deliveries, the queues and the flow control of
// every subscriber, and the /healthz and /readyz probes an orchestrator uses
// to know whether the relay is alive and working. docs/metrics.md
// documents every series.
//
// Cost and cardinality are bounded by construction, so that a relay with
// 10,000 subscribers stays as cheap to run and to scrape as one with ten:
//
//   - Recording is O(1) per message and reads nothing from NATS: the series
//     of a subscriber are bound once, when it is first seen, and found again
//     by its id, never by hashing label values on the hot path.
//   - A subscriber has series only for what it has to report: counters once
//     something was counted for it on this relay, gauges while there is
//     something to show (and a zero for a while after, see [Options.Linger]).
//   - Only the subscribers [Options.Series] chooses have counters and
//     gauges of their own (by default every one up to [AutoAllUpTo]); the
//     others count under subscriber="_other". The choice is made by the
//     ranking and the refresh, never on the delivery path.
//   - Histograms are per subscriber only for the [Options.TopSubscribers]
//     with the most attempts on this relay, chosen again every minute; the
//     others share subscriber="_other".
//   - The gauges read from NATS (queues) or from the shared flow-control
//     state are computed when /metrics is scraped, at most once every
//     [Options.MinRefresh], with a few requests whatever the number of
//     subscribers (see queues.go).
//   - The series of a removed subscriber are deleted within a minute.
package metrics

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/relay-dev/relay/internal/deadletter"
	"github.com/relay-dev/relay/internal/filter"
	"github.com/relay-dev/relay/internal/subscribers"
)

// The outcomes of relay_deliveries_total: what became of a delivery, not
// what one HTTP attempt answered (that is relay_delivery_attempts_total).
const (
	// OutcomeDelivered: the subscriber answered 2xx.
	OutcomeDelivered = "delivered"
	// OutcomeRetried: an attempt failed and the delivery waits for its
	// retry; it ends later as delivered or dead.
	OutcomeRetried = "retried"
	// OutcomeDead: the delivery was stored in the DLQ.
	OutcomeDead = "dead"
)

// Label values that stand for more than one subscriber.
const (
	// OtherSubscriber labels the histogram series shared by every
	// subscriber outside the top ones (see [Options.TopSubscribers]).
	OtherSubscriber = "_other"
	// UnknownSubscriber labels what is counted for a subscriber id the
	// relay's view does not hold (a delivery dead-lettered as unroutable),
	// so that a hand-made subject cannot create series at will.
	UnknownSubscriber = "_unknown"
)

// Defaults of [Options].
const (
	// DefaultTopSubscribers bounds the per-subscriber histograms: about
	// 3.6 KB of /metrics each (two histograms), 360 KB for all of them.
	DefaultTopSubscribers = 100
	// DefaultRankEvery is how often the top subscribers are chosen again.
	DefaultRankEvery = time.Minute
	// DefaultMinRefresh bounds the reads from NATS to one every two
	// seconds whatever the number of scrapers; Prometheus scrapes every 15 s.
	DefaultMinRefresh = 2 * time.Second
	// DefaultLinger is how long a gauge shows 0 after it had something to
	// report, before its series goes.
	DefaultLinger = 5 * time.Minute
)

// Options tune the cardinality and the refresh of the series. Zero fields
// take the defaults.
type Options struct {
	// TopSubscribers is how many subscribers have histogram series of their
	// own: at first the first ones seen, then, every RankEvery, those with
	// the most attempts on this relay over the last period. The others'
	// samples go to subscriber="_other".
	TopSubscribers int
	// RankEvery is how often the top subscribers are chosen again and the
	// series of removed subscribers deleted.
	RankEvery time.Duration
	// MinRefresh is the least time between two refreshes of the gauges
	// read from NATS; a scrape within it is served the last values.
	MinRefresh time.Duration
	// Series says which subscribers have counters and gauges of their own
	// (and histograms, within TopSubscribers); the zero value is
	// [SeriesAuto].
	Series SubscriberSeries
	// Linger is how long a gauge that had something to report (a queue, a
	// pause) shows 0 once it has nothing, so that a graph shows the drop
	// and an alert resolves at once, before its series is removed.
	Linger time.Duration
}

func (o *Options) setDefaults() {
	if o.TopSubscribers <= 0 {
		o.TopSubscribers = DefaultTopSubscribers
	}
	if o.RankEvery <= 0 {
		o.RankEvery = DefaultRankEvery
	}
	if o.MinRefresh <= 0 {
		o.MinRefresh = DefaultMinRefresh
	}
	if o.Linger <= 0 {
		o.Linger = DefaultLinger
	}
}

// Metrics are the relay's Prometheus instruments. A nil *Metrics is valid
// and records nothing, so packages can be used without a registry in tests.
type Metrics struct {
	// Registry holds every series /metrics serves.
	Registry *prometheus.Registry

	opts Options

	eventsIngested   prometheus.Counter
	fanoutDeliveries *prometheus.CounterVec
	deliveries       *prometheus.CounterVec
	attempts         *prometheus.CounterVec
	attemptDuration  *prometheus.HistogramVec
	eventLatency     *prometheus.HistogramVec
	queuePending     *prometheus.GaugeVec
	queueOldestAge   *prometheus.GaugeVec
	laneInFlight     *prometheus.GaugeVec
	paused           *prometheus.GaugeVec
	circuitOpen      *prometheus.GaugeVec
	effectiveRate    *prometheus.GaugeVec
	rateLimitWait    *prometheus.CounterVec
	dlqMessages      *prometheus.CounterVec
	deadlineMissed   *prometheus.CounterVec
	deadlineMet      *prometheus.CounterVec
	dueToAccepted    *prometheus.HistogramVec
	overflowed       prometheus.Counter
	letGo            prometheus.Counter
	removed          prometheus.Counter
	laneStalls       prometheus.Counter
	// recordsLost holds relay_attempt_records_lost_total's children:
	// [0] dropped (the queue full), [1] refused (not stored).
	recordsLost [2]prometheus.Counter
	// filtered holds relay_filter_evaluations_total's children, by
	// [filter.Result].
	filtered     [filter.Failed + 1]prometheus.Counter
	stageSeconds *prometheus.HistogramVec
	// stages are stageSeconds' children, in the order of stageNames.
	stages [len(stageNames)]prometheus.Observer

	// attemptClasses caches relay_delivery_attempts_total's child by
	// outcome class.
	attemptClasses sync.Map

	subs  subscriberSet
	src   atomic.Pointer[source]
	gauge refresher

	ready atomic.Bool
	// disconnected is set while the relay has lost NATS: it can then
	// neither take nor settle a delivery, so it is not ready.
	disconnected atomic.Bool
}

// New registers the relay's instruments on a fresh registry, with the Go
// runtime and process collectors beside them, and the default options.
func New() *Metrics { return NewWith(Options{}) }

// NewWith is [New] with options.
func NewWith(opts Options) *Metrics {
	opts.setDefaults()
	r := prometheus.NewRegistry()
	perSubscriber := []string{"subscriber"}
	m := &Metrics{
		Registry: r,
		opts:     opts,
		eventsIngested: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "relay_events_ingested_total",
			Help: "Events the fan-out took from EVENTS: every copy stored, the event acknowledged.",
		}),
		fanoutDeliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "relay_fanout_deliveries_total",
			Help: "Copies of events the fan-out stored in DELIVERIES, by subscriber.",
		}, perSubscriber),
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "relay_deliveries_total",
			Help: "What became of deliveries on this relay, by subscriber: delivered (2xx), retried (an attempt failed, a retry waits) or dead (stored in the DLQ).",
		}, []string{"subscriber", "outcome"}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "relay_delivery_attempts_total",
			Help: "HTTP delivery attempts, by outcome class.",
		}, []string{"outcome"}),
		attemptDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "relay_delivery_attempt_duration_seconds",
			Help:    "Duration of HTTP delivery attempts, by subscriber (the top subscribers by attempts on this relay; the others under subscriber=\"_other\").",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
		}, perSubscriber),
		eventLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "relay_event_delivery_latency_seconds",
			Help:    "Time from an event's publication on EVENTS to its subscriber's 2xx, retries included, by subscriber (the top subscribers by attempts on this relay; the others under subscriber=\"_other\").",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200},
		}, perSubscriber),
		queuePending: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "relay_queue_pending",
			Help: "Messages waiting for the subscriber in DELIVERIES, on its lane and in its overflow (retries parked in RETRIES not included). Every relay reports the same value: use max by (subscriber).",
		}, perSubscriber),
		queueOldestAge: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "relay_queue_oldest_age_seconds",
			Help: "Age of the subscriber's oldest message in DELIVERIES, for the oldest queues and the longest ones. Every relay reports the same value: use max by (subscriber).",
		}, perSubscriber),
		laneInFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "relay_lane_in_flight",
			Help: "HTTP requests in flight on this relay, by lane.",
		}, []string{"lane"}),
		paused: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "relay_subscriber_paused",
			Help: "1 while the subscriber is paused, by kind: operator (relay sub pause) or retry_after (its Retry-After or exhausted quota). Every relay reports the same value: use max by (subscriber).",
		}, []string{"subscriber", "kind"}),
		circuitOpen: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "relay_circuit_open",
			Help: "1 while the subscriber's circuit breaker is not closed (open, or half-open until a probe succeeds), 0 when closed. Every relay reports the same value: use max by (subscriber).",
		}, perSubscriber),
		effectiveRate: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "relay_ratelimit_effective_rate",
			Help: "The rate in force for a rate-limited subscriber, in requests per second: its --rate, lower while the adaptive rate backs off after 429s. Unlimited subscribers have none. Every relay reports the same value: use max by (subscriber).",
		}, perSubscriber),
		rateLimitWait: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "relay_ratelimit_wait_seconds_total",
			Help: "Seconds the subscriber's deliveries on this relay waited for a token of its rate limit.",
		}, perSubscriber),
		dlqMessages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "relay_dlq_messages_total",
			Help: "Dead letters this relay stored in the DLQ, by subscriber and reason.",
		}, []string{"subscriber", "reason"}),
		deadlineMissed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "relay_deadline_missed_total",
			Help: "Deliveries this relay dead-lettered because their Relay-Deadline passed (reasons deadline and expired), by subscriber.",
		}, perSubscriber),
		deadlineMet: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "relay_deadline_met_total",
			Help: "Deliveries with a deadline (Relay-Deadline, or the subscriber's --deadline-after) that this relay had accepted (2xx) before it, by subscriber. With relay_deadline_missed_total, the share of them that arrived in time.",
		}, perSubscriber),
		dueToAccepted: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "relay_due_to_accepted_seconds",
			Help:    "Time from a delivery's due time (its Relay-Deliver-At, else its event's publication) to its subscriber's 2xx, by subscriber (the top subscribers by attempts on this relay; the others under subscriber=\"_other\").",
			Buckets: []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 900, 3600},
		}, perSubscriber),
		overflowed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "relay_deliveries_overflowed_total",
			Help: "Deliveries moved to their subscriber's overflow because it could not take them now: a backlog beyond its share of the lane, a pause, an open circuit, a disabled subscriber.",
		}),
		letGo: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "relay_deliveries_let_go_total",
			Help: "Deliveries this relay let go unsent because NATS had not confirmed their keep-alive for most of their ack wait: JetStream delivers them again once their ack wait ends.",
		}),
		removed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "relay_deliveries_removed_total",
			Help: "Deliveries this relay dropped because relay sub rm removed their subscriber: held in memory, or back from overflow or a retry after the command purged the rest. Not dead letters.",
		}),
		laneStalls: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "relay_lane_stalls_total",
			Help: "Times a lane of this relay held deliveries and sent none for 5 s, with no request in flight and no subscriber of it waiting for a token, a pause or a request slot: each is logged at warn with the lane's state.",
		}),
	}
	filterEvaluations := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "relay_filter_evaluations_total",
		Help: "Content filters (relay sub add --filter) the fan-out evaluated, by result: matched (a copy made), not_matched, body_not_json (the filter read the body of an event whose body is not JSON), error (a field the body lacks, a type mismatch, the step limit).",
	}, []string{"result"})
	for r := range m.filtered {
		m.filtered[r] = filterEvaluations.WithLabelValues(filter.Result(r).String())
	}
	recordsLost := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "relay_attempt_records_lost_total",
		Help: "Records of a fan-out or an attempt (relay trace) not stored in ATTEMPTS, by why: dropped (written slower than made: NATS slow to answer) or refused (the server did not store a record that asked for its PubAck: one in 256, and every one once one is refused). Deliveries go on; relay trace shows less of them.",
	}, []string{"why"})
	m.recordsLost[0], m.recordsLost[1] = recordsLost.WithLabelValues("dropped"), recordsLost.WithLabelValues("refused")
	m.stageSeconds = newStageHistogram()
	for i, name := range stageNames {
		m.stages[i] = m.stageSeconds.WithLabelValues(name)
	}
	casConflicts := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "relay_kv_cas_conflicts_total",
		Help: "Compare-and-sets this relay lost on the relay_ratelimit bucket (another relay wrote the entry first).",
	}, m.casConflicts)
	viewBehind := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "relay_subscribers_view_behind",
		Help: "Revisions of the relay_subscribers bucket this relay's view of the subscribers is known to lack: 0 when it is current. While it is not, the fan-out holds events back; /readyz is 503 once it has been behind for " + subscribers.BehindTolerance.String() + ".",
	}, m.viewBehind)
	viewResyncs := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "relay_subscribers_view_resyncs_total",
		Help: "Times this relay's view of the subscribers watched the bucket again: from the last revision it held, because its watch delivered nothing while the view was behind or ended; or whole, because the bucket's revisions were older than the view's.",
	}, m.viewResyncs)
	m.subs.init(m)
	m.gauge.init(m)
	r.MustRegister(m.eventsIngested, m.fanoutDeliveries, m.deliveries, m.attempts,
		m.attemptDuration, m.eventLatency, m.queuePending, m.queueOldestAge, m.laneInFlight,
		m.paused, m.circuitOpen, m.effectiveRate, m.rateLimitWait, m.dlqMessages,
		m.deadlineMissed, m.deadlineMet, m.dueToAccepted, m.overflowed, m.letGo, m.removed, m.laneStalls, filterEvaluations, recordsLost, m.stageSeconds, casConflicts,
		viewBehind, viewResyncs,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// EventIngested records one event the fan-out took from EVENTS: its copies
// are stored and it is acknowledged.
func (m *Metrics) EventIngested() {
	if m == nil {
		return
	}
	m.eventsIngested.Inc()
}

// Copied records one copy of an event that the fan-out stored for a
// subscriber (a copy JetStream dropped as a duplicate is not one).
func (m *Metrics) Copied(subscriber string) {
	if m == nil {
		return
	}
	c := m.subs.get(subscriber).c.Load()
	c.copies.get1(m.fanoutDeliveries, c.id).Inc()
}

// Attempt records one finished HTTP attempt to a subscriber: its outcome
// class (the name of a deliver.Class) and how long it took.
func (m *Metrics) Attempt(subscriber, class string, d time.Duration) {
	if m == nil {
		return
	}
	m.attemptClass(class).Inc()
	s := m.subs.get(subscriber)
	s.traffic.Add(1)
	m.subs.touch()
	s.hist.Load().attempt.Observe(d.Seconds())
}

func (m *Metrics) attemptClass(class string) prometheus.Counter {
	if c, ok := m.attemptClasses.Load(class); ok {
		return c.(prometheus.Counter)
	}
	c, _ := m.attemptClasses.LoadOrStore(class, m.attempts.WithLabelValues(class))
	return c.(prometheus.Counter)
}

// Delivered records a delivery its subscriber answered with a 2xx.
// publishedAt is when its event was published on EVENTS (the copy's
// Relay-Published-At), for the latency histogram; due is when it could first
// be sent (its Relay-Deliver-At, else publishedAt), for the due-to-accepted
// one; either is zero when unknown.
func (m *Metrics) Delivered(subscriber string, publishedAt, due time.Time) {
	if m == nil {
		return
	}
	s := m.subs.get(subscriber)
	c := s.c.Load()
	c.delivered.get2(m.deliveries, c.id, OutcomeDelivered).Inc()
	h := s.hist.Load()
	now := time.Now()
	if !publishedAt.IsZero() {
		h.latency.Observe(max(0, now.Sub(publishedAt).Seconds()))
	}
	if !due.IsZero() {
		h.due.Observe(max(0, now.Sub(due).Seconds()))
	}
}

// MetDeadline records a delivery with a deadline that its subscriber
// accepted: in time, since none is sent after its deadline.
func (m *Metrics) MetDeadline(subscriber string) {
	if m == nil {
		return
	}
	c := m.subs.get(subscriber).c.Load()
	c.met.get1(m.deadlineMet, c.id).Inc()
}

// Retried records a delivery whose attempt failed and that waits for a
// retry.
func (m *Metrics) Retried(subscriber string) {
	if m == nil {
		return
	}
	s := m.subs.get(subscriber)
	s.fail()
	m.subs.touch()
	c := s.c.Load()
	c.retried.get2(m.deliveries, c.id, OutcomeRetried).Inc()
}

// DeadLettered records a delivery stored in the DLQ for reason; one that
// missed its Relay-Deadline (deadline, expired) also counts as a missed
// deadline.
func (m *Metrics) DeadLettered(subscriber string, reason deadletter.Reason) {
	if m == nil {
		return
	}
	s := m.subs.get(subscriber)
	s.fail()
	m.subs.touch()
	c := s.c.Load()
	c.dead.get2(m.deliveries, c.id, OutcomeDead).Inc()
	// Dead letters are rare beside deliveries, and each already costs a
	// publish with its PubAck: the label lookup is nothing beside it.
	m.dlqMessages.WithLabelValues(c.id, string(reason)).Inc()
	if reason == deadletter.Deadline || reason == deadletter.Expired {
		c.deadline.get1(m.deadlineMissed, c.id).Inc()
	}
}

// TokenWait records time a subscriber's deliveries waited for a token of
// its rate limit.
func (m *Metrics) TokenWait(subscriber string, d time.Duration) {
	if m == nil || d <= 0 {
		return
	}
	c := m.subs.get(subscriber).c.Load()
	c.wait.get1(m.rateLimitWait, c.id).Add(d.Seconds())
}

// Overflow records a delivery moved to its subscriber's overflow.
func (m *Metrics) Overflow() {
	if m == nil {
		return
	}
	m.overflowed.Inc()
}

// LetGo records a delivery let go unsent, its keep-alive not confirmed
// within most of its ack wait: it waits for JetStream to deliver it again,
// an ack wait later, which is what an operator sees as a late delivery.
func (m *Metrics) LetGo() {
	if m == nil {
		return
	}
	m.letGo.Inc()
}

// Removed records a delivery dropped because relay sub rm removed its
// subscriber.
func (m *Metrics) Removed() {
	if m == nil {
		return
	}
	m.removed.Inc()
}

// LaneStalled records a lane that held deliveries and sent none for a
// while, with nothing in flight and nothing to wait for.
func (m *Metrics) LaneStalled() {
	if m == nil {
		return
	}
	m.laneStalls.Inc()
}

// RecordLost counts one attempt record not stored: dropped before it was
// written, or refused by the server.
func (m *Metrics) RecordLost(dropped bool) {
	if m == nil {
		return
	}
	if dropped {
		m.recordsLost[0].Inc()
		return
	}
	m.recordsLost[1].Inc()
}

// Filtered records one content filter's evaluation by the fan-out.
func (m *Metrics) Filtered(r filter.Result) {
	if m == nil || int(r) >= len(m.filtered) {
		return
	}
	m.filtered[r].Inc()
}

// Lane returns the in-flight gauge of one lane of this relay, its series
// created at 0; nil (which records nothing) when m is nil.
func (m *Metrics) Lane(name string) *Lane {
	if m == nil {
		return nil
	}
	return &Lane{m: m, name: name, inFlight: m.laneInFlight.WithLabelValues(name)}
}

// Lane counts the requests in flight on one lane of this relay. A nil *Lane
// records nothing.
type Lane struct {
	m        *Metrics
	name     string
	inFlight prometheus.Gauge
}

// Begin records a request that starts.
func (l *Lane) Begin() {
	if l != nil {
		l.inFlight.Inc()
	}
}

// End records a request that finished.
func (l *Lane) End() {
	if l != nil {
		l.inFlight.Dec()
	}
}

// Close removes the lane's series once it has stopped, so that a dedicated
// lane whose subscriber is gone leaves nothing behind.
func (l *Lane) Close() {
	if l != nil {
		l.m.laneInFlight.DeleteLabelValues(l.name)
	}
}

// casConflicts reads the lost compare-and-sets of the shared limiter, 0
// until [Metrics.Run] names one.
func (m *Metrics) casConflicts() float64 {
	if src := m.src.Load(); src != nil && src.Limiter != nil {
		return float64(src.Limiter.Stats().Conflicts)
	}
	return 0
}

// viewBehind reads how far the subscriber view is behind its bucket, 0
// until [Metrics.Run] names the view.
func (m *Metrics) viewBehind() float64 {
	if src := m.src.Load(); src != nil {
		return float64(src.Subscribers.Behind())
	}
	return 0
}

// viewResyncs reads how often the subscriber view watched its bucket again,
// 0 until [Metrics.Run] names the view.
func (m *Metrics) viewResyncs() float64 {
	if src := m.src.Load(); src != nil {
		return float64(src.Subscribers.Resyncs())
	}
	return 0
}

// viewLagging reports whether the subscriber view has been behind its
// bucket for longer than [subscribers.BehindTolerance].
func (m *Metrics) viewLagging() bool {
	src := m.src.Load()
	return src != nil && src.Subscribers.Lagging()
}

// SetReady flips /readyz: ready once streams, fan-out and lanes run, not
// ready again while shutting down.
func (m *Metrics) SetReady(ok bool) {
	if m != nil {
		m.ready.Store(ok)
	}
}

// SetConnected tells /readyz whether the relay is connected to NATS: not
// ready while it is not, ready again once it has reconnected.
func (m *Metrics) SetConnected(ok bool) {
	if m != nil {
		m.disconnected.Store(!ok)
	}
}

// Handler serves /metrics (the gauges read from NATS refreshed first when
// they are older than [Options.MinRefresh]), /healthz (the process is
// alive) and /readyz (the relay is consuming, connected to NATS, and its
// view of the subscribers has not been behind the bucket for longer than
// [subscribers.BehindTolerance]).
func (m *Metrics) Handler() http.Handler {
	mux := http.NewServeMux()
	prom := promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{})
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		m.gauge.refreshIfStale(r.Context())
		prom.ServeHTTP(w, r)
	})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		switch {
		case !m.ready.Load():
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		case m.disconnected.Load():
			http.Error(w, "not ready: disconnected from NATS", http.StatusServiceUnavailable)
			return
		case m.viewLagging():
			// The fan-out holds every event back meanwhile.
			http.Error(w, "not ready: the view of the subscribers is behind the bucket", http.StatusServiceUnavailable)
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
