package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/bodies"
	"github.com/relay-dev/relay/internal/deadletter"
	"github.com/relay-dev/relay/internal/fanout"
	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

// writes counts what relay publishes on deliveries.> and bodies.>, as a
// plain NATS subscriber sees it.
type writes struct {
	mu sync.Mutex
	// bodies is the publishes on bodies.>; copies those of a fan-out copy
	// (Nats-Msg-Id <event id>.<subscriber>) on a lane, carried the
	// sequence of their event in place of a body.
	bodies, copies, withBody int
	bytes                    int
}

func countWrites(t *testing.T, nc *nats.Conn) *writes {
	t.Helper()
	w := &writes{}
	for _, subject := range []string{"deliveries.>", "bodies.>"} {
		sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
			w.mu.Lock()
			defer w.mu.Unlock()
			if strings.HasPrefix(m.Subject, "bodies.") {
				w.bodies++
				w.bytes += len(m.Data)
				return
			}
			id := m.Header.Get(nats.MsgIdHdr)
			if strings.HasPrefix(m.Subject, "deliveries.overflow.") || !strings.Contains(id, ".") {
				return
			}
			w.copies++
			for k, v := range m.Header {
				w.bytes += len(k) + len(strings.Join(v, ""))
			}
			w.bytes += len(m.Data)
			if len(m.Data) > 0 || m.Header.Get(streams.HeaderEventSeq) == "" {
				w.withBody++
			}
		})
		require.NoError(t, err)
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	require.NoError(t, nc.Flush())
	return w
}

// TestSharedBodyIsStoredOnce: 100 events of 16 KB fanned out to four
// subscribers store each body once, in BODIES, and copies that carry the
// event's sequence; every subscriber gets every body exactly as published
// and signed over it, including one rate-limited so that its deliveries
// wait while EVENTS is purged by hand, one paused (its deliveries move to
// its overflow, and come back), and one whose first attempts fail (its
// retries are parked in RETRIES).
func TestSharedBodyIsStoredOnce(t *testing.T) {
	const events, size = 100, 16 << 10
	n := testutil.StartRelayNATS(t)
	w := countWrites(t, n.Conn)
	sinks := map[string]*webhookSink{}
	for _, id := range []string{"fast", "slow", "paused", "failing"} {
		sinks[id] = newReceiver(t)
		args := []string{"sub", "add", id, "--nats", n.URL, "--url", sinks[id].URL, "--secret", testSecret, "--events", "x"}
		switch id {
		case "slow":
			args = append(args, "--rate", "25")
		case "failing":
			args = append(args, "--retry-base", "1s", "--retry-max", "1s")
		}
		mustRelay(t, args...)
	}
	mustRelay(t, "sub", "pause", "paused", "--nats", n.URL)
	sinks["failing"].setStatus(http.StatusServiceUnavailable)
	startRelay(t, n.URL, "--allow-private-targets")

	ctx := testutil.Context(t)
	want := map[string][]byte{}
	for i := range events {
		id := fmt.Sprintf("big-%03d", i)
		body := bytes.Repeat([]byte(id), size/len(id))
		want[id] = body
		m := &nats.Msg{Subject: fanout.SubjectPrefix + "x", Data: body, Header: nats.Header{}}
		m.Header.Set(nats.MsgIdHdr, id)
		_, err := n.JS.PublishMsg(ctx, m)
		require.NoError(t, err)
	}
	testutil.Eventually(t, func() bool { return fannedOut(ctx, n.JS) }, "not fanned out")
	// An operator's purge of EVENTS: the slow subscriber's deliveries
	// still wait, and their bodies are in BODIES.
	s, err := n.JS.Stream(ctx, streams.Events)
	require.NoError(t, err)
	require.NoError(t, s.Purge(ctx))
	require.Less(t, len(sinks["slow"].deliveries()), events, "the slow subscriber had nothing left to wait for")

	sinks["failing"].setStatus(http.StatusOK)
	mustRelay(t, "sub", "resume", "paused", "--nats", n.URL)
	for id, sink := range sinks {
		testutil.Eventually(t, func() bool { return distinctIDs(sink) >= events }, "%s: %d of %d", id, distinctIDs(sink), events)
		for _, d := range sink.deliveries() {
			if d.header.Get("webhook-id") == "" {
				continue
			}
			require.Equal(t, want[d.header.Get("webhook-id")], d.body, "%s: the body of %s", id, d.header.Get("webhook-id"))
			verify(t, d)
		}
	}
	waitIdle(t, n.JS)
	w.mu.Lock()
	defer w.mu.Unlock()
	t.Logf("%d bodies stored, %d copies on the lanes, %d of them with a body; %d bytes a delivery", w.bodies, w.copies, w.withBody, w.bytes/(4*events))
	// A body is shared when two copies or more go to lanes; a subscriber
	// behind a backlog gets its copy whole in its overflow. On a loaded
	// host the slow, paused and failing ones were all behind one for 27 of
	// the events: their bodies were not stored, and the fast one's copy
	// carried its body.
	require.LessOrEqual(t, w.bodies, events, "a body stored twice")
	require.NotZero(t, w.bodies)
	require.NotZero(t, w.copies)
	require.LessOrEqual(t, w.withBody, events-w.bodies, "a copy on a lane carried a body stored in BODIES")
	require.Less(t, w.bytes/(4*events), 1024+size/4, "bytes written per delivery")
}

