package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

// TestGracefulRestartHandsBackEverything: SIGTERM mid-burst, then `relay
// run` again. Nothing the stopped relay was sent waits out its ack wait: the
// restarted relay delivers every event without ever standing still for a
// quarter of the ack wait, which a message the stopped relay kept would
// make it do (the others delivered, it would come back only once its ack
// wait ran out).
//
// It judges the hand-back by that pause, not by how soon the rest arrives:
// on a loaded host the 800 deliveries left, 3 s at the rate, took 21 s,
// which a bound of half the ack wait took for an ack wait waited out.
func TestGracefulRestartHandsBackEverything(t *testing.T) {
	t.Parallel()
	const (
		events  = 1000
		ackWait = time.Minute
	)
	n := testutil.StartRelayNATS(t)
	rcv := newReceiver(t)
	mustRelay(t, "sub", "add", "steady", "--nats", n.URL, "--url", rcv.URL, "--secret", testSecret, "--rate", "300", "--events", "x")
	for i := range events {
		publish(t, n.JS, "x", fmt.Sprintf("evt-%04d", i), []byte(`{}`))
	}
	args := []string{"--allow-private-targets", "--ack-wait", ackWait.String()}
	first := startRelay(t, n.URL, args...)
	testutil.Eventually(t, func() bool { return rcv.count() >= 200 }, "first relay delivered %d", rcv.count())
	require.Zero(t, first.stop(), first.stderr.String())
	stoppedAt := rcv.count()

	restart := time.Now()
	startRelay(t, n.URL, args...)
	unique := func() int {
		seen := map[string]bool{}
		for _, d := range rcv.deliveries() {
			seen[d.header.Get("webhook-id")] = true
		}
		return len(seen)
	}
	// A message left unacknowledged would come back only after the ack
	// wait: well past the pause that Progress takes for a stall.
	testutil.Progress(t, unique, events, ackWait/4, "%d of %d delivered after the restart", unique(), events)
	t.Logf("stopped after %d deliveries; the other %d arrived %v after the restart (%d requests in all)",
		stoppedAt, events-stoppedAt, time.Since(restart).Round(time.Millisecond), rcv.count())
}

// TestShutdownTimeoutAbandonsHangingRequests stops a relay whose requests
// hang at a receiver that never answers, with a request timeout far longer
// than --shutdown-timeout: relay must not wait for them. Once the shutdown
// timeout has passed it cancels them, exits 0, and hands their messages back
// at once (not after the ack wait) without counting an attempt: with
// --max-attempts 1 a counted attempt would be a dead letter, and the next
// relay delivers every event instead. That relay records no delivery stages
// for those redelivered copies, and does for a new event's.
func TestShutdownTimeoutAbandonsHangingRequests(t *testing.T) {
	t.Parallel()
	const (
		events      = 12
		maxInFlight = 4
		ackWait     = 60 * time.Second
	)
	n := testutil.StartRelayNATS(t)
	var (
		mu        sync.Mutex
		healthy   bool
		hanging   int
		abandoned int
		seen      = map[string]bool{}
		release   = make(chan struct{})
	)
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		// Read to the end: only then does the server notice a client that
		// closes the connection, and cancel the request's context.
		_, _ = io.Copy(io.Discard, req.Body)
		mu.Lock()
		if healthy {
			seen[req.Header.Get("webhook-id")] = true
			mu.Unlock()
			w.WriteHeader(http.StatusNoContent)
			return
		}
		hanging++
		mu.Unlock()
		select {
		case <-req.Context().Done():
			mu.Lock()
			abandoned++
			mu.Unlock()
		case <-release:
		}
	}))
	t.Cleanup(rcv.Close)
	t.Cleanup(func() { close(release) })
	count := func(v *int) int {
		mu.Lock()
		defer mu.Unlock()
		return *v
	}
	mustRelay(t, "sub", "add", "slow", "--nats", n.URL, "--url", rcv.URL, "--secret", testSecret,
		"--timeout", "5m", "--max-in-flight", fmt.Sprint(maxInFlight), "--max-attempts", "1")
	for i := range events {
		publish(t, n.JS, "x", fmt.Sprintf("evt-%02d", i), []byte(`{}`))
	}
	args := []string{"--allow-private-targets", "--ack-wait", ackWait.String(), "--shutdown-timeout", "500ms"}
	first := startRelay(t, n.URL, args...)
	testutil.Eventually(t, func() bool { return count(&hanging) == maxInFlight }, "%d requests hang, want %d", count(&hanging), maxInFlight)
	// Every copy has reached the first relay, so that the next one gets
	// each of them again (a redelivery) and none for the first time.
	testutil.Eventually(t, func() bool { return lanesTookAll(t, n.JS) }, "the first relay's lanes did not take every copy")

	stopped := make(chan int, 1)
	go func() { stopped <- first.stop() }()
	select {
	case code := <-stopped:
		require.Zero(t, code, first.stderr.String())
	case <-time.After(ackWait):
		t.Fatalf("relay still waits for its hanging requests %v after the stop", ackWait)
	}
	// The receiver sees a closed connection a moment after the relay exits.
	testutil.Eventually(t, func() bool { return count(&abandoned) == maxInFlight },
		"requests abandoned at the shutdown timeout; relay said:\n%s", first.stderr.String())
	require.Contains(t, first.stderr.String(), "shutdown timeout passed")

	mu.Lock()
	healthy = true
	mu.Unlock()
	restart := time.Now()
	_, base := startReadyRelay(t, n.URL, args...)
	delivered := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(seen)
	}
	testutil.Eventually(t, func() bool { return delivered() == events }, "%d of %d delivered after the restart", delivered(), events)
	took := time.Since(restart)
	require.Less(t, took, ackWait/2, "abandoned deliveries waited out the stopped relay's ack wait")
	code, out, errOut := relayCmd(t, "dlq", "ls", "--nats", n.URL, "--json")
	require.Zero(t, code, errOut)
	require.JSONEq(t, "[]", out, "an abandoned request was counted as an attempt")
	t.Logf("%d requests abandoned; every event delivered %v after the restart", maxInFlight, took.Round(time.Millisecond))

	// The restarted relay records no stages for what it was handed back:
	// their waits were the stop's, not relay's. A new event's it records.
	waitMetrics(t, base, append(stageSeries(0),
		series("relay_deliveries_total", events, "subscriber", "slow", "outcome", "delivered"))...)
	publish(t, n.JS, "x", "evt-new", []byte(`{}`))
	waitMetrics(t, base, append(stageSeries(1),
		series("relay_deliveries_total", events+1, "subscriber", "slow", "outcome", "delivered"))...)
}

// lanesTookAll reports whether the fan-out has copied every event and the
// lanes' consumers have handed every copy in DELIVERIES to a relay.
func lanesTookAll(t *testing.T, js jetstream.JetStream) bool {
	ctx := testutil.Context(t)
	if !fannedOut(ctx, js) {
		return false
	}
	s, err := js.Stream(ctx, streams.Deliveries)
	if err != nil {
		return false
	}
	consumers := s.ListConsumers(ctx)
	for ci := range consumers.Info() {
		if ci.NumPending != 0 {
			return false
		}
	}
	return consumers.Err() == nil
}
