package metrics_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/relay-dev/relay/internal/metrics"
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

// The probes an orchestrator uses: /healthz while the process lives,
// /readyz only while the relay consumes, and the counters on /metrics.
func TestHandlerServesProbesAndCounters(t *testing.T) {
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
	m.Event(3)
	m.Attempt("delivered", 5*time.Millisecond)
	m.Overflow()
	_, body := get(t, srv.URL+"/metrics")
	for _, want := range []string{
		"relay_events_fanned_out_total 1",
		"relay_delivery_copies_total 3",
		`relay_delivery_attempts_total{outcome="delivered"} 1`,
		"relay_deliveries_overflowed_total 1",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// A nil *Metrics records nothing and does not panic, so packages can run
// without a registry.
func TestNilMetricsRecordNothing(t *testing.T) {
	t.Parallel()
	var m *metrics.Metrics
	m.Event(1)
	m.Attempt("delivered", time.Millisecond)
	m.Overflow()
	m.SetReady(true)
}