// TestDeliveryWhoseBodyIsGoneIsDeadLettered: a delivery that carries its
// event's sequence, once BODIES and EVENTS both lost that event (both
// purged by hand), is dead-lettered as body_lost with what was read in its
// error, with no request; relay dlq show says it has no body, and a replay
// leaves that dead letter alone.
func TestDeliveryWhoseBodyIsGoneIsDeadLettered(t *testing.T) {
	n := testutil.StartRelayNATS(t)
	sink := newReceiver(t)
	mustRelay(t, "sub", "add", "a", "--nats", n.URL, "--url", sink.URL, "--secret", testSecret, "--events", "x")
	startRelay(t, n.URL, "--allow-private-targets")
	ctx := testutil.Context(t)
	m := &nats.Msg{Subject: streams.DeliverySubject(subscribers.Subscriber{ID: "a"}.Lane(4), "a"), Header: nats.Header{}}
	m.Header.Set(streams.HeaderEventID, "lost")
	m.Header.Set(streams.HeaderEventSeq, "4242")
	_, err := n.JS.PublishMsg(ctx, m, jetstream.WithMsgID("lost.a"))
	require.NoError(t, err)
	var got []deadletter.Entry
	testutil.Eventually(t, func() bool {
		got = dlqEntries(t, n.URL)
		return len(got) == 1
	}, "not dead-lettered")
	require.Equal(t, deadletter.BodyLost, got[0].Reason)
	require.Contains(t, got[0].LastError, "the body is in neither BODIES nor EVENTS: event 4242 (lost): BODIES: not stored; EVENTS: not stored")
	require.Empty(t, sink.deliveries())
	require.Len(t, dlqEntries(t, n.URL, "--reason", "body_lost"), 1)

	show := mustRelay(t, "dlq", "show", strconv.FormatUint(got[0].DLQSeq, 10), "--nats", n.URL)
	require.Contains(t, show, "body: none")
	// Never replayed: it would be sent with an empty body.
	out := mustRelay(t, "dlq", "replay", "--nats", n.URL, "--lanes", "4")
	require.Contains(t, out, "1 no body")
	require.Len(t, dlqEntries(t, n.URL), 1)
	require.Empty(t, sink.deliveries())
}

