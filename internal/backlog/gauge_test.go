package backlog_test

import (
	"bytes"
	"context"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/backlog"
	"github.com/relay-dev/relay/internal/ratelimit"
	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

// view is a fixed subscriber set.
type view []subscribers.Subscriber

func (v view) All() []subscribers.Subscriber { return v }

// put stores count messages of size bytes on subject.
func put(t *testing.T, js jetstream.JetStream, subject string, count, size int) {
	t.Helper()
	ctx := testutil.Context(t)
	body := bytes.Repeat([]byte("x"), size)
	for range count {
		_, err := js.Publish(ctx, subject, body)
		require.NoError(t, err)
	}
}

func newGauge(t *testing.T, js jetstream.JetStream, subs ...subscribers.Subscriber) *backlog.Gauge {
	t.Helper()
	g, err := backlog.New(backlog.Config{JS: js, Subscribers: view(subs)})
	require.NoError(t, err)
	require.NoError(t, g.Refresh(testutil.Context(t)))
	return g
}

func TestShedsPastMaxBacklogCountingLaneOverflowAndRetries(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	a := subscribers.Subscriber{ID: "a", MaxBacklog: 6}
	b := subscribers.Subscriber{ID: "b", MaxBacklog: 6}
	put(t, n.JS, "deliveries.s03.a", 2, 10)
	put(t, n.JS, "deliveries.overflow.a", 2, 10)
	put(t, n.JS, "retries.wait.a.x1", 1, 10)
	put(t, n.JS, "retries.due.a", 1, 10)
	put(t, n.JS, "deliveries.s01.b", 1, 10)
	g := newGauge(t, n.JS, a, b)
	require.EqualValues(t, 6, g.Waiting("a"))
	v, why := g.Admit(&a, 10)
	require.Equal(t, backlog.Shed, v)
	require.Contains(t, why, "6 deliveries wait for subscriber a, its --max-backlog is 6")
	for range 5 {
		v, _ := g.Admit(&b, 10)
		require.Equal(t, backlog.Queue, v)
	}
	// b had 1 and was given 5: the next is its seventh.
	v, _ = g.Admit(&b, 10)
	require.Equal(t, backlog.Shed, v)
}

func TestCountsWhatItQueuedUntilTheStreamShowsIt(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	a := subscribers.Subscriber{ID: "a", MaxBacklog: 3}
	g := newGauge(t, n.JS, a)
	for range 3 {
		v, _ := g.Admit(&a, 10)
		require.Equal(t, backlog.Queue, v)
	}
	v, _ := g.Admit(&a, 10)
	require.Equal(t, backlog.Shed, v, "queued since the read, not yet read back")
	// The three are stored now, and their PubAcks in; a read counts them
	// once, not twice.
	put(t, n.JS, "deliveries.s00.a", 3, 10)
	for range 3 {
		g.Settled("a", true)
	}
	require.NoError(t, g.Refresh(testutil.Context(t)))
	require.EqualValues(t, 3, g.Waiting("a"))
	v, _ = g.Admit(&a, 10)
	require.Equal(t, backlog.Shed, v)
}

// A copy counts as waiting from its queueing on, whatever a read shows
// meanwhile: one whose PubAck has not come back is not stored yet, and no
// read can have seen it. (Beside a second test suite, 4,096 PubAcks
// outstanding at a read let a paused subscriber bound to 100 reach 285.)
func TestCountsCopiesWithoutAPubAckAcrossReads(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	a := subscribers.Subscriber{ID: "a", MaxBacklog: 3}
	g := newGauge(t, n.JS, a)
	for range 3 {
		v, _ := g.Admit(&a, 10)
		require.Equal(t, backlog.Queue, v)
	}
	require.NoError(t, g.Refresh(testutil.Context(t)))
	require.EqualValues(t, 3, g.Waiting("a"), "three on their way, none stored yet")
	v, _ := g.Admit(&a, 10)
	require.Equal(t, backlog.Shed, v)

	// Stored, and answered during a read: counted until the read after.
	put(t, n.JS, "deliveries.s00.a", 3, 10)
	for range 3 {
		g.Settled("a", true)
	}
	require.EqualValues(t, 3, g.Waiting("a"))
	require.NoError(t, g.Refresh(testutil.Context(t)))
	require.EqualValues(t, 3, g.Waiting("a"))
	g.Settled("a", true) // a second answer of the same copy changes nothing
	require.EqualValues(t, 3, g.Waiting("a"))
}

// A read that skipped the per-subject counts (the streams held fewer than
// any bound) still counts them once what this relay queued since could
// take a subscriber to its bound: a copy that may reach it asks for a read
// that counts, whether it came before the gauge's first read, while it was
// reading (which cannot have seen it), or just after.
func TestACopyThatMayReachTheBoundIsCountedWhenItCame(t *testing.T) {
	t.Parallel()
	for _, when := range []string{"before", "during", "after"} {
		t.Run(when, func(t *testing.T) {
			t.Parallel()
			n := testutil.StartRelayNATS(t)
			a := subscribers.Subscriber{ID: "a", MaxBacklog: 5}
			put(t, n.JS, "deliveries.s00.a", 4, 10) // 4 stored; the copy may be the fifth
			v := &heldView{subs: view{a}, reading: make(chan struct{}), release: make(chan struct{})}
			g, err := backlog.New(backlog.Config{JS: n.JS, Subscribers: v, Every: time.Hour})
			require.NoError(t, err)
			admit := func() {
				verdict, _ := g.Admit(&a, 10)
				require.Equal(t, backlog.Queue, verdict)
			}
			if when == "before" {
				admit()
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- g.Run(ctx) }()
			t.Cleanup(func() {
				cancel()
				require.NoError(t, <-done)
			})
			<-v.reading // the first read, held until released
			if when == "during" {
				admit()
			}
			close(v.release)
			if when == "after" {
				admit()
			}
			testutil.Eventually(t, func() bool { return g.Waiting("a") >= 5 },
				"no read that counts after a copy that may reach the bound: waiting %d", g.Waiting("a"))
			verdict, _ := g.Admit(&a, 10)
			require.Equal(t, backlog.Shed, verdict, "4 stored and 1 on its way: the bound is reached")
		})
	}
}

// heldView is a subscribers view that holds the gauge's first read: it
// closes reading and waits for release to be closed.
type heldView struct {
	subs             view
	reading, release chan struct{}
	once             sync.Once
}

func (v *heldView) All() []subscribers.Subscriber {
	v.once.Do(func() {
		close(v.reading)
		<-v.release
	})
	return v.subs
}

func TestFairShareOfANearlyFullDeliveries(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	ctx := testutil.Context(t)
	// The operator's bound: 100 KB.
	s, err := n.JS.Stream(ctx, streams.Deliveries)
	require.NoError(t, err)
	cfg := s.CachedInfo().Config
	cfg.MaxBytes = 100_000
	_, err = n.JS.UpdateStream(ctx, cfg)
	require.NoError(t, err)

	stuck := subscribers.Subscriber{ID: "stuck"}
	healthy := subscribers.Subscriber{ID: "healthy"}
	// Half full: nobody is shed for a share.
	put(t, n.JS, "deliveries.overflow.stuck", 50, 1000)
	g := newGauge(t, n.JS, stuck, healthy)
	v, _ := g.Admit(&stuck, 1000)
	require.Equal(t, backlog.Queue, v)
	// 85 % full, all of it stuck's: stuck is over its share once healthy
	// claims room, healthy is not.
	put(t, n.JS, "deliveries.overflow.stuck", 35, 1000)
	require.NoError(t, g.Refresh(ctx))
	v, _ = g.Admit(&healthy, 1000)
	require.Equal(t, backlog.Queue, v)
	v, why := g.Admit(&stuck, 1000)
	require.Equal(t, backlog.Shed, v)
	require.Contains(t, why, "full")
	require.Contains(t, why, "fair share")
	v, _ = g.Admit(&healthy, 1000)
	require.Equal(t, backlog.Queue, v)
}

func TestNilGaugeQueuesEverything(t *testing.T) {
	t.Parallel()
	var g *backlog.Gauge
	v, _ := g.Admit(&subscribers.Subscriber{ID: "a", MaxBacklog: 1}, 1)
	require.Equal(t, backlog.Queue, v)
	require.Zero(t, g.Waiting("a"))
}

func TestRunReadsUntilCancelled(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	a := subscribers.Subscriber{ID: "a", MaxBacklog: 2}
	g, err := backlog.New(backlog.Config{JS: n.JS, Subscribers: view{a}, Every: 10 * time.Millisecond})
	require.NoError(t, err)
	ctx, cancel := contextWithCancel(t)
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	for i := range 2 {
		_, err := n.JS.PublishMsg(ctx, &nats.Msg{Subject: "deliveries.s00.a", Data: []byte(strconv.Itoa(i))})
		require.NoError(t, err)
	}
	testutil.Eventually(t, func() bool { return g.Waiting("a") == 2 }, "the run never read the two deliveries")
	cancel()
	require.NoError(t, <-done)
}

func TestNewRefusesAnIncompleteConfig(t *testing.T) {
	t.Parallel()
	_, err := backlog.New(backlog.Config{})
	require.ErrorIs(t, err, backlog.ErrConfig)
}

func contextWithCancel(t *testing.T) (ctx context.Context, cancel context.CancelFunc) {
	return context.WithCancel(testutil.Context(t))
}

// TestEvictMakesRoomInAFullDeliveries: a DELIVERIES 97 % full of a paused
// subscriber's held backlog, beside another's copies, loses the oldest of
// that backlog to the DLQ (reason backlog, body kept, one entry a message
// however many relays evict), down to its fair share.
func TestEvictMakesRoomInAFullDeliveries(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	ctx := testutil.Context(t)
	s, err := n.JS.Stream(ctx, streams.Deliveries)
	require.NoError(t, err)
	for i := range 90 {
		_, err := n.JS.PublishMsg(ctx, &nats.Msg{Subject: "deliveries.overflow.stuck", Data: bytes.Repeat([]byte{'a' + byte(i%26)}, 1000)})
		require.NoError(t, err)
	}
	put(t, n.JS, "deliveries.s01.healthy", 5, 1000)
	// The operator's bound: what it holds is 97 % of it.
	info, err := s.Info(ctx)
	require.NoError(t, err)
	cfg := info.Config
	cfg.MaxBytes = int64(info.State.Bytes) * 100 / 97
	_, err = n.JS.UpdateStream(ctx, cfg)
	require.NoError(t, err)
	stuck, healthy := subscribers.Subscriber{ID: "stuck"}, subscribers.Subscriber{ID: "healthy"}
	// Neither paused nor held by its flow control: it drains, and makes
	// the room itself; never evicted.
	none, err := newGauge(t, n.JS, stuck, healthy).Evict(ctx)
	require.NoError(t, err)
	require.Zero(t, none)
	stuck.Paused = true
	g1 := newGauge(t, n.JS, stuck, healthy)
	g2 := newGauge(t, n.JS, stuck, healthy)
	evicted, err := g1.Evict(ctx)
	require.NoError(t, err)
	require.Positive(t, evicted)
	// A second relay that read the same figures looks again first, and
	// finds the room made.
	again, err := g2.Evict(ctx)
	require.NoError(t, err)
	require.Zero(t, again)

	info, err = s.Info(ctx, jetstream.WithSubjectFilter("deliveries.>"))
	require.NoError(t, err)
	left := int(info.State.Subjects["deliveries.overflow.stuck"])
	require.EqualValues(t, 5, info.State.Subjects["deliveries.s01.healthy"], "only the held backlog is evicted")
	dlq, err := n.JS.Stream(ctx, streams.DLQ)
	require.NoError(t, err)
	dinfo, err := dlq.Info(ctx)
	require.NoError(t, err)
	t.Logf("%d of 90 left in overflow, %d dead letters", left, dinfo.State.Msgs)
	require.Equal(t, 90, left+int(dinfo.State.Msgs), "every message is in overflow or in the DLQ, once")
	require.Less(t, left, 90)
	require.Positive(t, left, "evicted past the fair share")
	// The oldest go, each with its body (their dead letters are stored
	// concurrently, in any order).
	var origins []int
	for seq := dinfo.State.FirstSeq; seq <= dinfo.State.LastSeq; seq++ {
		m, err := dlq.GetMsg(ctx, seq)
		require.NoError(t, err)
		require.Equal(t, "dlq.stuck.backlog", m.Subject)
		require.Contains(t, m.Header.Get(streams.HeaderLastError), "fair share")
		origin, err := strconv.Atoi(m.Header.Get(streams.HeaderOriginSeq))
		require.NoError(t, err)
		require.Equal(t, bytes.Repeat([]byte{'a' + byte((origin-1)%26)}, 1000), m.Data, "dead letter of %d", origin)
		origins = append(origins, origin)
	}
	slices.Sort(origins)
	for i, origin := range origins {
		require.Equal(t, i+1, origin, "not the oldest evicted: %v", origins)
	}

	// Below EvictFrom, nothing more is evicted.
	require.NoError(t, g1.Refresh(ctx))
	more, err := g1.Evict(ctx)
	require.NoError(t, err)
	require.Zero(t, more)
}

// TestEvictTakesAPausedSubscriberFirst: of two subscribers over their share
// of a nearly full DELIVERIES, the paused one's held backlog goes first,
// though the other holds more; once no paused one is over its share, the
// other's goes too when its circuit is open (for hours, maybe: left alone,
// it keeps DELIVERIES full for everyone).
func TestEvictTakesAPausedSubscriberFirst(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	ctx := testutil.Context(t)
	s, err := n.JS.Stream(ctx, streams.Deliveries)
	require.NoError(t, err)
	put(t, n.JS, "deliveries.overflow.failing", 80, 1000)
	put(t, n.JS, "deliveries.overflow.paused", 40, 1000)
	put(t, n.JS, "deliveries.s01.healthy", 5, 1000)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	cfg := info.Config
	cfg.MaxBytes = int64(info.State.Bytes) * 100 / 97
	_, err = n.JS.UpdateStream(ctx, cfg)
	require.NoError(t, err)
	failing := subscribers.Subscriber{ID: "failing"}
	paused := subscribers.Subscriber{ID: "paused", Paused: true}
	healthy := subscribers.Subscriber{ID: "healthy"}

	g := newGauge(t, n.JS, failing, paused, healthy)
	first, err := g.Evict(ctx)
	require.NoError(t, err)
	require.Positive(t, first)
	held := func() map[string]uint64 {
		info, err := s.Info(ctx, jetstream.WithSubjectFilter("deliveries.>"))
		require.NoError(t, err)
		return info.State.Subjects
	}
	after := held()
	require.EqualValues(t, 80, after["deliveries.overflow.failing"], "the paused one goes first")
	require.Less(t, after["deliveries.overflow.paused"], uint64(40))

	// The paused one is down to its share: if DELIVERIES is still nearly
	// full, the failing one's turn comes, its circuit open.
	testutil.PutJSON(t, n.JS, streams.RateLimitBucket, "failing",
		ratelimit.State{Failures: 5, OpenUntil: time.Now().Add(time.Hour), Opens: 1})
	require.NoError(t, g.Refresh(ctx))
	if _, err := g.Evict(ctx); err != nil {
		t.Fatal(err)
	}
	info, err = s.Info(ctx)
	require.NoError(t, err)
	if float64(info.State.Bytes) >= backlog.EvictFrom*float64(cfg.MaxBytes) {
		t.Fatalf("still %.0f%% full after the second eviction: %v", 100*float64(info.State.Bytes)/float64(cfg.MaxBytes), held())
	}
	require.EqualValues(t, 5, held()["deliveries.s01.healthy"])
}

// A subscriber that keeps up is not shed for the copies it was delivered
// between two reads: bound to 100 and sent 150 a second, each stored,
// answered and gone before the next read, it would count 150 waiting at
// each read's eve. Once a read has shown it drains all it is given, its
// settled copies are discounted. One that takes nothing drains none, and
// every settled copy counts until the stream shows it.
func TestKeepingUpSubscriberIsNotShedForWhatItWasDelivered(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	fast := subscribers.Subscriber{ID: "fast", MaxBacklog: 100}
	slow := subscribers.Subscriber{ID: "slow", MaxBacklog: 100}
	put(t, n.JS, "deliveries.s00.filler", 200, 10) // the streams hold more than a bound: reads count
	g := newGauge(t, n.JS, fast, slow)
	for second := range 4 {
		// Judged by a read first: until then every settled copy counts.
		rate := 150
		if second == 0 {
			rate = 90
		}
		for i := range rate {
			v, why := g.Admit(&fast, 10)
			require.Equal(t, backlog.Queue, v, "second %d, copy %d: %s", second, i, why)
			g.Settled("fast", true) // stored, and delivered at once: never in a read
			if second == 0 && i < 89 {
				v, _ = g.Admit(&slow, 10)
				require.Equal(t, backlog.Queue, v)
				put(t, n.JS, "deliveries.s01.slow", 1, 10)
				g.Settled("slow", true)
			}
		}
		require.NoError(t, g.Refresh(testutil.Context(t)))
	}
	require.Less(t, g.Waiting("fast"), uint64(10))
	require.EqualValues(t, 89, g.Waiting("slow"))
	for range 11 {
		v, _ := g.Admit(&slow, 10)
		require.Equal(t, backlog.Queue, v, "within its bound")
		g.Settled("slow", true)
	}
	v, _ := g.Admit(&slow, 10)
	require.Equal(t, backlog.Shed, v, "past its bound: its settled copies count, stored or not yet read")
}

// A copy JetStream refused (a full stream) waits nowhere: it stops counting
// as soon as its answer comes, so that back-pressure does not turn into
// dead letters of a subscriber that has nothing waiting.
func TestRefusedCopyStopsCounting(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	a := subscribers.Subscriber{ID: "a", MaxBacklog: 3}
	g := newGauge(t, n.JS, a)
	for range 10 {
		v, _ := g.Admit(&a, 10)
		require.Equal(t, backlog.Queue, v)
		g.Settled("a", false)
	}
	require.Zero(t, g.Waiting("a"))
}

// deliver deletes the k oldest deliveries of DELIVERIES, as their
// deliveries would.
func deliver(t *testing.T, js jetstream.JetStream, k int) {
	t.Helper()
	ctx := testutil.Context(t)
	deliveries, err := js.Stream(ctx, streams.Deliveries)
	require.NoError(t, err)
	info, err := deliveries.Info(ctx)
	require.NoError(t, err)
	for seq := info.State.FirstSeq; k > 0; seq++ {
		if err := deliveries.DeleteMsg(ctx, seq); err == nil {
			k--
		}
	}
}

// drainTo has a subscriber at bound 3 with 10 waiting drain two a read,
// one copy shed meanwhile, for DrainReads reads: the first reads do not
// make it draining yet, the last does.
func drainTo(t *testing.T, js jetstream.JetStream, g *backlog.Gauge, a *subscribers.Subscriber) {
	t.Helper()
	ctx := testutil.Context(t)
	for i := range backlog.DrainReads {
		v, _ := g.Admit(a, 10)
		require.Equal(t, backlog.Shed, v, "read %d of %d in a row that found it falling", i, backlog.DrainReads)
		deliver(t, js, 2)
		require.NoError(t, g.Refresh(ctx))
	}
}

// TestDrainingSubscriberIsNotShedAtItsBound: the bound sheds a subscriber
// that cannot take its traffic, never one whose deliveries outpace its
// events. Past its bound, one whose waiting deliveries fell, by more than
// the copies shed meanwhile, over DrainReads reads in a row is queued, up
// to its bound plus what it drained over the last interval; while it is
// paused, it is shed.
func TestDrainingSubscriberIsNotShedAtItsBound(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	a := subscribers.Subscriber{ID: "a", MaxBacklog: 3}
	put(t, n.JS, "deliveries.s00.a", 10, 10)
	g := newGauge(t, n.JS, a)
	drainTo(t, n.JS, g, &a)
	require.EqualValues(t, 4, g.Waiting("a"))
	v, why := g.Admit(&a, 10)
	require.Equal(t, backlog.Queue, v, "four wait, past the bound of 3, but draining two a read: %s", why)
	put(t, n.JS, "deliveries.s00.a", 1, 10) // the copy just queued
	g.Settled("a", true)
	v, why = g.Admit(&a, 10)
	require.Equal(t, backlog.Shed, v, "five wait: the bound and the two drained in the last interval")
	require.Contains(t, why, "5 deliveries wait for subscriber a")

	paused := a
	paused.Paused = true
	put(t, n.JS, "deliveries.s00.a", 5, 10) // ten wait
	g = newGauge(t, n.JS, paused)
	for range backlog.DrainReads {
		deliver(t, n.JS, 1)
		require.NoError(t, g.Refresh(testutil.Context(t)))
	}
	v, _ = g.Admit(&paused, 10)
	require.Equal(t, backlog.Shed, v, "falling, but paused: nothing is taking them")
}

// TestShedCopiesDoNotMakeASubscriberDraining: a subscriber offered more
// than it delivers sees its count fall while it is shed (what it delivers
// leaves, what is shed never came); that fall is not draining, or it
// would be shed and admitted by turns and its backlog grow without bound.
func TestShedCopiesDoNotMakeASubscriberDraining(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	a := subscribers.Subscriber{ID: "a", MaxBacklog: 3}
	put(t, n.JS, "deliveries.s00.a", 20, 10)
	g := newGauge(t, n.JS, a)
	for read := range backlog.DrainReads + 2 {
		for range 4 {
			v, _ := g.Admit(&a, 10)
			require.Equal(t, backlog.Shed, v, "read %d: offered four, delivered two", read)
		}
		deliver(t, n.JS, 2)
		require.NoError(t, g.Refresh(testutil.Context(t)))
	}
}

// TestFailedReadEndsDraining: a read that fails says nothing of the
// subscriber's pace now, so a subscriber judged draining before it is
// shed at its bound again.
func TestFailedReadEndsDraining(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	ctx := testutil.Context(t)
	a := subscribers.Subscriber{ID: "a", MaxBacklog: 3}
	put(t, n.JS, "deliveries.s00.a", 10, 10)
	g := newGauge(t, n.JS, a)
	drainTo(t, n.JS, g, &a)
	require.NoError(t, n.JS.DeleteStream(ctx, streams.Retries))
	require.Error(t, g.Refresh(ctx))
	v, _ := g.Admit(&a, 10)
	require.Equal(t, backlog.Shed, v, "four wait past the bound of 3, and the last read failed")
}
