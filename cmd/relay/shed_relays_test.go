package main

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/deadletter"
	"github.com/relay-dev/relay/internal/fanout"
	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

// TestTwoRelaysNeverDeliverACopyShedWhilePubAcksAreLate: two relays with
// --ack-wait 2s (the fan-out's is 1 s) share the fan-out while every DLQ
// PubAck comes 3 s late, and a paused subscriber is past its --max-backlog:
// its copies are dead-lettered as backlog, each event waiting three times
// its ack wait for its dead letter's PubAck. An event the first relay holds
// is not redelivered to the second, which has not seen its verdicts and
// would queue the copy the first shed: once resumed, the subscriber gets
// none of the events in its DLQ. Its neighbour, which keeps up, has no copy
// shed for the late PubAcks of the other's.
func TestTwoRelaysNeverDeliverACopyShedWhilePubAcksAreLate(t *testing.T) {
	t.Parallel()
	const events, bound, late = 300, 10, 3 * time.Second
	n := testutil.StartRelayNATS(t)
	ctx := testutil.Context(t)
	dlqAck := []byte(`{"stream":"` + streams.DLQ + `"`)
	proxy := testutil.StartLateProxy(t, strings.TrimPrefix(n.URL, "nats://"), late,
		func(payload []byte) bool { return bytes.HasPrefix(payload, dlqAck) })
	healthy, over := newReceiver(t), newReceiver(t)
	mustRelay(t, "sub", "add", "healthy", "--nats", n.URL, "--url", healthy.URL, "--secret", testSecret, "--events", "x",
		"--max-backlog", "100")
	mustRelay(t, "sub", "add", "over", "--nats", n.URL, "--url", over.URL, "--secret", testSecret, "--events", "x",
		"--max-backlog", fmt.Sprint(bound))
	mustRelay(t, "sub", "pause", "over", "--nats", n.URL)
	for range 2 {
		startRelay(t, proxy.URL(), "--allow-private-targets", "--ack-wait", "2s")
	}
	testutil.Eventually(t, func() bool {
		c, err := n.JS.Consumer(ctx, streams.Events, fanout.ConsumerName)
		if err != nil {
			return false
		}
		ci, err := c.Info(ctx)
		return err == nil && ci.NumWaiting >= 2
	}, "the two relays do not both pull events")

	// About 40 events a second, which the healthy subscriber takes as
	// they come.
	for i := range events {
		m := &nats.Msg{Subject: fanout.SubjectPrefix + "x", Data: []byte(`{}`), Header: nats.Header{}}
		m.Header.Set(nats.MsgIdHdr, fmt.Sprintf("ev-%04d", i))
		_, err := n.JS.PublishMsg(ctx, m)
		require.NoError(t, err)
		if i%10 == 9 {
			time.Sleep(250 * time.Millisecond)
		}
	}
	testutil.Eventually(t, func() bool { return fannedOut(ctx, n.JS) }, "events not all fanned out")
	assert.Zero(t, deadFor(t, n, "healthy", deadletter.Backlog), "copies of a subscriber that keeps up were shed")

	waiting, shed := waitingFor(t, n, "over"), deadFor(t, n, "over", deadletter.Backlog)
	t.Logf("paused subscriber, --max-backlog %d: %d waiting, %d dead-lettered as backlog", bound, waiting, shed)
	require.NotZero(t, shed, "nothing was shed: the test proves nothing")
	mustRelay(t, "sub", "resume", "over", "--nats", n.URL)
	testutil.Progress(t, over.count, waiting, 15*time.Second, "the resumed subscriber's deliveries")
	testutil.Eventually(t, func() bool { return waitingFor(t, n, "over") == 0 }, "the resumed subscriber's deliveries are not all sent")

	dead := map[string]bool{}
	for _, m := range dlqMsgs(t, n) {
		if m.Subject == deadletter.Subject("over", deadletter.Backlog) {
			dead[m.Header.Get(streams.HeaderEventID)] = true
		}
	}
	var both []string
	for _, d := range over.deliveries() {
		if id := d.header.Get("webhook-id"); dead[id] {
			both = append(both, id)
		}
	}
	require.Empty(t, both, "events both delivered and dead-lettered as backlog")
	require.Equal(t, events, distinctIDs(over)+len(dead), "an event neither delivered nor dead-lettered")
	testutil.Progress(t, func() int { return distinctIDs(healthy) }, events, 15*time.Second, "the healthy subscriber's deliveries")
}

// dlqMsgs returns every message of the DLQ, read one by one.
func dlqMsgs(t *testing.T, n *testutil.NATS) []*jetstream.RawStreamMsg {
	t.Helper()
	ctx := testutil.Context(t)
	s, err := n.JS.Stream(ctx, streams.DLQ)
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	var out []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		require.NoError(t, err)
		out = append(out, m)
	}
	return out
}
