package main

import (
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/fanout"
	"github.com/relay-dev/relay/internal/overflow"
	"github.com/relay-dev/relay/internal/subscribers"
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
	ctx := testutil.Context(t)
	stream, err := n.JS.Stream(ctx, streams.Deliveries)
	require.NoError(t, err)
	burst := func(prefix string, count int) {
		for i := range count {
			m := &nats.Msg{Subject: fanout.SubjectPrefix + "x", Data: []byte(`{}`), Header: nats.Header{}}
			m.Header.Set(nats.MsgIdHdr, fmt.Sprintf("%s-%04d", prefix, i))
			_, err := n.JS.PublishMsgAsync(m)
			require.NoError(t, err)
			if i%500 == 499 {
				<-n.JS.PublishAsyncComplete()
			}
		}
		<-n.JS.PublishAsyncComplete()
	}
	lastSeq := func() uint64 {
		info, err := stream.Info(ctx)
		require.NoError(t, err)
		return info.State.LastSeq
	}
	// A first backlog, moved to overflow by the lane (the subscriber holds
	// two seconds of its rate, at least its 16 in-flight slots).
	burst("pre", 200)
	testutil.Eventually(t, func() bool {
		backlogs, err := overflow.Backlogs(ctx, stream)
		return err == nil && backlogs["slow"] >= 100
	}, "no backlog in overflow")
	before := lastSeq()

	burst("evt", events)
	lane := "lane_" + subscribers.LaneFor("slow", 4)
	testutil.Eventually(t, func() bool {
		if !fannedOut(ctx, n.JS) {
			return false
		}
		c, err := n.JS.Consumer(ctx, streams.Deliveries, lane)
		if err != nil {
			return false
		}
		ci, err := c.Info(ctx)
		return err == nil && ci.NumPending == 0
	}, "burst not fanned out")
	// events copies, and what went out and back through the lane.
	extra := int64(lastSeq()-before) - events
	t.Logf("%d events to a subscriber at 5/s with a backlog: %d writes beyond the copies", events, extra)
	require.Less(t, extra, int64(events/4), "copies went through the lane and were moved again")
}
