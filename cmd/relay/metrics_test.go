package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/relay-dev/relay/internal/ratelimit"
	"github.com/relay-dev/relay/internal/testutil"
)

// startRelayWithMetrics starts `relay run` serving /metrics on a free
// loopback port, waits until it is ready and returns the metrics base URL.
func startRelayWithMetrics(t *testing.T, natsURL string, extra ...string) string {
	t.Helper()
	_, base := startReadyRelay(t, natsURL, extra...)
	return base
}

// startReadyRelay is startRelay serving /metrics on a free loopback port
// (startRelay turns --metrics off; the later flag wins), returning once the
// relay answers /readyz, with the metrics base URL.
func startReadyRelay(t *testing.T, natsURL string, extra ...string) (*runningRelay, string) {
	t.Helper()
	addr := testutil.FreeAddr(t)
	r := startRelay(t, natsURL, append([]string{"--metrics", addr, "--allow-private-targets"}, extra...)...)
	base := "http://" + addr
	testutil.Eventually(t, func() bool {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, "relay never ready on %s", addr)
	return r, base
}

// expectation is one series and the value it must reach.
type expectation struct {
	name  string
	value float64
	pairs []string
}

func (e expectation) String() string {
	return fmt.Sprintf("%s{%s} = %v", e.name, strings.Join(e.pairs, ","), e.value)
}

// waitMetrics scrapes until every expectation holds, and fails the test
// with those that do not, and the values found, if they never all do.
func waitMetrics(t *testing.T, base string, want ...expectation) map[string]*dto.MetricFamily {
	t.Helper()
	var fams map[string]*dto.MetricFamily
	unmet := func() []string {
		var out []string
		for _, e := range want {
			got, ok := testutil.SeriesValue(fams, e.name, e.pairs...)
			if !ok || got != e.value {
				out = append(out, fmt.Sprintf("%s (got %v, present %v)", e, got, ok))
			}
		}
		return out
	}
	if !testutil.Within(30*time.Second, func() bool {
		fams = testutil.Scrape(t, base)
		return len(unmet()) == 0
	}) {
		t.Fatalf("metrics never reached:\n  %s", strings.Join(unmet(), "\n  "))
	}
	return fams
}

func series(name string, value float64, pairs ...string) expectation {
	return expectation{name: name, value: value, pairs: pairs}
}

// stageSeries expects n samples in each stage of
// relay_delivery_stage_seconds: the deliveries whose way from EVENTS to
// the answer was measured.
func stageSeries(n float64) []expectation {
	var want []expectation
	for _, stage := range []string{"fanout", "pickup", "queue", "request"} {
		want = append(want, series("relay_delivery_stage_seconds", n, "stage", stage))
	}
	return want
}

// pathReceiver answers each request by its path's first segment, and
// counts the requests by webhook-id.
type pathReceiver struct {
	*httptest.Server
	mu   sync.Mutex
	seen map[string]int
}

func newPathReceiver(t *testing.T, answer func(path string, tries int, w http.ResponseWriter)) *pathReceiver {
	t.Helper()
	r := &pathReceiver{seen: map[string]int{}}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		_, _ = io.Copy(io.Discard, req.Body)
		r.mu.Lock()
		r.seen[req.Header.Get("webhook-id")]++
		tries := r.seen[req.Header.Get("webhook-id")]
		r.mu.Unlock()
		answer(strings.Trim(req.URL.Path, "/"), tries, w)
	}))
	t.Cleanup(r.Close)
	return r
}