// sharedBodies publishes events of size bytes (ids lost-000…) for two
// subscribers, a and b, whose receivers take each request for took, one
// at a time: their deliveries wait on their lanes (an unlimited
// subscriber's lane holds about ten seconds of its pace), their bodies in
// BODIES, read 64 events at a time as they are sent. It returns the bodies
// by id and the two receivers, once the first deliveries are made.
func sharedBodies(t *testing.T, n *testutil.NATS, events, size int, took time.Duration) (map[string][]byte, map[string]*webhookSink) {
	t.Helper()
	sinks := map[string]*webhookSink{}
	for _, id := range []string{"a", "b"} {
		sinks[id] = newSlowReceiver(t, took)
		mustRelay(t, "sub", "add", id, "--nats", n.URL, "--url", sinks[id].URL, "--secret", testSecret, "--events", "x",
			"--max-in-flight", "1")
	}
	startRelay(t, n.URL, "--allow-private-targets")
	ctx := testutil.Context(t)
	want := map[string][]byte{}
	for i := range events {
		id := fmt.Sprintf("lost-%03d", i)
		body := bytes.Repeat([]byte(id), size/len(id))
		want[id] = body
		publish(t, n.JS, "x", id, body)
	}
	testutil.Eventually(t, func() bool { return fannedOut(ctx, n.JS) }, "not fanned out")
	testutil.Eventually(t, func() bool { return sinks["a"].count() > 0 && sinks["b"].count() > 0 }, "nothing delivered")
	return want, sinks
}

// newSlowReceiver is newReceiver taking took over each request.
func newSlowReceiver(t *testing.T, took time.Duration) *webhookSink {
	t.Helper()
	r := &webhookSink{status: http.StatusOK}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		time.Sleep(took)
		r.mu.Lock()
		r.got = append(r.got, delivery{header: req.Header.Clone(), body: body, path: req.URL.Path})
		r.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(r.Close)
	return r
}

// deleteBodies deletes BODIES, as an operator's `nats stream rm BODIES`
// (or the loss of its one replica) does, and returns when.
func deleteBodies(t *testing.T, n *testutil.NATS) time.Time {
	t.Helper()
	require.NoError(t, n.JS.DeleteStream(testutil.Context(t), streams.Bodies))
	return time.Now()
}

// TestLostBodiesAreReadFromEvents: 300 events of 2 KB for two subscribers
// whose deliveries wait on their lanes; BODIES deleted after the first
// deliveries. Every event reaches both, with its body (read from EVENTS),
// and the relay makes BODIES again with its definition while it runs.
func TestLostBodiesAreReadFromEvents(t *testing.T) {
	const events, size = 300, 2 << 10
	n := testutil.StartRelayNATS(t)
	want, sinks := sharedBodies(t, n, events, size, 20*time.Millisecond)
	deleteBodies(t, n)
	require.Less(t, sinks["a"].count(), events, "nothing was left to deliver when BODIES was deleted")
	for id, sink := range sinks {
		testutil.Eventually(t, func() bool { return distinctIDs(sink) >= events }, "%s: %d of %d", id, distinctIDs(sink), events)
		for _, d := range sink.deliveries() {
			require.Equal(t, want[d.header.Get("webhook-id")], d.body, "%s: the body of %s", id, d.header.Get("webhook-id"))
			verify(t, d)
		}
	}
	require.Empty(t, dlqEntries(t, n.URL))
	ctx := testutil.Context(t)
	def, err := streams.Config(streams.Bodies)
	require.NoError(t, err)
	testutil.Eventually(t, func() bool {
		_, err := n.JS.Stream(ctx, streams.Bodies)
		return err == nil
	}, "BODIES not made again")
	s, err := n.JS.Stream(ctx, streams.Bodies)
	require.NoError(t, err)
	got := s.CachedInfo().Config
	require.Equal(t, def.Subjects, got.Subjects)
	require.Equal(t, def.Discard, got.Discard)
	require.Equal(t, def.MaxMsgsPerSubject, got.MaxMsgsPerSubject)
	require.True(t, got.AllowDirect)
}

