package metrics_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/sourcegraph/conc"

	"github.com/relay-dev/relay/internal/metrics"
	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

// TestReadyzSaysWhenTheSubscriberViewIsBehind: the view's watch stops
// delivering (held back on its way) while a subscriber is stored. Once the
// view has been behind for subscribers.BehindTolerance, /readyz is 503 and
// says why, relay_subscribers_view_behind shows the revisions it lacks and
// relay_subscribers_view_resyncs_total that it watched again; once the
// watch delivers, the view is current, /readyz 200 and the gauge 0.
func TestReadyzSaysWhenTheSubscriberViewIsBehind(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	ctx, cancel := context.WithCancel(testutil.Context(t))
	store, err := subscribers.Open(ctx, n.JS)
	if err != nil {
		t.Fatal(err)
	}
	gate := testutil.StartGateProxy(t, strings.TrimPrefix(n.URL, "nats://"))
	viewJS, err := jetstream.New(testutil.Connect(t, gate.URL()))
	if err != nil {
		t.Fatal(err)
	}
	viewStore, err := subscribers.Open(ctx, viewJS)
	if err != nil {
		t.Fatal(err)
	}
	live, err := viewStore.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New()
	var wg conc.WaitGroup
	wg.Go(func() { _ = m.Run(ctx, metrics.Sources{JS: n.JS, Subscribers: live}) })
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		<-live.Done()
	})
	srv := httptest.NewServer(m.Handler())
	t.Cleanup(srv.Close)
	m.SetReady(true)
	testutil.Eventually(t, func() bool { code, _ := get(t, srv.URL+"/readyz"); return code == http.StatusOK }, "/readyz not 200 with a current view")
	fams := testutil.Scrape(t, srv.URL)
	want(t, fams, 0, "relay_subscribers_view_behind")
	want(t, fams, 0, "relay_subscribers_view_resyncs_total")

	gate.Hold("watch", func(frame []byte) bool {
		return bytes.Contains(frame, []byte("$JS.ACK.KV_"+streams.SubscribersBucket+"."))
	})
	if err := store.Put(ctx, subscriber("late", 0)); err != nil {
		t.Fatal(err)
	}
	// The fan-out's Sync is what tells a view that nothing reaches that it
	// is behind.
	syncCtx, stop := context.WithTimeout(ctx, 100*time.Millisecond)
	_ = live.Sync(syncCtx)
	stop()
	var body string
	testutil.Eventually(t, func() bool {
		var code int
		code, body = get(t, srv.URL+"/readyz")
		return code == http.StatusServiceUnavailable
	}, "/readyz still 200 with a view behind the bucket")
	if !strings.Contains(body, "subscribers") {
		t.Errorf("/readyz says %q, not why", body)
	}
	testutil.Eventually(t, func() bool {
		v, _ := testutil.SeriesValue(testutil.Scrape(t, srv.URL), "relay_subscribers_view_resyncs_total")
		return v >= 1
	}, "the view did not watch again")
	want(t, testutil.Scrape(t, srv.URL), 1, "relay_subscribers_view_behind")

	gate.Release("watch")
	testutil.Eventually(t, func() bool { code, _ := get(t, srv.URL+"/readyz"); return code == http.StatusOK }, "/readyz not 200 again once the view caught up")
	want(t, testutil.Scrape(t, srv.URL), 0, "relay_subscribers_view_behind")
	if _, ok := live.Get("late"); !ok {
		t.Error("the view does not hold the subscriber stored while it was behind")
	}
}
