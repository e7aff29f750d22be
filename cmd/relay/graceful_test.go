package main

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/testutil"
)

// TestGracefulRestartHandsBackEverything: SIGTERM mid-burst, then `relay
// run` again. Nothing the stopped relay was sent waits out its ack wait: the
// restarted relay delivers the rest as fast as the rate allows, far sooner
// than the ack wait would let it, and every event arrives.
func TestGracefulRestartHandsBackEverything(t *testing.T) {
	t.Parallel()
	const (
		events  = 1000
		ackWait = 30 * time.Second
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
	testutil.Eventually(t, func() bool { return unique() == events }, "%d of %d delivered after the restart", unique(), events)
	took := time.Since(restart)
	t.Logf("stopped after %d deliveries; the other %d arrived %v after the restart (%d requests in all)",
		stoppedAt, events-stoppedAt, took.Round(time.Millisecond), rcv.count())
	require.Less(t, took, ackWait/2, "deliveries waited out the stopped relay's ack wait")
}