// TestBodiesLostFromBothAreDeadLettered: 100 events of 2 KB for two
// subscribers whose deliveries wait on their lanes; BODIES deleted and
// EVENTS purged after the first deliveries. Each event reaches each
// subscriber or is dead-lettered as body_lost, with no body, its error
// naming both streams and what each answered: none is handed back for
// ever, and none is sent without its body.
func TestBodiesLostFromBothAreDeadLettered(t *testing.T) {
	const events, size = 100, 2 << 10
	n := testutil.StartRelayNATS(t)
	want, sinks := sharedBodies(t, n, events, size, 50*time.Millisecond)
	lost := deleteBodies(t, n)
	s, err := n.JS.Stream(testutil.Context(t), streams.Events)
	require.NoError(t, err)
	require.NoError(t, s.Purge(testutil.Context(t)))
	dead := map[string]int{}
	testutil.Eventually(t, func() bool {
		clear(dead)
		for _, e := range dlqEntries(t, n.URL) {
			dead[e.Subscriber]++
		}
		return distinctIDs(sinks["a"])+dead["a"] >= events && distinctIDs(sinks["b"])+dead["b"] >= events
	}, "a: %d delivered, %d dead; b: %d delivered, %d dead", distinctIDs(sinks["a"]), dead["a"], distinctIDs(sinks["b"]), dead["b"])
	entries := dlqEntries(t, n.URL)
	require.NotEmpty(t, entries, "every body was read before BODIES was deleted")
	var last time.Time
	for _, e := range entries {
		require.Equal(t, deadletter.BodyLost, e.Reason, "%+v", e)
		require.Contains(t, e.LastError, "the body is in neither BODIES nor EVENTS: event ")
		require.Contains(t, e.LastError, "BODIES: not stored; EVENTS: not stored")
		require.Zero(t, e.Attempts)
		if e.DeadAt.After(last) {
			last = e.DeadAt
		}
	}
	t.Logf("%d dead letters, the last %s after BODIES was deleted (bound: %s)", len(entries), last.Sub(lost).Round(time.Millisecond), bodies.GiveUp)
	for id, sink := range sinks {
		for _, d := range sink.deliveries() {
			require.Equal(t, want[d.header.Get("webhook-id")], d.body, "%s: the body of %s", id, d.header.Get("webhook-id"))
		}
		require.Equal(t, events, distinctIDs(sink)+dead[id], "%s: delivered and dead-lettered", id)
	}
}

// TestDeliveryPastItsDeadlineWhoseBodyIsLostIsExpired: a delivery past its
// deadline whose body cannot be read (BODIES deleted, EVENTS without it)
// dies of its deadline, expired, once the read has an answer (BODIES made
// again), without its body and with the read's answer in its error: it
// is never handed back for ever, nor sent.
func TestDeliveryPastItsDeadlineWhoseBodyIsLostIsExpired(t *testing.T) {
	n := testutil.StartRelayNATS(t)
	sink := newReceiver(t)
	mustRelay(t, "sub", "add", "a", "--nats", n.URL, "--url", sink.URL, "--secret", testSecret, "--events", "x")
	startRelay(t, n.URL, "--allow-private-targets")
	ctx := testutil.Context(t)
	lane := subscribers.Subscriber{ID: "a"}.Lane(4)
	testutil.Eventually(t, func() bool {
		_, err := n.JS.Consumer(ctx, streams.Deliveries, "lane_"+lane)
		return err == nil
	}, "the lane did not start")
	deleteBodies(t, n)
	m := &nats.Msg{Subject: streams.DeliverySubject(lane, "a"), Header: nats.Header{}}
	m.Header.Set(streams.HeaderEventID, "late")
	m.Header.Set(streams.HeaderEventSeq, "4242")
	m.Header.Set(streams.HeaderDeadline, "2020-01-01T00:00:00Z")
	_, err := n.JS.PublishMsg(ctx, m, jetstream.WithMsgID("late.a"))
	require.NoError(t, err)
	got := waitDead(t, n.URL, 1)
	require.Equal(t, deadletter.Expired, got[0].Reason)
	require.Contains(t, got[0].LastError, "the body is in neither BODIES nor EVENTS: event 4242 (late)")
	require.Contains(t, mustRelay(t, "dlq", "show", strconv.FormatUint(got[0].DLQSeq, 10), "--nats", n.URL), "body: none")
	require.Empty(t, sink.deliveries())
}
