package metrics_test

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/relay-dev/relay/internal/metrics"
	"github.com/relay-dev/relay/internal/testutil"
)

// Only the top subscribers by attempts have histograms of their own, the
// others share subscriber="_other"; a ranking moves the busiest in and the
// idle out (deleting its series), and a removed subscriber's series go.
func TestTopSubscribersHaveTheirOwnHistograms(t *testing.T) {
	t.Parallel()
	m := metrics.NewWith(metrics.Options{TopSubscribers: 2})
	srv := httptest.NewServer(m.Handler())
	t.Cleanup(srv.Close)
	attempts := func(id string, n int) {
		for range n {
			m.Attempt(id, "delivered", time.Millisecond)
		}
	}
	has := func(id string) bool {
		_, ok := testutil.SeriesValue(testutil.Scrape(t, srv.URL), "relay_delivery_attempt_duration_seconds", "subscriber", id)
		return ok
	}

	// The first ones seen, until the first ranking.
	attempts("a", 1)
	attempts("b", 1)
	attempts("c", 5)
	m.Copied("a")
	fams := testutil.Scrape(t, srv.URL)
	want(t, fams, 1, "relay_delivery_attempt_duration_seconds", "subscriber", "a")
	want(t, fams, 1, "relay_delivery_attempt_duration_seconds", "subscriber", "b")
	want(t, fams, 5, "relay_delivery_attempt_duration_seconds", "subscriber", metrics.OtherSubscriber)
	if has("c") {
		t.Error("a third subscriber has histograms of its own with a top of two")
	}

	// c was the busiest: in; a and b tie, a wins by its id and b goes.
	m.Rank()
	attempts("c", 1)
	fams = testutil.Scrape(t, srv.URL)
	want(t, fams, 1, "relay_delivery_attempt_duration_seconds", "subscriber", "c")
	want(t, fams, 1, "relay_delivery_attempt_duration_seconds", "subscriber", "a")
	if has("b") {
		t.Error("a subscriber out of the top keeps its histograms")
	}

	// A top subscriber idle for a period keeps its place while nobody
	// busier needs it.
	m.Rank()
	if !has("a") || !has("c") {
		t.Error("an idle top subscriber lost its place to one no busier")
	}
	attempts("b", 1)
	want(t, testutil.Scrape(t, srv.URL), 6, "relay_delivery_attempt_duration_seconds", "subscriber", metrics.OtherSubscriber)

	// Removed: every series of a goes, and its place is free for b.
	m.Forget(func(id string) bool { return id != "a" })
	fams = testutil.Scrape(t, srv.URL)
	for _, name := range []string{"relay_fanout_deliveries_total", "relay_delivery_attempt_duration_seconds", "relay_deadline_missed_total"} {
		if _, ok := testutil.SeriesValue(fams, name, "subscriber", "a"); ok {
			t.Errorf("%s of a removed subscriber stays", name)
		}
	}
	attempts("b", 2)
	m.Rank()
	attempts("b", 1)
	want(t, testutil.Scrape(t, srv.URL), 1, "relay_delivery_attempt_duration_seconds", "subscriber", "b")
}