// The counters and histograms follow what becomes of deliveries: a 204 is
// delivered (with its latency from the event's publication), a 500 then a
// 204 is retried then delivered, a 400 and an event past its deadline are
// dead letters counted by reason, a rate limit makes deliveries wait for
// tokens, and once everything is settled nothing is in flight on any lane.
func TestMetricsFollowDeliveriesRetriesAndDeadLetters(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	rcv := newPathReceiver(t, func(path string, tries int, w http.ResponseWriter) {
		switch {
		case path == "flaky" && tries == 1:
			w.WriteHeader(http.StatusInternalServerError)
		case path == "bad":
			w.WriteHeader(http.StatusBadRequest)
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	})
	add := func(id string, extra ...string) {
		mustRelay(t, append([]string{"sub", "add", id, "--nats", n.URL, "--url", rcv.URL + "/" + id,
			"--secret", testSecret, "--events", id + ".*"}, extra...)...)
	}
	add("ok")
	add("flaky", "--retry-base", "100ms", "--retry-max", "200ms")
	add("bad")
	add("rated", "--rate", "5", "--burst", "1")
	base := startRelayWithMetrics(t, n.URL)

	publish(t, n.JS, "ok.a", "evt_ok1", []byte(`{}`))
	publish(t, n.JS, "ok.a", "evt_ok2", []byte(`{}`))
	publish(t, n.JS, "ok.late", "evt_late", []byte(`{}`),
		"Relay-Deadline", time.Now().Add(-time.Minute).UTC().Format(time.RFC3339))
	publish(t, n.JS, "flaky.a", "evt_flaky", []byte(`{}`))
	publish(t, n.JS, "bad.a", "evt_bad", []byte(`{}`))
	for i := range 3 {
		publish(t, n.JS, "rated.a", fmt.Sprintf("evt_rated%d", i), []byte(`{}`))
	}

	// The stages count the five accepted at their first attempt: ok's two,
	// rated's three; not flaky's retry.
	fams := waitMetrics(t, base, append(stageSeries(5),
		series("relay_fanout_deliveries_total", 3, "subscriber", "ok"),
		series("relay_fanout_deliveries_total", 1, "subscriber", "flaky"),
		series("relay_fanout_deliveries_total", 3, "subscriber", "rated"),
		series("relay_deliveries_total", 2, "subscriber", "ok", "outcome", "delivered"),
		series("relay_deliveries_total", 1, "subscriber", "ok", "outcome", "dead"),
		series("relay_deliveries_total", 1, "subscriber", "flaky", "outcome", "retried"),
		series("relay_deliveries_total", 1, "subscriber", "flaky", "outcome", "delivered"),
		series("relay_deliveries_total", 1, "subscriber", "bad", "outcome", "dead"),
		series("relay_deliveries_total", 3, "subscriber", "rated", "outcome", "delivered"),
		series("relay_delivery_attempts_total", 6, "outcome", "delivered"),
		series("relay_delivery_attempts_total", 1, "outcome", "retryable"),
		series("relay_delivery_attempts_total", 1, "outcome", "rejected"),
		series("relay_dlq_messages_total", 1, "subscriber", "bad", "reason", "rejected"),
		series("relay_dlq_messages_total", 1, "subscriber", "ok", "reason", "expired"),
		series("relay_deadline_missed_total", 1, "subscriber", "ok"),
		series("relay_deadline_missed_total", 0, "subscriber", "bad"),
		series("relay_event_delivery_latency_seconds", 2, "subscriber", "ok"),
		series("relay_event_delivery_latency_seconds", 1, "subscriber", "flaky"),
		series("relay_delivery_attempt_duration_seconds", 2, "subscriber", "flaky"),
	)...)
	// The eight published, and the relay.delivery.dead of ok's and bad's
	// dead letters that the end of their minute has published by now
	// (each at the end of its wall-clock minute: none, one or both).
	var ingested float64
	if !testutil.Within(30*time.Second, func() bool {
		ingested, _ = testutil.SeriesValue(testutil.Scrape(t, base), "relay_events_ingested_total")
		return ingested >= 8
	}) || ingested > 10 {
		t.Errorf("relay_events_ingested_total = %v, want 8 published and at most 2 relay.delivery.dead", ingested)
	}
	if _, ok := testutil.SeriesValue(fams, "relay_dlq_messages_total", "reason", "max_attempts"); ok {
		t.Error("a reason nothing died of has a series")
	}
	if wait, ok := testutil.SeriesValue(fams, "relay_ratelimit_wait_seconds_total", "subscriber", "rated"); !ok || wait <= 0 {
		t.Errorf("3 deliveries at 5/s with a burst of 1 waited %v s for tokens (present %v)", wait, ok)
	}
	if _, ok := testutil.SeriesValue(fams, "relay_kv_cas_conflicts_total"); !ok {
		t.Error("no relay_kv_cas_conflicts_total")
	}
	// The flaky event's latency covers its retry: at least the 50 ms of
	// its shortest back-off.
	for _, m := range fams["relay_event_delivery_latency_seconds"].GetMetric() {
		if testutil.HasLabels(m, "subscriber", "flaky") && m.GetHistogram().GetSampleSum() < 0.05 {
			t.Errorf("the retried event's latency is %v s, less than its back-off", m.GetHistogram().GetSampleSum())
		}
	}
	// rated's last two waited for tokens at 5/s, about 0.2 and 0.4 s: the
	// queue stage holds those waits.
	for _, m := range fams["relay_delivery_stage_seconds"].GetMetric() {
		if testutil.HasLabels(m, "stage", "queue") && m.GetHistogram().GetSampleSum() < 0.3 {
			t.Errorf("the queue stage holds %v s, less than the waits for rated's tokens", m.GetHistogram().GetSampleSum())
		}
	}
	// Every lane has its series, and nothing is in flight any more.
	lanes := fams["relay_lane_in_flight"].GetMetric()
	if len(lanes) != 4 {
		t.Errorf("%d lanes have an in-flight series, want the 4 of --lanes 4", len(lanes))
	}
	for _, m := range lanes {
		if v := m.GetGauge().GetValue(); v != 0 {
			t.Errorf("relay_lane_in_flight%v = %v once everything is delivered", m.GetLabel(), v)
		}
	}
}

// The gauges show what holds a subscriber: an operator's pause (its queue
// waiting, with its age), a Retry-After pause with the rate halved by the
// 429, and an open circuit after a burst of failures (five in a row for a
// thin subscriber, twenty for a busy one: the breaker judges by their pace,
// which a loaded host sets); a resume delivers the queue
// and its gauges fall to 0.
func TestMetricsShowPausesAndOpenCircuits(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	rcv := newPathReceiver(t, func(path string, _ int, w http.ResponseWriter) {
		switch path {
		case "down":
			w.WriteHeader(http.StatusInternalServerError)
		case "throttled":
			w.Header().Set("Retry-After", "120")
			w.WriteHeader(http.StatusTooManyRequests)
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	})
	add := func(id string, extra ...string) {
		mustRelay(t, append([]string{"sub", "add", id, "--nats", n.URL, "--url", rcv.URL + "/" + id,
			"--secret", testSecret, "--events", id + ".*"}, extra...)...)
	}
	add("held")
	// Retries far off: the first attempts open the circuit, and nothing
	// else is attempted during the test.
	add("down", "--retry-base", "10m")
	add("throttled", "--rate", "10")
	mustRelay(t, "sub", "pause", "held", "--nats", n.URL)
	base := startRelayWithMetrics(t, n.URL)

	publish(t, n.JS, "held.a", "evt_held1", []byte(`{}`))
	publish(t, n.JS, "held.a", "evt_held2", []byte(`{}`))
	for i := range ratelimit.BusyRun * ratelimit.DefaultConsecutive {
		publish(t, n.JS, "down.a", fmt.Sprintf("evt_down%d", i), []byte(`{}`))
	}
	publish(t, n.JS, "throttled.a", "evt_throttled", []byte(`{}`))

	fams := waitMetrics(t, base,
		series("relay_subscriber_paused", 1, "subscriber", "held", "kind", "operator"),
		series("relay_queue_pending", 2, "subscriber", "held"),
		series("relay_circuit_open", 1, "subscriber", "down"),
		series("relay_subscriber_paused", 1, "subscriber", "throttled", "kind", "retry_after"),
		series("relay_ratelimit_effective_rate", 5, "subscriber", "throttled"),
	)
	// Retried once each until the circuit opened, and no more: the rest
	// wait behind it.
	var got float64
	testutil.Within(10*time.Second, func() bool {
		got, _ = testutil.SeriesValue(testutil.Scrape(t, base), "relay_deliveries_total", "subscriber", "down", "outcome", "retried")
		return got >= ratelimit.DefaultConsecutive
	})
	if got < ratelimit.DefaultConsecutive || got > ratelimit.BusyRun*ratelimit.DefaultConsecutive {
		t.Errorf("%v deliveries to the failing subscriber retried, want %d to %d", got, ratelimit.DefaultConsecutive, ratelimit.BusyRun*ratelimit.DefaultConsecutive)
	}
	if age, ok := testutil.SeriesValue(fams, "relay_queue_oldest_age_seconds", "subscriber", "held"); !ok || age < 0 {
		t.Errorf("the paused subscriber's oldest age: %v (present %v)", age, ok)
	}
	if _, ok := testutil.SeriesValue(fams, "relay_subscriber_paused", "subscriber", "down"); ok {
		t.Error("a subscriber that was never paused has a paused series")
	}

	mustRelay(t, "sub", "resume", "held", "--nats", n.URL)
	waitMetrics(t, base,
		series("relay_deliveries_total", 2, "subscriber", "held", "outcome", "delivered"),
		series("relay_subscriber_paused", 0, "subscriber", "held", "kind", "operator"),
		series("relay_queue_pending", 0, "subscriber", "held"),
	)
}
