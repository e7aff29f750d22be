package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/fanout"
	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

// overlapSink is a loopback webhook endpoint that counts, per webhook-id,
// the requests it got and the requests that came while another with the
// same webhook-id was still open: a concurrent double POST, which no
// receiver's deduplication can stop.
type overlapSink struct {
	*httptest.Server
	mu       sync.Mutex
	open     map[string]int
	seen     map[string]int
	total    int
	overlaps int
}

// overlapHold is how long the sink keeps each request open, as a receiver
// that does some work before it answers: long enough that two sends of one
// message at once would overlap.
const overlapHold = 2 * time.Millisecond

func newOverlapSink(t *testing.T) *overlapSink {
	t.Helper()
	s := &overlapSink{open: map[string]int{}, seen: map[string]int{}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		id := req.Header.Get("webhook-id")
		s.mu.Lock()
		s.open[id]++
		if s.open[id] > 1 {
			s.overlaps++
		}
		s.seen[id]++
		s.total++
		s.mu.Unlock()
		time.Sleep(overlapHold)
		s.mu.Lock()
		s.open[id]--
		s.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(s.Close)
	return s
}

// counts returns the distinct webhook-ids got, the requests beyond one per
// id, and the concurrent double POSTs.
func (s *overlapSink) counts() (distinct, duplicates, overlaps int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.seen), s.total - len(s.seen), s.overlaps
}

func (s *overlapSink) distinct() int {
	d, _, _ := s.counts()
	return d
}

// TestSlowNATSNeverPostsTwiceAtOnce runs relay against NATS through a
// proxy that adds 0, 20 and 100 ms each way. Three subscribers get 2,000
// events: one unlimited, one rate-limited, one paused while the burst
// arrives (its deliveries go to overflow) and resumed once the fan-out is
// done (they come back by refills). Every event reaches every subscriber,
// no webhook-id is ever POSTed twice at once, and the deliveries handed
// back or sent again stay few: a slow server never holds a lane's pull
// loop, and no message's ack wait runs out inside relay (judged in a run
// where the server answered every keep-alive and pull in time: on a host
// that starves the server for seconds, letting go is what relay must do).
// The figures logged (deliveries a second) are the slow server's cost.
func TestSlowNATSNeverPostsTwiceAtOnce(t *testing.T) {
	for _, delay := range []time.Duration{0, 20 * time.Millisecond, 100 * time.Millisecond} {
		t.Run(fmt.Sprintf("%dms", delay.Milliseconds()), func(t *testing.T) {
			slowNATS(t, delay)
		})
	}
}

