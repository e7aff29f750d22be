package main

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/fanout"
	"github.com/relay-dev/relay/internal/overflow"
	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

// backlogCost counts the JetStream requests and writes that bringing a
// backlog back from overflow costs, over every relay: a core subscription
// on a subject gets every message published on it, whichever client sent
// it, so it sees each request, and each publish that the stream then drops
// as a duplicate too.
type backlogCost struct {
	mu sync.Mutex
	// reads are the batched direct gets of DELIVERIES (the overflow reads).
	reads int
	// purges are the subject purges of DELIVERIES that follow them.
	purges int
	// refills and spills are the copies republished to a lane or to
	// RETRIES (by Nats-Msg-Id refill-… and spill-…).
	refills, spills int
	// leases are the writes and reads of relay_refill.
	leases int
	// sweeps are the stream infos of DELIVERIES (each relay's look for
	// backlogs every 2 s: a cost in time, not in messages).
	sweeps int
	subs   []*nats.Subscription
}

// tap starts counting on nc.
func (c *backlogCost) tap(t *testing.T, nc *nats.Conn) {
	t.Helper()
	count := func(subject string, counter func(m *nats.Msg) *int) {
		sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
			c.mu.Lock()
			defer c.mu.Unlock()
			if n := counter(m); n != nil {
				*n++
			}
		})
		require.NoError(t, err)
		c.subs = append(c.subs, sub)
	}
	count("$JS.API.DIRECT.GET."+streams.Deliveries, func(*nats.Msg) *int { return &c.reads })
	count("$JS.API.STREAM.PURGE."+streams.Deliveries, func(*nats.Msg) *int { return &c.purges })
	count("$JS.API.STREAM.INFO."+streams.Deliveries, func(*nats.Msg) *int { return &c.sweeps })
	count("$KV."+streams.RefillBucket+".>", func(*nats.Msg) *int { return &c.leases })
	count("$JS.API.DIRECT.GET.KV_"+streams.RefillBucket+".>", func(*nats.Msg) *int { return &c.leases })
	byID := func(m *nats.Msg) *int {
		id := m.Header.Get(nats.MsgIdHdr)
		switch {
		case strings.HasPrefix(id, "refill-"):
			return &c.refills
		case strings.HasPrefix(id, "spill-"):
			return &c.spills
		}
		return nil
	}
	count("deliveries.>", byID)
	count("retries.>", byID)
	require.NoError(t, nc.Flush())
}

// stop ends the count.
func (c *backlogCost) stop(t *testing.T, nc *nats.Conn) {
	t.Helper()
	require.NoError(t, nc.Flush())
	for _, sub := range c.subs {
		require.NoError(t, sub.Unsubscribe())
	}
}

// total is every request and write counted but the sweeps.
func (c *backlogCost) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reads + c.purges + c.refills + c.spills + c.leases
}

func (c *backlogCost) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprintf("%d direct gets, %d purges, %d refill and %d spill publishes, %d lease operations (%d stream infos)",
		c.reads, c.purges, c.refills, c.spills, c.leases, c.sweeps)
}

// backlogRun has relays `relay run` share a paused subscriber's backlog of
// events, resumes it, and counts what bringing the backlog back costs until
// its receiver has every event.
func backlogRun(t *testing.T, relays, events int) *backlogCost {
	t.Helper()
	n := testutil.StartRelayNATS(t)
	ctx := testutil.Context(t)
	rcv := newReceiver(t)
	mustRelay(t, "sub", "add", "held", "--nats", n.URL, "--url", rcv.URL, "--secret", testSecret,
		"--rate", "400", "--events", "x")
	mustRelay(t, "sub", "pause", "held", "--nats", n.URL)
	for range relays {
		startRelay(t, n.URL, "--allow-private-targets")
	}
	// Every relay pulls from the subscriber's lane.
	lane, err := n.JS.Consumer(ctx, streams.Deliveries, "lane_"+subscribers.LaneFor("held", 4))
	testutil.Eventually(t, func() bool {
		if err != nil {
			lane, err = n.JS.Consumer(ctx, streams.Deliveries, "lane_"+subscribers.LaneFor("held", 4))
			return false
		}
		ci, ierr := lane.Info(ctx)
		return ierr == nil && ci.NumWaiting >= relays
	}, "the relays do not all pull")

	for i := range events {
		m := &nats.Msg{Subject: fanout.SubjectPrefix + "x", Data: []byte(`{}`), Header: nats.Header{}}
		m.Header.Set(nats.MsgIdHdr, fmt.Sprintf("evt-%05d", i))
		_, err := n.JS.PublishMsgAsync(m)
		require.NoError(t, err)
		if i%500 == 499 {
			<-n.JS.PublishAsyncComplete()
		}
	}
	<-n.JS.PublishAsyncComplete()
	stream, err := n.JS.Stream(ctx, streams.Deliveries)
	require.NoError(t, err)
	testutil.Eventually(t, func() bool {
		backlogs, err := overflow.Backlogs(ctx, stream)
		return err == nil && backlogs["held"] == uint64(events)
	}, "the paused subscriber's events are not all in overflow")

	cost := &backlogCost{}
	cost.tap(t, n.Conn)
	mustRelay(t, "sub", "resume", "held", "--nats", n.URL)
	// As long as deliveries keep coming: on a loaded host the backlog
	// comes back at a fraction of a quiet one's pace.
	testutil.Progress(t, func() int {
		ids := make(map[string]bool, events)
		for _, d := range rcv.deliveries() {
			ids[d.header.Get("webhook-id")] = true
		}
		return len(ids)
	}, events, 30*time.Second, "events delivered")
	cost.stop(t, n.Conn)
	return cost
}

// TestBacklogCostDoesNotGrowWithRelays: three relays sharing a backlog in
// overflow read and write it as often as one relay does. One relay at a time
// brings a subscriber's backlog back (the relay_refill lease), so each
// overflowed message is read once and republished once whatever the number
// of relays; the leases cost a few operations a refill of hundreds.
func TestBacklogCostDoesNotGrowWithRelays(t *testing.T) {
	t.Parallel()
	const events = 4000
	one := backlogRun(t, 1, events)
	three := backlogRun(t, 3, events)
	perMsg := func(c *backlogCost) float64 { return float64(c.total()) / events }
	t.Logf("one relay: %.3f a message: %v", perMsg(one), one)
	t.Logf("three relays: %.3f a message: %v", perMsg(three), three)
	require.Zero(t, three.spills, "nothing spilled: DELIVERIES had room")
	require.LessOrEqual(t, three.refills, events, "a message republished twice")
	// A small constant: the last refill of each relay, which finds the
	// overflow empty, and a few leases found taken.
	const slack = 0.02
	require.LessOrEqual(t, perMsg(three), perMsg(one)*1.10+slack,
		"three relays cost more than one relay a message: %v against %v", three, one)
}
