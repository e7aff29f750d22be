package metrics_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/sourcegraph/conc"

	"github.com/relay-dev/relay/internal/deadletter"
	"github.com/relay-dev/relay/internal/metrics"
	"github.com/relay-dev/relay/internal/ratelimit"
	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

const testSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// running is a Metrics whose Run reads a real NATS server, served over
// HTTP.
type running struct {
	m     *metrics.Metrics
	n     *testutil.NATS
	store *subscribers.Store
	url   string
}

// startMetrics stores the subscribers, starts the view, a shared limiter
// following relay_ratelimit, and Run, all stopped when the test ends.
func startMetrics(t *testing.T, opts metrics.Options, subs ...subscribers.Subscriber) *running {
	t.Helper()
	n := testutil.StartRelayNATS(t)
	ctx, cancel := context.WithCancel(testutil.Context(t))
	store, err := subscribers.Open(ctx, n.JS)
	if err != nil {
		t.Fatal(err)
	}
	for _, sub := range subs {
		if err := store.Put(ctx, sub); err != nil {
			t.Fatal(err)
		}
	}
	live, err := store.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	limiter, err := ratelimit.NewShared(ctx, n.JS, ratelimit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.NewWith(opts)
	var wg conc.WaitGroup
	wg.Go(func() { _ = limiter.Follow(ctx, nil) })
	wg.Go(func() {
		if err := m.Run(ctx, metrics.Sources{JS: n.JS, Subscribers: live, Limiter: limiter}); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		<-live.Done()
	})
	srv := httptest.NewServer(m.Handler())
	t.Cleanup(srv.Close)
	return &running{m: m, n: n, store: store, url: srv.URL}
}

func subscriber(id string, rate float64) subscribers.Subscriber {
	return subscribers.Subscriber{ID: id, URL: "https://example.com/" + id, Secrets: []string{testSecret}, Rate: rate}
}

// publishOn stores count plain messages on subject, as the fan-out or a
// lane leaves them, with nothing to move them.
func publishOn(t *testing.T, n *testutil.NATS, subject string, count int) {
	t.Helper()
	for i := range count {
		if _, err := n.JS.PublishMsg(testutil.Context(t), &nats.Msg{Subject: subject, Data: fmt.Appendf(nil, "m%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
}

// The gauges about the cluster come from NATS at scrape time: each
// subscriber's messages on its lane and in its overflow, the age of its
// oldest, a pause (an operator's or a Retry-After), an open circuit and
// the rate in force; only subscribers the view holds have series, and an
// id it does not hold is counted as _unknown.
func TestGaugesReadTheQueuesAndTheFlowControlState(t *testing.T) {
	t.Parallel()
	r := startMetrics(t, metrics.Options{MinRefresh: time.Millisecond},
		subscriber("a", 20), subscriber("b", 0), subscriber("c", 10))
	publishOn(t, r.n, "deliveries.s00.a", 3)
	publishOn(t, r.n, "deliveries.overflow.b", 2)
	publishOn(t, r.n, "deliveries.s01.b", 1)
	publishOn(t, r.n, "deliveries.s02.ghost", 4)
	now := time.Now()
	testutil.PutJSON(t, r.n.JS, streams.RateLimitBucket, "a", ratelimit.State{Tokens: 1})
	testutil.PutJSON(t, r.n.JS, streams.RateLimitBucket, "c", ratelimit.State{Tokens: 0, Rate: 5, PausedUntil: now.Add(time.Hour),
		Failures: 5, OpenUntil: now.Add(time.Hour), Opens: 1})
	if _, err := r.store.Pause(testutil.Context(t), "b", time.Time{}); err != nil {
		t.Fatal(err)
	}

	check := func(name string, v float64, pairs ...string) func() bool {
		return func() bool {
			got, ok := testutil.SeriesValue(testutil.Scrape(t, r.url), name, pairs...)
			return ok && got == v
		}
	}
	testutil.Eventually(t, check("relay_queue_pending", 3, "subscriber", "a"), "pending of a")
	testutil.Eventually(t, check("relay_subscriber_paused", 1, "subscriber", "b", "kind", "operator"), "operator pause of b")
	testutil.Eventually(t, check("relay_subscriber_paused", 1, "subscriber", "c", "kind", "retry_after"), "Retry-After pause of c")

	fams := testutil.Scrape(t, r.url)
	want(t, fams, 3, "relay_queue_pending", "subscriber", "b")
	if _, ok := testutil.SeriesValue(fams, "relay_queue_pending", "subscriber", "ghost"); ok {
		t.Error("a subscriber the view does not hold has a pending series")
	}
	for _, id := range []string{"a", "b"} {
		age, ok := testutil.SeriesValue(fams, "relay_queue_oldest_age_seconds", "subscriber", id)
		if !ok || age < 0 {
			t.Errorf("oldest age of %s: %v, %v", id, age, ok)
		}
	}
	want(t, fams, 1, "relay_circuit_open", "subscriber", "c")
	want(t, fams, 0, "relay_circuit_open", "subscriber", "a")
	want(t, fams, 5, "relay_ratelimit_effective_rate", "subscriber", "c")
	want(t, fams, 20, "relay_ratelimit_effective_rate", "subscriber", "a")
	if _, ok := testutil.SeriesValue(fams, "relay_subscriber_paused", "subscriber", "a"); ok {
		t.Error("a subscriber that was never paused has a paused series")
	}

	r.m.DeadLettered("ghost", deadletter.Unroutable)
	fams = testutil.Scrape(t, r.url)
	want(t, fams, 1, "relay_dlq_messages_total", "subscriber", metrics.UnknownSubscriber, "reason", "unroutable")
	if _, ok := testutil.SeriesValue(fams, "relay_dlq_messages_total", "subscriber", "ghost"); ok {
		t.Error("an id the view does not hold has series of its own")
	}

	// Resumed: the pause shows 0 (until the linger ends), not nothing.
	if _, err := r.store.Resume(testutil.Context(t), "b"); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, check("relay_subscriber_paused", 0, "subscriber", "b", "kind", "operator"), "resumed b shows 0")

	// Removed: its gauges go at the next scrape.
	if err := r.store.Delete(testutil.Context(t), "a"); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, func() bool {
		_, ok := testutil.SeriesValue(testutil.Scrape(t, r.url), "relay_queue_pending", "subscriber", "a")
		return !ok
	}, "the pending series of a removed subscriber stays")
}

// The queue of a subscriber whose oldest message is newer than the batch of
// the stream's oldest messages (a long backlog of another fills it) still
// has its age when it is among the longest queues.
func TestOldestAgeOfALongQueueBehindABacklog(t *testing.T) {
	t.Parallel()
	r := startMetrics(t, metrics.Options{MinRefresh: time.Millisecond}, subscriber("big", 0), subscriber("late", 0))
	ctx := testutil.Context(t)
	for i := range 300 { // more than one batch of the oldest
		if _, err := r.n.JS.PublishAsync("deliveries.overflow.big", fmt.Appendf(nil, "m%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-r.n.JS.PublishAsyncComplete():
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	publishOn(t, r.n, "deliveries.s03.late", 2)
	testutil.Eventually(t, func() bool {
		fams := testutil.Scrape(t, r.url)
		_, big := testutil.SeriesValue(fams, "relay_queue_oldest_age_seconds", "subscriber", "big")
		_, late := testutil.SeriesValue(fams, "relay_queue_oldest_age_seconds", "subscriber", "late")
		return big && late
	}, "an oldest age is missing")
}
