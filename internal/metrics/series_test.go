package metrics_test

import (
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/relay-dev/relay/internal/metrics"
	"github.com/relay-dev/relay/internal/testutil"
)

func TestParseSubscriberSeries(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]metrics.SubscriberSeries{
		"":        {Mode: metrics.SeriesAuto},
		"auto":    {Mode: metrics.SeriesAuto},
		"all":     {Mode: metrics.SeriesAll},
		"none":    {Mode: metrics.SeriesNone},
		"top:1":   {Mode: metrics.SeriesTop, Top: 1},
		"top:500": {Mode: metrics.SeriesTop, Top: 500},
	} {
		got, err := metrics.ParseSubscriberSeries(in)
		if err != nil || got != want {
			t.Errorf("ParseSubscriberSeries(%q) = %+v, %v; want %+v", in, got, err, want)
		}
		if in != "" && got.String() != in {
			t.Errorf("%+v.String() = %q, want %q", got, got.String(), in)
		}
	}
	for _, in := range []string{"top", "top:", "top:0", "top:-3", "top:x", "some", "ALL", "top:10 "} {
		if got, err := metrics.ParseSubscriberSeries(in); !errors.Is(err, metrics.ErrSubscriberSeries) {
			t.Errorf("ParseSubscriberSeries(%q) = %+v, %v; want ErrSubscriberSeries", in, got, err)
		}
	}
}

// With top:N only the N subscribers with the most attempts since the last
// ranking, and any that failed since, have counters of their own; the
// others count under subscriber="_other", so that the sum over
// subscribers stays whole.
func TestTopSubscribersHaveTheirOwnCounters(t *testing.T) {
	t.Parallel()
	m := metrics.NewWith(metrics.Options{Series: metrics.SubscriberSeries{Mode: metrics.SeriesTop, Top: 2}, TopSubscribers: 1})
	srv := httptest.NewServer(m.Handler())
	t.Cleanup(srv.Close)
	deliver := func(id string, n int) {
		for range n {
			m.Copied(id)
			m.Attempt(id, "delivered", time.Millisecond)
			m.Delivered(id, time.Time{}, time.Time{})
		}
	}
	has := func(id string) bool {
		_, ok := testutil.SeriesValue(testutil.Scrape(t, srv.URL), "relay_fanout_deliveries_total", "subscriber", id)
		return ok
	}

	// Until the first ranking, the first two seen.
	deliver("a", 1)
	deliver("b", 1)
	deliver("c", 3)
	fams := testutil.Scrape(t, srv.URL)
	want(t, fams, 1, "relay_fanout_deliveries_total", "subscriber", "a")
	want(t, fams, 1, "relay_deliveries_total", "subscriber", "b", "outcome", "delivered")
	want(t, fams, 3, "relay_fanout_deliveries_total", "subscriber", metrics.OtherSubscriber)
	want(t, fams, 0, "relay_deadline_missed_total", "subscriber", "a")
	if has("c") {
		t.Error("a third subscriber has counters of its own with top:2")
	}

	// c the busiest, then b; a goes. d failed (a retry): it has counters
	// of its own beyond the two.
	deliver("c", 1)
	deliver("b", 2)
	deliver("d", 1)
	m.Retried("d")
	m.Rank()
	deliver("a", 1)
	deliver("c", 1)
	m.Retried("d")
	fams = testutil.Scrape(t, srv.URL)
	want(t, fams, 1, "relay_fanout_deliveries_total", "subscriber", "c")
	want(t, fams, 1, "relay_deliveries_total", "subscriber", "d", "outcome", "retried")
	want(t, fams, 0, "relay_deadline_missed_total", "subscriber", "c")
	if has("a") {
		t.Error("a subscriber out of the top keeps its counters")
	}
	if _, ok := testutil.SeriesValue(fams, "relay_deadline_missed_total", "subscriber", "a"); ok {
		t.Error("a subscriber out of the top keeps its relay_deadline_missed_total")
	}
	// Every copy is counted once, under a subscriber or _other: 11 made,
	// less a's first, which left with a's series.
	var sum float64
	for _, s := range fams["relay_fanout_deliveries_total"].GetMetric() {
		sum += s.GetCounter().GetValue()
	}
	if wantSum := float64(11 - 1); sum != wantSum {
		t.Errorf("relay_fanout_deliveries_total sums to %v, want %v (a's first copy left with its series)", sum, wantSum)
	}
	// Histograms stay within TopSubscribers.
	if _, ok := testutil.SeriesValue(fams, "relay_delivery_attempt_duration_seconds", "subscriber", "b"); ok {
		t.Error("b has histograms of its own beyond TopSubscribers 1")
	}
}

// With none no subscriber has a series of its own: everything is counted
// under subscriber="_other".
func TestNoSubscriberSeries(t *testing.T) {
	t.Parallel()
	m := metrics.NewWith(metrics.Options{Series: metrics.SubscriberSeries{Mode: metrics.SeriesNone}})
	srv := httptest.NewServer(m.Handler())
	t.Cleanup(srv.Close)
	m.Copied("a")
	m.Attempt("a", "delivered", time.Millisecond)
	m.Delivered("a", time.Now(), time.Now())
	m.Retried("b")
	m.Rank()
	m.Copied("b")
	fams := testutil.Scrape(t, srv.URL)
	want(t, fams, 2, "relay_fanout_deliveries_total", "subscriber", metrics.OtherSubscriber)
	want(t, fams, 1, "relay_delivery_attempt_duration_seconds", "subscriber", metrics.OtherSubscriber)
	for name, f := range fams {
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "subscriber" && (l.GetValue() == "a" || l.GetValue() == "b") {
					t.Errorf("%s has a series of subscriber %s with none", name, l.GetValue())
				}
			}
		}
	}
}
