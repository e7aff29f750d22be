package retention_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/internal/clock"
	"github.com/relay-dev/relay/internal/fanout"
	"github.com/relay-dev/relay/internal/retention"
	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

// age is the keepers' age in these tests; the fake clock decides which
// events are older than it.
const age = time.Hour

// env is a server with the relay streams, the events published on it, and,
// once made, the fan-out's durable consumer, pulled and acked by the test
// itself so that it decides how far the fan-out has copied.
type env struct {
	n    *testutil.NATS
	cons jetstream.Consumer
	// held are the events the consumer delivered and the test has not
	// acked yet, by stream sequence.
	held map[uint64]jetstream.Msg
	// times are the server's times of the events, by stream sequence.
	times map[uint64]time.Time
	log   testutil.Buffer
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return &env{n: testutil.StartRelayNATS(t), held: map[uint64]jetstream.Msg{}, times: map[uint64]time.Time{}}
}

// publish stores count events and returns the last one's sequence. Each has
// a later server time than the one before it, so that a cutoff can fall
// between any two.
func (e *env) publish(t *testing.T, count int) uint64 {
	t.Helper()
	ctx := testutil.Context(t)
	var last uint64
	for range count {
		for {
			ack, err := e.n.JS.Publish(ctx, "events.order.paid", []byte(`{}`))
			if err != nil {
				t.Fatal(err)
			}
			last = ack.Sequence
			e.times[last] = e.storedAt(t, last)
			if prev, ok := e.times[last-1]; !ok || e.times[last].After(prev) {
				break
			}
			// Two events stored in the same nanosecond: drop this one.
			e.deleteEvent(t, last)
		}
	}
	return last
}

// storedAt is the server's time of the event seq.
func (e *env) storedAt(t *testing.T, seq uint64) time.Time {
	t.Helper()
	s, err := e.n.JS.Stream(testutil.Context(t), streams.Events)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetMsg(testutil.Context(t), seq)
	if err != nil {
		t.Fatal(err)
	}
	return m.Time
}

func (e *env) deleteEvent(t *testing.T, seq uint64) {
	t.Helper()
	s, err := e.n.JS.Stream(testutil.Context(t), streams.Events)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteMsg(testutil.Context(t), seq); err != nil {
		t.Fatal(err)
	}
	delete(e.times, seq)
}

// fanOut makes the fan-out's consumer (as fanout.Run does) if need be, and
// has it take every event published so far; it acks those for which ack
// is true and holds the others.
func (e *env) fanOut(t *testing.T, ack func(seq uint64) bool) {
	t.Helper()
	ctx := testutil.Context(t)
	if e.cons == nil {
		c, err := e.n.JS.CreateConsumer(ctx, streams.Events, jetstream.ConsumerConfig{
			Durable:       fanout.ConsumerName,
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       time.Hour,
			MaxDeliver:    -1,
			MaxAckPending: -1,
			DeliverPolicy: jetstream.DeliverAllPolicy,
		})
		if err != nil {
			t.Fatal(err)
		}
		e.cons = c
	}
	for {
		info, err := e.cons.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.NumPending == 0 {
			break
		}
		batch, err := e.cons.FetchNoWait(int(info.NumPending))
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			md, err := m.Metadata()
			if err != nil {
				t.Fatal(err)
			}
			e.held[md.Sequence.Stream] = m
		}
		if err := batch.Error(); err != nil {
			t.Fatal(err)
		}
	}
	for seq, m := range e.held {
		if ack(seq) {
			if err := m.DoubleAck(ctx); err != nil {
				t.Fatal(err)
			}
			delete(e.held, seq)
		}
	}
}

func all(uint64) bool { return true }

