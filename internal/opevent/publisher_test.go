package opevent

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/clock"
	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

// running starts a publisher on a server with relay's streams; it is
// stopped, and waited for, when the test ends.
func running(t *testing.T, cfg Config) (*Publisher, *testutil.NATS) {
	t.Helper()
	n := testutil.StartRelayNATS(t)
	cfg.JS = n.JS
	p, err := New(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = p.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return p, n
}

// published returns the operational events stored in EVENTS, in order.
func published(t *testing.T, n *testutil.NATS) []Event {
	t.Helper()
	ctx := testutil.Context(t)
	c, err := n.JS.OrderedConsumer(ctx, streams.Events, jetstream.OrderedConsumerConfig{FilterSubjects: []string{"events.relay.>"}})
	require.NoError(t, err)
	info, err := c.Info(ctx)
	require.NoError(t, err)
	var out []Event
	if info.NumPending == 0 {
		return nil
	}
	batch, err := c.FetchNoWait(int(info.NumPending))
	require.NoError(t, err)
	for m := range batch.Messages() {
		var ev Event
		require.NoError(t, json.Unmarshal(m.Data(), &ev))
		require.Equal(t, "events."+ev.Type, m.Subject())
		out = append(out, ev)
	}
	return out
}

// waitEvents waits until EVENTS holds want operational events.
func waitEvents(t *testing.T, n *testutil.NATS, want int) []Event {
	t.Helper()
	var got []Event
	testutil.Eventually(t, func() bool { got = published(t, n); return len(got) >= want }, "operational events: want %d", want)
	return got
}

// TestOneEventPerHappeningWhoeverReportsIt: two relays reporting the same
// disable (the same write) and the same pause make one event each.
func TestOneEventPerHappeningWhoeverReportsIt(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	at := time.Date(2026, 12, 5, 1, 0, 0, 0, time.UTC)
	until := time.Now().Add(time.Hour)
	for _, relay := range []string{"a", "b"} {
		p, err := New(Config{JS: n.JS, Relay: relay})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = p.Run(ctx) }()
		p.Disabled("sub1", "410 Gone", 410, at)
		p.Paused("sub1", until, 429)
		p.CircuitOpened("sub1", until, 1, 503)
		cancel() // Run publishes what is queued before it returns
		<-done
	}
	got := published(t, n)
	require.Len(t, got, 3)
	require.Equal(t, Event{Type: SubscriberDisabled, Subscriber: "sub1", Reason: "410 Gone", Status: 410, At: at, Relay: "a"}, got[0])
	require.Equal(t, SubscriberPaused, got[1].Type)
	require.Equal(t, until.UTC().Truncate(time.Nanosecond), got[1].Until.UTC())
	require.Equal(t, CircuitOpened, got[2].Type)
	require.Equal(t, 1, got[2].Count)
}

// TestDeadLettersMakeOneEventAMinute: dead letters of one subscriber and
// reason within a minute make one relay.delivery.dead with their count;
// another reason, another subscriber or the next minute another; those of
// operational events none.
func TestDeadLettersMakeOneEventAMinute(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Date(2026, 12, 5, 1, 0, 10, 0, time.UTC))
	p, n := running(t, Config{Relay: "r", Clock: clk})
	for range 5 {
		p.Dead("a", "max_attempts", "order.paid")
	}
	p.Dead("a", "backlog", "order.paid")
	p.Dead("b", "max_attempts", "order.paid")
	p.Dead("a", "max_attempts", SubscriberDisabled) // about a delivery of one: none
	clk.Advance(20 * time.Second)
	p.Dead("a", "max_attempts", "order.paid")
	time.Sleep(1500 * time.Millisecond) // a tick: the minute has not ended
	require.Empty(t, published(t, n))

	clk.Advance(31 * time.Second) // 01:01:01
	p.Dead("a", "max_attempts", "order.paid")
	got := waitEvents(t, n, 3)
	byKey := map[string]Event{}
	for _, ev := range got {
		require.Equal(t, DeliveryDead, ev.Type)
		byKey[ev.Subscriber+"/"+ev.Reason] = ev
	}
	require.Len(t, byKey, 3)
	require.Equal(t, 6, byKey["a/max_attempts"].Count)
	require.Equal(t, time.Date(2026, 12, 5, 1, 0, 10, 0, time.UTC), byKey["a/max_attempts"].From)
	require.Equal(t, time.Date(2026, 12, 5, 1, 0, 30, 0, time.UTC), byKey["a/max_attempts"].To)
	require.Equal(t, 1, byKey["a/backlog"].Count)
	require.Equal(t, 1, byKey["b/max_attempts"].Count)

	clk.Advance(time.Minute)
	got = waitEvents(t, n, 4)
	require.Equal(t, 1, got[3].Count, "the next minute's")
}

