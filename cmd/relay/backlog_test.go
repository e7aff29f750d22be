package main

import (
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/fanout"
	"github.com/relay-dev/relay/internal/overflow"
	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

// TestBacklogSkipsTheLane: once a subscriber has a backlog in overflow, the
// fan-out writes its further copies there at once, so a burst to a slow
// subscriber is written about once a message, not once onto its lane and
// again into overflow, and its lane has nothing of it for lane-mates to
// wait behind.
func TestBacklogSkipsTheLane(t *testing.T) {
	t.Parallel()
	const events = 3000
	n := testutil.StartRelayNATS(t)
	rcv := newReceiver(t)
	mustRelay(t, "sub", "add", "slow", "--nats", n.URL, "--url", rcv.URL, "--secret", testSecret, "--rate", "5", "--events", "x")
	startRelay(t, n.URL, "--allow-private-targets")
	// One event first, so that the relay has seen the subscriber.
	publish(t, n.JS, "x", "first", []byte(`{}`))
	testutil.Eventually(t, func() bool { return rcv.count() == 1 }, "first event not delivered")

	ctx := testutil.Context(t)
	for i := range events {
		m := &nats.Msg{Subject: fanout.SubjectPrefix + "x", Data: []byte(`{}`), Header: nats.Header{}}
		m.Header.Set(nats.MsgIdHdr, fmt.Sprintf("evt-%04d", i))
		_, err := n.JS.PublishMsgAsync(m)
		require.NoError(t, err)
		if i%500 == 499 {
			<-n.JS.PublishAsyncComplete()
		}
	}
	<-n.JS.PublishAsyncComplete()
	stream, err := n.JS.Stream(ctx, streams.Deliveries)
	require.NoError(t, err)
	var last uint64
	testutil.Eventually(t, func() bool {
		c, err := n.JS.Consumer(ctx, streams.Events, fanout.ConsumerName)
		if err != nil {
			return false
		}
		ci, err := c.Info(ctx)
		if err != nil || ci.NumPending != 0 || ci.NumAckPending != 0 {
			return false
		}
		backlogs, err := overflow.Backlogs(ctx, stream)
		info, ierr := stream.Info(ctx)
		if err != nil || ierr != nil {
			return false
		}
		last = info.State.LastSeq
		return backlogs["slow"] >= events/2
	}, "backlog not in overflow")
	// 1 + events copies, and what went out and back through the lane.
	extra := int64(last) - 1 - events
	t.Logf("%d events to a subscriber at 5/s: %d writes beyond the copies", events, extra)
	require.Less(t, extra, int64(events/4), "copies went through the lane and were moved again")
}
