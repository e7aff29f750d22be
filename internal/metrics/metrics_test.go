package metrics_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/relay-dev/relay/internal/deadletter"
	"github.com/relay-dev/relay/internal/metrics"
	"github.com/relay-dev/relay/internal/testutil"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// want fails the test unless the series exists with the value.
func want(t *testing.T, fams map[string]*dto.MetricFamily, v float64, name string, pairs ...string) {
	t.Helper()
	got, ok := testutil.SeriesValue(fams, name, pairs...)
	if !ok {
		t.Errorf("%s%v: no such series", name, pairs)
		return
	}
	if got != v {
		t.Errorf("%s%v = %v, want %v", name, pairs, got, v)
	}
}

// The probes an orchestrator uses: /healthz while the process lives,
// /readyz only while the relay consumes; and what the relay records shows
// on /metrics under the names the dashboard and the alerts use.
func TestHandlerServesProbesAndSeries(t *testing.T) {
	t.Parallel()
	m := metrics.New()
	srv := httptest.NewServer(m.Handler())
	t.Cleanup(srv.Close)

	if code, _ := get(t, srv.URL+"/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz = %d", code)
	}
	if code, _ := get(t, srv.URL+"/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz before ready = %d", code)
	}
	m.SetReady(true)
	if code, _ := get(t, srv.URL+"/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz when ready = %d", code)
	}

	for range 3 {
		m.Copied("a")
	}
	m.EventIngested()
	m.Attempt("a", "delivered", 5*time.Millisecond)
	m.Delivered("a", time.Now().Add(-time.Second), time.Now().Add(-time.Second))
	m.Attempt("a", "retryable", time.Millisecond)
	m.Retried("a")
	m.DeadLettered("a", deadletter.Expired)
	m.DeadLettered("b", deadletter.Rejected)
	m.TokenWait("a", 250*time.Millisecond)
	m.Overflow()
	lane := m.Lane("s00")
	lane.Begin()

	fams := testutil.Scrape(t, srv.URL)
	want(t, fams, 1, "relay_events_ingested_total")
	want(t, fams, 3, "relay_fanout_deliveries_total", "subscriber", "a")
	want(t, fams, 1, "relay_deliveries_total", "subscriber", "a", "outcome", "delivered")
	want(t, fams, 1, "relay_deliveries_total", "subscriber", "a", "outcome", "retried")
	want(t, fams, 1, "relay_deliveries_total", "subscriber", "a", "outcome", "dead")
	want(t, fams, 1, "relay_delivery_attempts_total", "outcome", "delivered")
	want(t, fams, 1, "relay_delivery_attempts_total", "outcome", "retryable")
	want(t, fams, 2, "relay_delivery_attempt_duration_seconds", "subscriber", "a")
	want(t, fams, 1, "relay_event_delivery_latency_seconds", "subscriber", "a")
	want(t, fams, 1, "relay_dlq_messages_total", "subscriber", "a", "reason", "expired")
	want(t, fams, 1, "relay_dlq_messages_total", "subscriber", "b", "reason", "rejected")
	want(t, fams, 1, "relay_deadline_missed_total", "subscriber", "a")
	// Created at 0 with the subscriber, so that an alert on its increase
	// sees the first one.
	want(t, fams, 0, "relay_deadline_missed_total", "subscriber", "b")
	want(t, fams, 0.25, "relay_ratelimit_wait_seconds_total", "subscriber", "a")
	want(t, fams, 1, "relay_deliveries_overflowed_total")
	want(t, fams, 1, "relay_lane_in_flight", "lane", "s00")
	want(t, fams, 0, "relay_kv_cas_conflicts_total")
	if _, ok := fams["go_goroutines"]; !ok {
		t.Error("no Go runtime collector")
	}
	// A latency sample lands in the bucket of its value, not below.
	for _, b := range fams["relay_event_delivery_latency_seconds"].GetMetric()[0].GetHistogram().GetBucket() {
		if b.GetUpperBound() < 1 && b.GetCumulativeCount() != 0 {
			t.Errorf("a latency of 1 s counted in the bucket le=%v", b.GetUpperBound())
		}
	}

	lane.End()
	want(t, testutil.Scrape(t, srv.URL), 0, "relay_lane_in_flight", "lane", "s00")
	lane.Close()
	if _, ok := testutil.SeriesValue(testutil.Scrape(t, srv.URL), "relay_lane_in_flight", "lane", "s00"); ok {
		t.Error("a closed lane still has its series")
	}
}

// The renamed series are gone, so that nothing is exported twice.
func TestOldNamesAreGone(t *testing.T) {
	t.Parallel()
	m := metrics.New()
	srv := httptest.NewServer(m.Handler())
	t.Cleanup(srv.Close)
	m.EventIngested()
	m.Copied("a")
	m.Attempt("a", "delivered", time.Millisecond)
	fams := testutil.Scrape(t, srv.URL)
	for _, old := range []string{"relay_events_fanned_out_total", "relay_delivery_copies_total", "relay_delivery_duration_seconds"} {
		if _, ok := fams[old]; ok {
			t.Errorf("%s is still exported", old)
		}
	}
}

// A nil *Metrics records nothing and does not panic, so packages can run
// without a registry.
func TestNilMetricsRecordNothing(t *testing.T) {
	t.Parallel()
	var m *metrics.Metrics
	m.EventIngested()
	m.Copied("a")
	m.Attempt("a", "delivered", time.Millisecond)
	m.Delivered("a", time.Now(), time.Now())
	m.Retried("a")
	m.DeadLettered("a", deadletter.Gone)
	m.TokenWait("a", time.Second)
	m.Overflow()
	m.Stages(metrics.Stages{Published: time.Now(), Answered: time.Now()})
	l := m.Lane("s00")
	l.Begin()
	l.End()
	l.Close()
	m.SetReady(true)
}