// keeper returns a keeper whose clock stands where the events older than
// age are those stored before the event keep, the first one kept.
func (e *env) keeper(t *testing.T, keep uint64) (*retention.Keeper, *clock.Fake) {
	t.Helper()
	at, ok := e.times[keep]
	if !ok {
		t.Fatalf("no event %d", keep)
	}
	fake := clock.NewFake(at.Add(age))
	k, err := retention.New(retention.Config{
		JS: e.n.JS, MaxAge: age, Clock: fake,
		Logger: slog.New(slog.NewTextHandler(&e.log, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		t.Fatal(err)
	}
	return k, fake
}

// pass makes one pass and returns the sequence it purged below.
func pass(t *testing.T, k *retention.Keeper) uint64 {
	t.Helper()
	below, err := retention.Pass(testutil.Context(t), k)
	if err != nil {
		t.Fatal(err)
	}
	return below
}

// kept returns the sequences EVENTS holds, first to last.
func (e *env) kept(t *testing.T) (first, msgs uint64) {
	t.Helper()
	s, err := e.n.JS.Stream(testutil.Context(t), streams.Events)
	if err != nil {
		t.Fatal(err)
	}
	st := s.CachedInfo().State
	return st.FirstSeq, st.Msgs
}

func (e *env) wantKept(t *testing.T, first, msgs uint64, why string) {
	t.Helper()
	if f, m := e.kept(t); f != first || m != msgs {
		t.Fatalf("%s: EVENTS holds %d events from sequence %d, want %d from %d\n%s", why, m, f, msgs, first, e.log.String())
	}
}

// TestKeeperPurgesCopiedEventsOlderThanItsAge: of the events the fan-out
// has acked, those older than the age go; the first one younger and all
// after it stay, acked or not.
func TestKeeperPurgesCopiedEventsOlderThanItsAge(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.publish(t, 7)
	e.fanOut(t, all)
	k, _ := e.keeper(t, 5)
	if got := pass(t, k); got != 5 {
		t.Fatalf("purged below %d, want 5 (the first event younger than %s)", got, age)
	}
	e.wantKept(t, 5, 3, "four acked events older than the age")
	if strings.Contains(e.log.String(), "level=WARN") {
		t.Errorf("a pass with nothing held back warned:\n%s", e.log.String())
	}
	// Nothing new to purge: no second purge, nothing else goes.
	if got := pass(t, k); got != 0 {
		t.Errorf("a second pass purged below %d, want nothing", got)
	}
	e.wantKept(t, 5, 3, "a second pass")
}

// TestKeeperNeverPurgesAnEventTheFanOutHasNotCopied: an event older than
// the age that the fan-out holds unacked stays, and so does every event
// after it, whatever their age; once it is acked, it goes at the next pass.
func TestKeeperNeverPurgesAnEventTheFanOutHasNotCopied(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	last := e.publish(t, 6)
	// The fan-out is behind: it holds event 3 unacked, has acked the rest.
	e.fanOut(t, func(seq uint64) bool { return seq != 3 })
	k, _ := e.keeper(t, last) // every event but the last is older than the age
	if got := pass(t, k); got != 3 {
		t.Fatalf("purged below %d, want 3 (the fan-out's ack floor + 1)", got)
	}
	e.wantKept(t, 3, 4, "event 3 not acked")
	if want := "retention: EVENTS keeps events older than 1h0m0s that the fan-out has not copied yet, from sequence 3"; !strings.Contains(e.log.String(), want) {
		t.Errorf("no warning %q:\n%s", want, e.log.String())
	}

	// Acked at last, it goes, with those after it older than the age.
	e.fanOut(t, all)
	if got := pass(t, k); got != last {
		t.Fatalf("after the ack, purged below %d, want %d", got, last)
	}
	e.wantKept(t, last, 1, "event 3 acked")
}

// TestKeeperWaitsForAFanOutThatCopiedNothing: every event older than the
// age, none acked (the fan-out has not run since they came, or its consumer
// does not exist yet): nothing goes.
func TestKeeperWaitsForAFanOutThatCopiedNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	last := e.publish(t, 4)
	k, fake := e.keeper(t, last)
	fake.Advance(age) // every event older than the age
	if got := pass(t, k); got != 0 {
		t.Fatalf("without the fan-out's consumer, purged below %d", got)
	}
	e.wantKept(t, 1, 4, "no fan-out consumer")

	e.fanOut(t, func(uint64) bool { return false })
	if got := pass(t, k); got != 0 {
		t.Fatalf("with nothing acked, purged below %d", got)
	}
	e.wantKept(t, 1, 4, "nothing acked")
	if !strings.Contains(e.log.String(), "from sequence 1") {
		t.Errorf("no warning of the events held back:\n%s", e.log.String())
	}
	// Everything acked and older than the age: no event is young enough to
	// be found by time, and the ack floor bounds the purge.
	e.fanOut(t, all)
	if got := pass(t, k); got != last+1 {
		t.Fatalf("everything acked and old: purged below %d, want %d", got, last+1)
	}
	e.wantKept(t, last+1, 0, "everything acked and old")
}

// TestKeeperSkipsDeletedEvents: the first event younger than the age is
// found by time even when the event at the cutoff was deleted.
func TestKeeperSkipsDeletedEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.publish(t, 6)
	e.fanOut(t, all)
	k, _ := e.keeper(t, 4)
	e.deleteEvent(t, 4)
	if got := pass(t, k); got != 5 {
		t.Fatalf("purged below %d, want 5 (4 deleted, 5 the first younger)", got)
	}
	e.wantKept(t, 5, 2, "event 4 deleted")
}

// TestConcurrentKeepersPurgeAsOne: two keepers (two relays) passing at the
// same time purge what one would; a purge below a sequence already passed
// removes nothing.
func TestConcurrentKeepersPurgeAsOne(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.publish(t, 8)
	e.fanOut(t, all)
	a, _ := e.keeper(t, 6)
	b, _ := e.keeper(t, 6)
	var wg sync.WaitGroup
	got := make([]uint64, 2)
	errs := make([]error, 2)
	for i, k := range []*retention.Keeper{a, b} {
		wg.Go(func() { got[i], errs[i] = retention.Pass(testutil.Context(t), k) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if got[0] != 6 || got[1] != 6 {
		t.Fatalf("two keepers purged below %v, want 6 both", got)
	}
	e.wantKept(t, 6, 3, "two keepers at once")

	// A third keeper, whose clock is behind, finds 6 the first event left
	// younger than its age: it purges below 6 again, which changes nothing.
	late, _ := e.keeper(t, 3)
	if got := pass(t, late); got != 6 {
		t.Fatalf("the late keeper purged below %d, want 6", got)
	}
	e.wantKept(t, 6, 3, "a late keeper")
	// A purge below a lower sequence, as a keeper would send that read the
	// stream before the others purged: nothing changes either.
	s, err := e.n.JS.Stream(testutil.Context(t), streams.Events)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Purge(testutil.Context(t), jetstream.WithPurgeSequence(3)); err != nil {
		t.Fatal(err)
	}
	e.wantKept(t, 6, 3, "a purge below 3 after one below 6")
	info, err := e.cons.Info(testutil.Context(t))
	if err != nil {
		t.Fatal(err)
	}
	if info.AckFloor.Stream != 8 || info.NumPending != 0 || info.NumAckPending != 0 {
		t.Fatalf("the fan-out's consumer after the purges: ack floor %d, pending %d, ack pending %d; want 8, 0, 0",
			info.AckFloor.Stream, info.NumPending, info.NumAckPending)
	}
}

// TestKeeperPassCostsTheSameRequestsWhateverEventsHolds: a pass sends the
// same few requests with 10 events older than the age as with 10,000.
func TestKeeperPassCostsTheSameRequestsWhateverEventsHolds(t *testing.T) {
	t.Parallel()
	var per []uint64
	for _, count := range []int{10, 10_000} {
		e := newEnv(t)
		publishMany(t, e.n.JS, count)
		e.fanOut(t, all)
		e.times[uint64(count)] = e.storedAt(t, uint64(count))
		nc := testutil.Connect(t, e.n.URL)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		fake := clock.NewFake(e.times[uint64(count)].Add(age))
		k, err := retention.New(retention.Config{JS: js, MaxAge: age, Clock: fake, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		before := nc.Stats().OutMsgs
		if got := pass(t, k); got != uint64(count) {
			t.Fatalf("%d events: purged below %d, want %d", count, got, count)
		}
		first := nc.Stats().OutMsgs - before
		e.wantKept(t, uint64(count), 1, fmt.Sprintf("%d events", count))
		before = nc.Stats().OutMsgs
		if got := pass(t, k); got != 0 {
			t.Fatalf("%d events: a second pass purged below %d", count, got)
		}
		idle := nc.Stats().OutMsgs - before
		t.Logf("%d events: %d requests for the pass that purged (EVENTS looked up once), %d for a pass with nothing new", count, first, idle)
		per = append(per, first, idle)
	}
	if per[0] != per[2] || per[1] != per[3] || per[0] > 4 || per[1] > 2 {
		t.Fatalf("requests per pass (purging, idle) with 10 events %v, with 10,000 %v; want the same, at most 4 and 2", per[:2], per[2:])
	}
}

// publishMany stores count events, waiting for their PubAcks in windows.
func publishMany(t *testing.T, js jetstream.JetStream, count int) {
	t.Helper()
	for sent := 0; sent < count; {
		for range min(1000, count-sent) {
			if _, err := js.PublishAsync("events.order.paid", []byte(`{}`)); err != nil {
				t.Fatal(err)
			}
			sent++
		}
		select {
		case <-js.PublishAsyncComplete():
		case <-testutil.Context(t).Done():
			t.Fatal("PubAcks did not come")
		}
	}
}

// TestRunPassesAtStartAndEveryInterval: Run makes a pass as it starts, the
// next when its clock has moved an Interval, and returns once its context
// is cancelled.
func TestRunPassesAtStartAndEveryInterval(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	last := e.publish(t, 5)
	e.fanOut(t, func(seq uint64) bool { return seq <= 2 })
	k, fake := e.keeper(t, last)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		k.Run(ctx)
	}()
	// A waiter on the clock: the first pass is over.
	testutil.Eventually(t, func() bool { return fake.Waiters() == 1 }, "Run made no first pass")
	e.wantKept(t, 3, 3, "the pass at start")

	e.fanOut(t, func(seq uint64) bool { return seq < last })
	e.wantKept(t, 3, 3, "before the next tick")
	// An Interval later every event is older than the age; the last is
	// not acked.
	fake.Advance(retention.Interval)
	testutil.Eventually(t, func() bool { return fake.Waiters() == 1 }, "Run made no pass after an interval")
	e.wantKept(t, last, 1, "the pass after an interval")

	cancel()
	select {
	case <-done:
	case <-testutil.Context(t).Done():
		t.Fatal("Run did not return after its context was cancelled")
	}
}

// TestNewRefusesAnIncompleteConfig: no JetStream context, or no age.
func TestNewRefusesAnIncompleteConfig(t *testing.T) {
	t.Parallel()
	n := testutil.StartNATS(t)
	for _, cfg := range []retention.Config{{MaxAge: time.Hour}, {JS: n.JS}, {JS: n.JS, MaxAge: -time.Second}} {
		if _, err := retention.New(cfg); !errors.Is(err, retention.ErrConfig) {
			t.Errorf("New(%+v) = %v, want ErrConfig", cfg, err)
		}
	}
}

// boundEvents gives EVENTS a max_msgs of limit, as an operator's `nats
// stream edit EVENTS --max-msgs` or relay on a bounded store would.
func (e *env) boundEvents(t *testing.T, limit int64) {
	t.Helper()
	ctx := testutil.Context(t)
	s, err := e.n.JS.Stream(ctx, streams.Events)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.MaxMsgs = limit
	cfg.Discard = jetstream.DiscardNew
	if _, err := e.n.JS.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
}

// TestKeeperMakesRoomInABoundedEvents: a bounded EVENTS past half its bound
// loses every copied event, however young, so that a burst is not refused
// for the whole age; an event not copied stays; below half, the age rules
// again; and Run passes every RoomInterval, not every Interval.
func TestKeeperMakesRoomInABoundedEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.boundEvents(t, 10)
	e.publish(t, 6)
	// The fan-out copied events 1–5 and holds 6; all are younger than the age.
	e.fanOut(t, func(seq uint64) bool { return seq != 6 })
	k, fake := e.keeper(t, 1)
	if got := pass(t, k); got != 6 {
		t.Fatalf("6 of 10 events held: purged below %d, want 6 (every copied event)", got)
	}
	e.wantKept(t, 6, 1, "past half its bound")
	if want := "EVENTS is past half its bound"; !strings.Contains(e.log.String(), want) {
		t.Errorf("no line %q:\n%s", want, e.log.String())
	}

	// 1 + 3 of 10: below half; copied young events stay for the age.
	e.publish(t, 3)
	e.fanOut(t, all)
	if got := pass(t, k); got != 0 {
		t.Fatalf("4 of 10 events held: purged below %d, want nothing", got)
	}
	e.wantKept(t, 6, 4, "below half its bound")

	// Run passes again RoomInterval later: past half once more, it purges.
	e.publish(t, 2)
	e.fanOut(t, all)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		k.Run(ctx)
	}()
	testutil.Eventually(t, func() bool { return fake.Waiters() == 1 }, "Run made no first pass")
	e.wantKept(t, 12, 0, "the pass at start")
	last := e.publish(t, 6)
	e.fanOut(t, all)
	fake.Advance(retention.RoomInterval)
	testutil.Eventually(t, func() bool { first, _ := e.kept(t); return first == last+1 },
		"Run did not pass a RoomInterval later")
	cancel()
	<-done
}

// TestKeeperMakingRoomKeepsWhatLanesMayNeed: past half its bound, EVENTS
// still keeps the events stored less than BodySlack before the oldest
// delivery on a lane, whose body that delivery reads from EVENTS should
// BODIES lose it; once the lane is empty, they go.
func TestKeeperMakingRoomKeepsWhatLanesMayNeed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testutil.Context(t)
	if _, err := e.n.JS.CreateConsumer(ctx, streams.Deliveries, jetstream.ConsumerConfig{
		Durable: "lane_s00", FilterSubject: "deliveries.s00.>", AckPolicy: jetstream.AckExplicitPolicy,
	}); err != nil {
		t.Fatal(err)
	}
	e.boundEvents(t, 10)
	e.publish(t, 6)
	e.fanOut(t, all)
	ack, err := e.n.JS.Publish(ctx, "deliveries.s00.partner", []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	k, _ := e.keeper(t, 1)
	if got := pass(t, k); got != 0 {
		t.Fatalf("a delivery waits on a lane: purged below %d, want nothing", got)
	}
	e.wantKept(t, 1, 6, "a delivery on a lane")

	deliveries, err := e.n.JS.Stream(ctx, streams.Deliveries)
	if err != nil {
		t.Fatal(err)
	}
	if err := deliveries.DeleteMsg(ctx, ack.Sequence); err != nil {
		t.Fatal(err)
	}
	if got := pass(t, k); got != 7 {
		t.Fatalf("the lanes empty: purged below %d, want 7", got)
	}
	e.wantKept(t, 7, 0, "the lanes empty")
}
