package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/fanout"
	"github.com/relay-dev/relay/internal/opevent"
	"github.com/relay-dev/relay/internal/testutil"
)

// TestGoneSubscriberIsAnnouncedToTheOperationalSubscriberOnly: a
// subscriber answering 410 is disabled, and relay.subscriber.disabled
// reaches the subscriber whose --events names relay.subscriber.*, once,
// with a documented body; a subscriber of every event (no --events) and
// one of '>' receive none, and `nats sub 'events.relay.>'` sees it.
func TestGoneSubscriberIsAnnouncedToTheOperationalSubscriberOnly(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	gone, ops, every, wild := newReceiver(t), newReceiver(t), newReceiver(t), newReceiver(t)
	gone.setStatus(410)
	mustRelay(t, "sub", "add", "gone", "--nats", n.URL, "--url", gone.URL, "--secret", testSecret, "--events", "order.*")
	mustRelay(t, "sub", "add", "ops", "--nats", n.URL, "--url", ops.URL, "--secret", testSecret, "--events", "relay.subscriber.*")
	mustRelay(t, "sub", "add", "every", "--nats", n.URL, "--url", every.URL, "--secret", testSecret)
	mustRelay(t, "sub", "add", "wild", "--nats", n.URL, "--url", wild.URL, "--secret", testSecret, "--events", ">")
	sub, err := n.Conn.SubscribeSync("events.relay.>")
	require.NoError(t, err)
	startRelay(t, n.URL, "--allow-private-targets")

	m := &nats.Msg{Subject: fanout.SubjectPrefix + "order.paid", Data: []byte(`{"id":1}`), Header: nats.Header{}}
	m.Header.Set(nats.MsgIdHdr, "ev-1")
	_, err = n.JS.PublishMsg(testutil.Context(t), m)
	require.NoError(t, err)

	testutil.Progress(t, ops.count, 1, 15*time.Second, "relay.subscriber.disabled to the operational subscriber")
	d := ops.deliveries()[0]
	var ev opevent.Event
	require.NoError(t, json.Unmarshal(d.body, &ev))
	require.Equal(t, opevent.SubscriberDisabled, ev.Type)
	require.Equal(t, "gone", ev.Subscriber)
	require.Equal(t, 410, ev.Status)
	require.Contains(t, ev.Reason, "410 Gone")
	require.NotEmpty(t, ev.Relay)
	require.False(t, ev.At.IsZero())
	require.True(t, strings.HasPrefix(d.header.Get("webhook-id"), "relay:subscriber-disabled:gone:"), d.header.Get("webhook-id"))
	require.Equal(t, "application/json", d.header.Get("content-type"))

	core, err := sub.NextMsg(10 * time.Second)
	require.NoError(t, err)
	require.Equal(t, "events."+opevent.SubscriberDisabled, core.Subject)

	// The others got the order event and nothing of relay's.
	testutil.Progress(t, every.count, 1, 15*time.Second, "the order event to the subscriber of every event")
	testutil.Progress(t, wild.count, 1, 15*time.Second, "the order event to the subscriber of >")
	testutil.Eventually(t, func() bool { return fannedOut(testutil.Context(t), n.JS) }, "events not all fanned out")
	time.Sleep(time.Second)
	for _, r := range []*webhookSink{every, wild} {
		require.Equal(t, 1, r.count())
		require.Equal(t, "ev-1", r.deliveries()[0].header.Get("webhook-id"))
	}
	require.Equal(t, 1, ops.count(), "one event for one happening")
}
