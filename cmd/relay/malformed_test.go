package main

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/deadletter"
	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

// TestMalformedHeadersAreDeadLetteredUnsent: an event whose
// Relay-Deliver-At or Relay-Deadline is not RFC 3339, or whose Content-Type
// holds a control character, is dead-lettered as malformed for each
// subscriber, naming the header and its value, and nothing is sent for it;
// a copy published on DELIVERIES by hand with such a header too.
func TestMalformedHeadersAreDeadLetteredUnsent(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	rcv := newReceiver(t)
	for _, id := range []string{"a", "b"} {
		mustRelay(t, "sub", "add", id, "--nats", n.URL, "--url", rcv.URL+"/"+id, "--secret", testSecret, "--events", "x")
	}
	startRelay(t, n.URL, "--allow-private-targets")
	publish(t, n.JS, "x", "due", []byte(`{}`), streams.HeaderDeliverAt, "tomorrow")
	publish(t, n.JS, "x", "deadline", []byte(`{}`), streams.HeaderDeadline, "1735689600")
	publish(t, n.JS, "x", "type", []byte(`{}`), "Content-Type", "application/json\x01")
	publish(t, n.JS, "x", "fine", []byte(`{}`))
	hand := &nats.Msg{Subject: "deliveries." + subscribers.LaneFor("a", 4) + ".a", Data: []byte(`{}`),
		Header: nats.Header{streams.HeaderEventID: {"by-hand"}, streams.HeaderDeadline: {"soon"}}}
	_, err := n.JS.PublishMsg(testutil.Context(t), hand)
	require.NoError(t, err)

	dead := waitDead(t, n.URL, 7)
	want := map[string]string{
		"due":      `Relay-Deliver-At "tomorrow" is not an RFC 3339 time`,
		"deadline": `Relay-Deadline "1735689600" is not an RFC 3339 time`,
		"type":     `Content-Type "application/json\x01" holds a control character`,
		"by-hand":  `Relay-Deadline "soon" is not an RFC 3339 time`,
	}
	for _, e := range dead {
		require.Equal(t, deadletter.Malformed, e.Reason, "%+v", e)
		require.Zero(t, e.Attempts, "no attempt: %+v", e)
		require.True(t, strings.HasPrefix(e.LastError, want[e.EventID]), "%s: last error %q", e.EventID, e.LastError)
	}
	testutil.Eventually(t, func() bool { return rcv.count() == 2 }, "the fine event not delivered to both")
	waitIdle(t, n.JS)
	for _, d := range rcv.deliveries() {
		require.Equal(t, "fine", d.header.Get("webhook-id"), "a malformed event was sent")
	}
	require.Len(t, dlqEntries(t, n.URL, "--reason", "malformed"), 7, "dlq ls --reason malformed lists them")
}