func slowNATS(t *testing.T, delay time.Duration) {
	const events = 2000
	n := testutil.StartRelayNATS(t)
	proxy := testutil.StartLatencyProxy(t, strings.TrimPrefix(n.URL, "nats://"), delay)
	fast, limited, paused := newOverlapSink(t), newOverlapSink(t), newOverlapSink(t)
	mustRelay(t, "sub", "add", "fast", "--nats", n.URL, "--url", fast.URL, "--secret", testSecret, "--events", "x",
		"--max-in-flight", "64")
	mustRelay(t, "sub", "add", "limited", "--nats", n.URL, "--url", limited.URL, "--secret", testSecret, "--events", "x",
		"--rate", "1000", "--burst", "100")
	mustRelay(t, "sub", "add", "paused", "--nats", n.URL, "--url", paused.URL, "--secret", testSecret, "--events", "x")
	mustRelay(t, "sub", "pause", "paused", "--nats", n.URL)

	// Every hand-back is a NAK, which the server announces.
	var naks atomic.Int64
	advisories, err := n.Conn.Subscribe("$JS.EVENT.ADVISORY.CONSUMER.MSG_NAKED."+streams.Deliveries+".*",
		func(*nats.Msg) { naks.Add(1) })
	require.NoError(t, err)
	t.Cleanup(func() { _ = advisories.Unsubscribe() })

	// A short ack wait, so that one running out inside relay would show
	// within the test: the message would come again, to be sent twice.
	r := startRelay(t, proxy.URL(), "--allow-private-targets", "--ack-wait", "10s")
	ctx := testutil.Context(t)
	testutil.Eventually(t, func() bool {
		_, err := n.JS.Consumer(ctx, streams.Deliveries, streams.LaneConsumer(subscribers.SharedLane(3)))
		if err != nil {
			return false
		}
		_, err = n.JS.Consumer(ctx, streams.Events, fanout.ConsumerName)
		return err == nil
	}, "relay did not start its consumers")

	// The lanes' redeliveries in progress, at their highest.
	var redelivered int
	look := func() {
		for i := range 4 {
			c, err := n.JS.Consumer(ctx, streams.Deliveries, streams.LaneConsumer(subscribers.SharedLane(i)))
			if err != nil {
				continue
			}
			if info, err := c.Info(ctx); err == nil {
				redelivered = max(redelivered, info.NumRedelivered)
			}
		}
	}

	start := time.Now()
	burstOf(t, n, "ev", events, 256)
	var fastAt time.Time
	// Judged by progress, not a deadline: on a loaded host 4,000
	// deliveries through a 100 ms proxy took longer than any fixed bound.
	testutil.Progress(t, func() int {
		look()
		if fastAt.IsZero() && fast.distinct() >= events {
			fastAt = time.Now()
		}
		return fast.distinct() + limited.distinct()
	}, 2*events, 15*time.Second, "%v: fast %d, limited %d of %d", delay, fast.distinct(), limited.distinct(), events)
	testutil.Eventually(t, func() bool { return fannedOut(ctx, n.JS) }, "%v: not all fanned out", delay)
	both := time.Since(start)
	mustRelay(t, "sub", "resume", "paused", "--nats", n.URL)
	resumed := time.Now()
	testutil.Progress(t, func() int {
		look()
		return paused.distinct()
	}, events, 15*time.Second, "%v: paused then resumed: %d of %d", delay, paused.distinct(), events)
	backlog := time.Since(resumed)

	letGo := strings.Count(r.stderr.String(), "letting go of a delivery")
	t.Logf("%v each way: fast %d/s (%v), fast+limited %d/s (%v), paused backlog back %d/s (%v); %d NAKs, at most %d redelivered at once, %d let go",
		delay, rate(events, fastAt.Sub(start)), fastAt.Sub(start).Round(time.Millisecond),
		rate(2*events, both), both.Round(time.Millisecond), rate(events, backlog), backlog.Round(time.Millisecond),
		naks.Load(), redelivered, letGo)
	for name, s := range map[string]*overlapSink{"fast": fast, "limited": limited, "paused": paused} {
		distinct, duplicates, overlaps := s.counts()
		t.Logf("%s: %d events, %d sent again, %d POSTed twice at once", name, distinct, duplicates, overlaps)
		require.Equal(t, events, distinct, "%s: every event, once at least", name)
		require.Zero(t, overlaps, "%s: a webhook-id POSTed twice at once", name)
		require.LessOrEqual(t, duplicates, events/100, "%s: sent again too often", name)
	}
	// A keep-alive left unanswered for a quarter of the ack wait (half of
	// it, once one was answered), or a pull request left for 1.5 times its
	// expiry, is no proxy's delay of 100 ms: the server or the host gave
	// no time, and what relay does then (let go, hand back) is the safe
	// thing, whose counts say nothing of the slow server.
	unanswered := strings.Count(r.stderr.String(), "keep-alive not confirmed") +
		strings.Count(r.stderr.String(), "pull request not ended by the server in time")
	if unanswered > 0 {
		t.Logf("%v: not judging the hand-backs and the let-gos: the server left %d requests unanswered for seconds", delay, unanswered)
		return
	}
	require.LessOrEqual(t, naks.Load(), int64(events/10), "deliveries handed back too often")
	require.LessOrEqual(t, redelivered, events/10, "too many redelivered at once")
	require.Zero(t, letGo, "a delivery's ack wait ran out inside relay")
}

// rate is n a second over d.
func rate(n int, d time.Duration) int {
	if d <= 0 {
		return 0
	}
	return int(float64(n) / d.Seconds())
}
