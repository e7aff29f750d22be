package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/status"
	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

// fence returns once each of relays running relays holds, in its view of
// the subscribers, every change stored before the call. It adds a
// subscriber with a dedicated lane and waits until that many relays pull
// from the lane: a relay starts a dedicated lane as soon as its view holds
// the subscriber, and its view applies the bucket's changes in order.
func fence(t *testing.T, n *testutil.NATS, name string, relays int) {
	t.Helper()
	mustRelay(t, "sub", "add", name, "--nats", n.URL, "--url", "https://example.com/", "--secret", testSecret, "--lane", "dedicated", "--events", "fence.none")
	ctx := testutil.Context(t)
	testutil.Eventually(t, func() bool {
		c, err := n.JS.Consumer(ctx, streams.Deliveries, streams.LaneConsumer("d_"+name))
		if err != nil {
			return false
		}
		info, err := c.Info(ctx)
		return err == nil && info.NumWaiting >= relays
	}, "%d relays do not all pull from the lane of %s", relays, name)
}

// inOverflow counts the deliveries waiting in a subscriber's overflow.
func inOverflow(t *testing.T, js jetstream.JetStream, id string) uint64 {
	t.Helper()
	ctx := testutil.Context(t)
	s, err := js.Stream(ctx, streams.Deliveries)
	require.NoError(t, err)
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(streams.OverflowSubject(id)))
	require.NoError(t, err)
	return info.State.Msgs
}

// webhookIDs lists the webhook-ids a receiver got, in order.
func webhookIDs(r *webhookSink) []string {
	var ids []string
	for _, d := range r.deliveries() {
		ids = append(ids, d.header.Get("webhook-id"))
	}
	return ids
}

// A pause holds everything of the subscriber on every relay, new events
// included, without a request; resume delivers it all; a pause with --until
// ends by itself.
func TestPauseHoldsEverythingOnEveryRelayUntilResume(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	rcv := newReceiver(t)
	mustRelay(t, "sub", "add", "demo", "--nats", n.URL, "--url", rcv.URL, "--secret", testSecret)
	startRelay(t, n.URL, "--allow-private-targets")
	startRelay(t, n.URL, "--allow-private-targets")
	publish(t, n.JS, "x", "before", []byte(`{}`))
	testutil.Eventually(t, func() bool { return rcv.count() == 1 }, "no delivery before the pause")

	out := mustRelay(t, "sub", "pause", "demo", "--nats", n.URL)
	require.Contains(t, out, "paused until relay sub resume demo")
	fence(t, n, "fence1", 2)
	for i := range 5 {
		publish(t, n.JS, "x", fmt.Sprintf("paused-%d", i), []byte(`{}`))
	}
	// Every copy has reached the overflow, where a paused subscriber's
	// deliveries wait: nothing of it is on its way to the receiver.
	testutil.Eventually(t, func() bool { return inOverflow(t, n.JS, "demo") == 5 }, "the paused copies do not all wait in overflow")
	require.Equal(t, []string{"before"}, webhookIDs(rcv), "nothing is requested while paused")
	require.Contains(t, mustRelay(t, "sub", "ls", "--nats", n.URL), "paused")
	var rows []status.Subscriber
	require.NoError(t, json.Unmarshal([]byte(mustRelay(t, "status", "--nats", n.URL, "--json", "--lanes", "4")), &rows))
	for _, r := range rows {
		if r.ID == "demo" {
			require.Equal(t, status.Paused, r.State)
			require.True(t, r.ResumesAt.IsZero())
		}
	}

	require.Contains(t, mustRelay(t, "sub", "resume", "demo", "--nats", n.URL), "resumed")
	testutil.Eventually(t, func() bool { return rcv.count() == 6 }, "the backlog is not delivered after resume: %v", webhookIDs(rcv))
	require.Contains(t, mustRelay(t, "sub", "resume", "demo", "--nats", n.URL), "was not paused, and its circuit is closed")

	// A pause with an end: whatever is published meanwhile waits for it,
	// and is delivered after it without a resume.
	out = mustRelay(t, "sub", "pause", "demo", "--nats", n.URL, "--until", "2s")
	require.Contains(t, out, "paused until ")
	var sub subscribers.Subscriber
	require.NoError(t, json.Unmarshal([]byte(mustRelay(t, "sub", "get", "demo", "--nats", n.URL, "--json")), &sub))
	require.True(t, sub.Paused)
	until := sub.PausedUntil
	require.False(t, until.IsZero())
	fence(t, n, "fence2", 2)
	for i := range 3 {
		publish(t, n.JS, "x", fmt.Sprintf("until-%d", i), []byte(`{}`))
	}
	testutil.Eventually(t, func() bool { return rcv.count() == 9 }, "a pause with --until does not end by itself: %v", webhookIDs(rcv))
	for _, d := range rcv.deliveries()[6:] {
		ts, err := strconv.ParseInt(d.header.Get("webhook-timestamp"), 10, 64)
		require.NoError(t, err)
		require.GreaterOrEqual(t, ts, until.Unix(), "%s was requested before the pause ended", d.header.Get("webhook-id"))
	}
	// The running relays clear the pause that ended from the bucket.
	testutil.Eventually(t, func() bool {
		var sub subscribers.Subscriber
		err := json.Unmarshal([]byte(mustRelay(t, "sub", "get", "demo", "--nats", n.URL, "--json")), &sub)
		return err == nil && !sub.Paused
	}, "the ended pause stays in the bucket")
	require.Contains(t, mustRelay(t, "sub", "get", "demo", "--nats", n.URL), "enabled")
}

func TestPauseShowsItsEndAndRefusesThePast(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	mustRelay(t, "sub", "add", "demo", "--nats", n.URL, "--url", "https://example.com/", "--secret", testSecret)
	until := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	out := mustRelay(t, "sub", "pause", "demo", "--nats", n.URL, "--until", until.Format(time.RFC3339))
	require.Contains(t, out, "paused until "+until.Format(time.RFC3339))
	want := "paused until " + until.Format(time.RFC3339)
	require.Contains(t, mustRelay(t, "sub", "ls", "--nats", n.URL, "--wide"), want)
	require.Contains(t, mustRelay(t, "sub", "get", "demo", "--nats", n.URL), want)
	require.Contains(t, mustRelay(t, "status", "--nats", n.URL, "--wide"), want)
	// Within 100 columns, the time it has left.
	require.Regexp(t, `paused, (59m5\d|1h0m0)s left`, mustRelay(t, "sub", "ls", "--nats", n.URL))
	require.Regexp(t, `paused, (59m5\d|1h0m0)s left`, mustRelay(t, "status", "--nats", n.URL))

	for _, arg := range []string{"-5m", "0s", "2001-01-01T00:00:00Z", "tomorrow", "12:00"} {
		code, _, errOut := relayCmd(t, "sub", "pause", "demo", "--nats", n.URL, "--until", arg)
		require.Equal(t, exitUsage, code, "%s: %s", arg, errOut)
		require.True(t, strings.HasPrefix(errOut, "relay: --until: "), errOut)
	}
	require.Contains(t, mustRelay(t, "sub", "get", "demo", "--nats", n.URL), want, "a refused pause leaves the pause as it was")
	for _, cmd := range []string{"pause", "resume"} {
		code, _, errOut := relayCmd(t, "sub", cmd, "nobody", "--nats", n.URL)
		require.Equal(t, exitFailure, code, errOut)
		require.Contains(t, errOut, "no such subscriber: nobody")
	}
}