// TestResumeAnnouncedWhenThePauseEnds: a pause this relay stored is
// followed by relay.subscriber.resumed at its end, unless a later pause
// (another relay's, as the watch shows it) holds the subscriber then; a
// pause extended by this relay is announced once, resumed at the later
// end.
func TestResumeAnnouncedWhenThePauseEnds(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 12, 5, 1, 0, 0, 0, time.UTC)
	clk := clock.NewFake(start)
	later := map[string]time.Time{"held": start.Add(time.Hour)}
	p, n := running(t, Config{Relay: "r", Clock: clk, PausedUntil: func(id string) time.Time { return later[id] }})
	p.Paused("a", start.Add(10*time.Second), 429)
	p.Paused("a", start.Add(20*time.Second), 429) // extended: no second paused event
	p.Paused("held", start.Add(10*time.Second), 503)
	waitEvents(t, n, 2)
	clk.Advance(15 * time.Second)
	time.Sleep(1500 * time.Millisecond)
	require.Len(t, published(t, n), 2, "nothing ends at 15 s")
	clk.Advance(10 * time.Second)
	time.Sleep(1500 * time.Millisecond)
	require.Len(t, published(t, n), 2, "the pause ended at 20 s: its resume waits for ResumeQuiet")
	clk.Advance(ResumeQuiet)
	got := waitEvents(t, n, 3)
	require.Len(t, got, 3)
	require.Equal(t, SubscriberResumed, got[2].Type)
	require.Equal(t, "a", got[2].Subscriber)
	require.Equal(t, start.Add(20*time.Second), got[2].Until)
}

// TestQueueFullDropsRatherThanWaits: an announcement never waits for
// NATS; past QueueSize waiting events the new one is dropped.
func TestQueueFullDropsRatherThanWaits(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	p, err := New(Config{JS: n.JS, Relay: "r", Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	start := time.Now()
	for i := range QueueSize + 10 {
		p.CircuitOpened("a", start.Add(time.Duration(i)*time.Millisecond), i, 503)
	}
	require.Less(t, time.Since(start), 5*time.Second) // not run: nothing could publish
	p.mu.Lock()
	require.Equal(t, 10, p.dropped)
	p.mu.Unlock()
}

func TestNilPublisherReportsNothing(t *testing.T) {
	var p *Publisher
	p.Disabled("a", "r", 410, time.Now())
	p.Paused("a", time.Now(), 429)
	p.CircuitOpened("a", time.Now(), 1, 0)
	p.CircuitClosed("a", time.Now())
	p.Dead("a", "rejected", "x")
}

func TestIDsCarryNoDot(t *testing.T) {
	for _, typ := range Types {
		require.NotContains(t, id(typ, "sub-1_x", "1733360400000"), ".")
		require.True(t, Is(typ))
	}
	require.False(t, Is("relayx.a"))
}

// TestPausedAgainAndAgainMakesOnePausedAndOneResumed: a subscriber whose
// every Retry-After of 20 s is followed by another at once (a pause stored
// again just after the last ended) makes one relay.subscriber.paused and,
// once it stays unpaused for ResumeQuiet, one relay.subscriber.resumed
// with the end of the last pause: not a pair every 20 s.
func TestPausedAgainAndAgainMakesOnePausedAndOneResumed(t *testing.T) {
	start := time.Date(2026, 12, 5, 1, 0, 0, 0, time.UTC)
	clk := clock.NewFake(start)
	p, n := running(t, Config{Relay: "r", Clock: clk})
	end := start
	for range 5 {
		end = clk.Now().Add(20 * time.Second)
		p.Paused("a", end, 429)
		clk.Advance(20*time.Second + 100*time.Millisecond)
		time.Sleep(50 * time.Millisecond) // a tick may look: nothing is due
	}
	clk.Advance(ResumeQuiet)
	got := waitEvents(t, n, 2)
	time.Sleep(1500 * time.Millisecond)
	got = published(t, n)
	require.Len(t, got, 2, "%+v", got)
	require.Equal(t, SubscriberPaused, got[0].Type)
	require.Equal(t, SubscriberResumed, got[1].Type)
	require.Equal(t, end, got[1].Until)
}
