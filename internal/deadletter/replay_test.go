package deadletter

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

const testSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// replayEnv is a server with the relay streams, subscribers stored, and the
// lane consumers a running relay would have created.
type replayEnv struct {
	n     *testutil.NATS
	store *subscribers.Store
}

func newReplayEnv(t *testing.T, ids ...string) *replayEnv {
	t.Helper()
	n := testutil.StartRelayNATS(t)
	ctx := testutil.Context(t)
	store, err := subscribers.Open(ctx, n.JS)
	require.NoError(t, err)
	for _, id := range ids {
		sub := subscribers.Subscriber{ID: id, URL: "https://example.com/" + id, Secrets: []string{testSecret}}
		require.NoError(t, store.Put(ctx, sub))
		lane := sub.Lane(16)
		_, err := n.JS.CreateOrUpdateConsumer(ctx, streams.Deliveries, jetstream.ConsumerConfig{
			Durable: "lane_" + lane, FilterSubject: "deliveries." + lane + ".>", AckPolicy: jetstream.AckExplicitPolicy,
		})
		require.NoError(t, err)
	}
	return &replayEnv{n: n, store: store}
}

func (e *replayEnv) replayer() *Replayer {
	return &Replayer{JS: e.n.JS, Store: e.store, SharedLanes: 16}
}

// kill stores a dead letter with relay's event headers and the attempt
// headers a retried delivery carries.
func (e *replayEnv) kill(t *testing.T, sub, eventID string, reason Reason, origin uint64, extra ...string) {
	t.Helper()
	h := nats.Header{
		streams.HeaderEventID:        {eventID},
		streams.HeaderEventType:      {"video.trending"},
		streams.HeaderPublishedAt:    {"2026-12-01T08:00:00Z"},
		streams.HeaderAttempt:        {"4"},
		streams.HeaderFirstAttemptAt: {"2026-12-01T08:00:01Z"},
		streams.HeaderContentType:    {"application/json"},
	}
	for i := 0; i+1 < len(extra); i += 2 {
		h.Set(extra[i], extra[i+1])
	}
	d := Death{Subscriber: sub, Reason: reason, Attempts: 4, LastStatus: 500, LastError: "500", OriginSeq: origin}
	_, err := Publish(testutil.Context(t), e.n.JS, []byte(`{"n":`+strconv.FormatUint(origin, 10)+`}`), h, d)
	require.NoError(t, err)
}

// queued returns every message now on DELIVERIES, by Nats-Msg-Id.
func (e *replayEnv) queued(t *testing.T) map[string]*jetstream.RawStreamMsg {
	t.Helper()
	ctx := testutil.Context(t)
	s, err := e.n.JS.Stream(ctx, streams.Deliveries)
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	out := map[string]*jetstream.RawStreamMsg{}
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			continue
		}
		out[m.Header.Get(nats.MsgIdHdr)] = m
	}
	return out
}

func dlqCount(t *testing.T, js jetstream.JetStream) uint64 {
	t.Helper()
	n, err := Count(testutil.Context(t), js, Filter{})
	require.NoError(t, err)
	return n
}

func TestReplayReEnqueuesWithTheSameEventIDAndFreshAttempts(t *testing.T) {
	t.Parallel()
	env := newReplayEnv(t, "demo")
	env.kill(t, "demo", "evt_1", MaxAttempts, 1, "X-Custom", "kept")
	env.kill(t, "demo", "evt_2", Rejected, 2)
	ctx := testutil.Context(t)

	r := env.replayer()
	plan, err := r.Plan(ctx, Filter{Subscriber: "demo"})
	require.NoError(t, err)
	require.Equal(t, 2, plan.Selected)
	sum, err := r.Run(ctx, plan)
	require.NoError(t, err)
	require.Equal(t, Summary{Replayed: 2}, sum)
	require.Zero(t, dlqCount(t, env.n.JS), "a replayed entry leaves the DLQ")

	q := env.queued(t)
	require.Len(t, q, 2)
	m := q["replay-1"]
	require.NotNil(t, m, "Nats-Msg-Id replay-<DLQ seq>; got %v", q)
	require.Equal(t, "deliveries."+subscribers.LaneFor("demo", 16)+".demo", m.Subject)
	require.Equal(t, `{"n":1}`, string(m.Data))
	require.Equal(t, "evt_1", m.Header.Get(streams.HeaderEventID))
	require.Equal(t, "video.trending", m.Header.Get(streams.HeaderEventType))
	require.Equal(t, "kept", m.Header.Get("X-Custom"))
	require.Equal(t, "application/json", m.Header.Get(streams.HeaderContentType))
	for _, gone := range []string{streams.HeaderAttempt, streams.HeaderFirstAttemptAt, streams.HeaderReason, streams.HeaderAttempts,
		streams.HeaderLastStatus, streams.HeaderLastError, streams.HeaderDeadAt, streams.HeaderOriginSeq} {
		require.Empty(t, m.Header.Get(gone), "header %s must be reset", gone)
	}

	// Run again: nothing is left to replay.
	plan, err = r.Plan(ctx, Filter{Subscriber: "demo"})
	require.NoError(t, err)
	sum, err = r.Run(ctx, plan)
	require.NoError(t, err)
	require.Equal(t, Summary{}, sum)
	require.Len(t, env.queued(t), 2)
}

func TestReplayRefusesWhatWouldNotBeDelivered(t *testing.T) {
	t.Parallel()
	env := newReplayEnv(t, "demo", "off")
	ctx := testutil.Context(t)
	env.kill(t, "demo", "evt_1", Gone, 1)
	env.kill(t, "ghost", "evt_2", Unroutable, 2)
	env.kill(t, "off", "evt_3", Gone, 3)
	require.NoError(t, env.store.SetDisabled(ctx, "off", true, "410"))

	r := env.replayer()
	_, err := r.Plan(ctx, Filter{})
	require.ErrorIs(t, err, ErrSubscriberDisabled, "a disabled subscriber still needs Enable")
	_, err = r.Plan(ctx, Filter{Subscriber: "ghost"})
	require.ErrorIs(t, err, ErrUnknownSubscriber, "a removed --subscriber is refused")
	require.Contains(t, err.Error(), "ghost")
	_, err = r.Plan(ctx, Filter{Subscriber: "nobody"})
	require.ErrorIs(t, err, ErrUnknownSubscriber, "an unknown --subscriber is refused even with nothing selected")
	_, err = r.Plan(ctx, Filter{Subscriber: "off"})
	require.ErrorIs(t, err, ErrSubscriberDisabled)
	require.Equal(t, uint64(3), dlqCount(t, env.n.JS), "nothing left the DLQ")

	r.Enable = true
	plan, err := r.Plan(ctx, Filter{Subscriber: "off"})
	require.NoError(t, err)
	sum, err := r.Run(ctx, plan)
	require.NoError(t, err)
	require.Equal(t, 1, sum.Replayed)
	sub, err := env.store.Get(ctx, "off")
	require.NoError(t, err)
	require.False(t, sub.Disabled, "--enable enabled it")

	r = &Replayer{JS: env.n.JS, Store: env.store, SharedLanes: 3}
	_, err = r.Plan(ctx, Filter{Subscriber: "demo"})
	if subscribers.LaneFor("demo", 3) != subscribers.LaneFor("demo", 16) {
		require.ErrorIs(t, err, ErrNoLane, "a lane no consumer reads")
	}
}

func TestReplaySkipsLateEntriesUnlessTheDeadlineIsIgnored(t *testing.T) {
	t.Parallel()
	env := newReplayEnv(t, "demo")
	ctx := testutil.Context(t)
	env.kill(t, "demo", "evt_late", Deadline, 1, streams.HeaderDeadline, "2026-01-01T00:00:00Z")
	env.kill(t, "demo", "evt_exp", Expired, 2)
	env.kill(t, "demo", "evt_past", MaxAttempts, 3, streams.HeaderDeadline, "2020-01-01T00:00:00Z")
	env.kill(t, "demo", "evt_ok", MaxAttempts, 4, streams.HeaderDeadline, "2999-01-01T00:00:00Z")

	r := env.replayer()
	plan, err := r.Plan(ctx, Filter{})
	require.NoError(t, err)
	require.Equal(t, 3, plan.Late)
	sum, err := r.Run(ctx, plan)
	require.NoError(t, err)
	require.Equal(t, Summary{Replayed: 1, Skipped: 3, SkippedBy: map[string]int{SkipLate: 3}}, sum)
	require.Equal(t, "2999-01-01T00:00:00Z", env.queued(t)["replay-4"].Header.Get(streams.HeaderDeadline), "a deadline to come is kept")

	r.IgnoreDeadline = true
	plan, err = r.Plan(ctx, Filter{})
	require.NoError(t, err)
	sum, err = r.Run(ctx, plan)
	require.NoError(t, err)
	require.Equal(t, Summary{Replayed: 3}, sum)
	for _, id := range []string{"replay-1", "replay-2", "replay-3"} {
		m := env.queued(t)[id]
		require.NotNil(t, m, id)
		require.Empty(t, m.Header.Get(streams.HeaderDeadline), "--ignore-deadline drops the deadline")
	}
}

func TestTwoReplaysAtOnceEnqueueEachEntryOnce(t *testing.T) {
	t.Parallel()
	env := newReplayEnv(t, "demo")
	const n = 300
	for i := 1; i <= n; i++ {
		env.kill(t, "demo", "evt_"+strconv.Itoa(i), MaxAttempts, uint64(i))
	}
	ctx := testutil.Context(t)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		sums []Summary
		errs []error
	)
	for range 2 {
		r := env.replayer()
		plan, err := r.Plan(ctx, Filter{})
		require.NoError(t, err)
		wg.Add(1)
		go func() {
			defer wg.Done()
			sum, err := r.Run(context.WithoutCancel(ctx), plan)
			mu.Lock()
			sums, errs = append(sums, sum), append(errs, err)
			mu.Unlock()
		}()
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	require.Equal(t, n, sums[0].Replayed+sums[1].Replayed, "each entry counted replayed once: %+v", sums)
	require.Zero(t, dlqCount(t, env.n.JS))
	require.Len(t, env.queued(t), n, "one copy an entry")
}

func TestScanFiltersByTypeTimeAndSequence(t *testing.T) {
	t.Parallel()
	env := newReplayEnv(t)
	ctx := testutil.Context(t)
	env.kill(t, "a", "evt_1", Gone, 1, streams.HeaderEventType, "video.trending")
	env.kill(t, "a", "evt_2", Gone, 2, streams.HeaderEventType, "order.shipped")
	time.Sleep(20 * time.Millisecond) // distinct stored times around the bound
	mid := time.Now()
	time.Sleep(20 * time.Millisecond)
	env.kill(t, "b", "evt_3", Rejected, 3, streams.HeaderEventType, "video.uploaded.hd")

	tests := []struct {
		name string
		f    Filter
		want []string
	}{
		{"type exact", Filter{Type: "order.shipped"}, []string{"evt_2"}},
		{"type one token", Filter{Type: "video.*"}, []string{"evt_1"}},
		{"type trailing", Filter{Type: "video.>"}, []string{"evt_1", "evt_3"}},
		{"since", Filter{Since: mid}, []string{"evt_3"}},
		{"until", Filter{Until: mid}, []string{"evt_1", "evt_2"}},
		{"since and subscriber", Filter{Subscriber: "a", Since: mid}, []string{}},
		{"seqs in their order", Filter{Seqs: []uint64{3, 1, 99}}, []string{"evt_3", "evt_1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := List(ctx, env.n.JS, tt.f, 0)
			require.NoError(t, err)
			require.Equal(t, tt.want, eventIDs(got))
		})
	}
	for _, bad := range []Filter{{Type: "video..x"}, {Seqs: []uint64{1}, Subscriber: "a"}, {Seqs: []uint64{0}}, {Since: mid, Until: mid.Add(-time.Second)}} {
		_, err := List(ctx, env.n.JS, bad, 0)
		require.ErrorIs(t, err, ErrInvalidFilter, "%+v", bad)
	}
}

func TestPurgeAndCount(t *testing.T) {
	t.Parallel()
	env := newReplayEnv(t)
	ctx := testutil.Context(t)
	env.kill(t, "a", "evt_1", Gone, 1)
	env.kill(t, "a", "evt_2", Rejected, 2, streams.HeaderEventType, "order.shipped")
	env.kill(t, "b", "evt_3", Gone, 3)
	env.kill(t, "b", "evt_4", Rejected, 4)

	n, err := Count(ctx, env.n.JS, Filter{Reason: Gone})
	require.NoError(t, err)
	require.Equal(t, uint64(2), n)
	n, err = Purge(ctx, env.n.JS, Filter{Reason: Gone})
	require.NoError(t, err)
	require.Equal(t, uint64(2), n)
	n, err = Purge(ctx, env.n.JS, Filter{Type: "order.*"})
	require.NoError(t, err)
	require.Equal(t, uint64(1), n)
	got, err := List(ctx, env.n.JS, Filter{}, 0)
	require.NoError(t, err)
	require.Equal(t, []string{"evt_4"}, eventIDs(got))
	n, err = Purge(ctx, env.n.JS, Filter{Seqs: []uint64{4}})
	require.NoError(t, err)
	require.Equal(t, uint64(1), n)
	require.Zero(t, dlqCount(t, env.n.JS))
}

func TestGetReturnsEveryHeaderAndTheBody(t *testing.T) {
	t.Parallel()
	env := newReplayEnv(t)
	ctx := testutil.Context(t)
	env.kill(t, "a", "evt_1", Gone, 7, "X-Trace", "abc")
	m, err := Get(ctx, env.n.JS, 1)
	require.NoError(t, err)
	require.Equal(t, "dlq.a.gone", m.Subject)
	require.Equal(t, `{"n":7}`, string(m.Body))
	require.Equal(t, "abc", m.Header.Get("X-Trace"))
	require.Equal(t, "7", m.Header.Get(streams.HeaderOriginSeq))
	require.Equal(t, "evt_1", m.EventID)
	_, err = Get(ctx, env.n.JS, 2)
	require.ErrorIs(t, err, ErrNotFound)
}

// TestScanEndsWhenTheRestIsRemovedMeanwhile: a listing whose remaining
// entries another operator purges while it reads ends, rather than waiting
// for messages that will not come.
func TestScanEndsWhenTheRestIsRemovedMeanwhile(t *testing.T) {
	t.Parallel()
	env := newReplayEnv(t)
	ctx := testutil.Context(t)
	const n = 1200
	for i := 1; i <= n; i++ {
		env.kill(t, "a", "evt_"+strconv.Itoa(i), Gone, uint64(i))
	}
	seen := 0
	err := Scan(ctx, env.n.JS, Filter{}, func(Entry) error {
		seen++
		if seen == 1 {
			_, err := Purge(ctx, env.n.JS, Filter{})
			return err
		}
		return nil
	})
	require.NoError(t, err)
	require.Less(t, seen, n, "the purged entries were not all listed")
}

// TestReplaySkipsRemovedSubscribersAndReplaysTheRest: with no --subscriber,
// the entries of a subscriber removed since, those of no subscriber
// (dlq.~.unroutable) and those of a malformed event stay in the DLQ,
// counted by why, and the others are replayed.
func TestReplaySkipsRemovedSubscribersAndReplaysTheRest(t *testing.T) {
	t.Parallel()
	env := newReplayEnv(t, "demo")
	ctx := testutil.Context(t)
	env.kill(t, "ghost", "evt_1", Unroutable, 1)
	env.kill(t, "demo", "evt_2", Gone, 2)
	env.kill(t, "ghost", "evt_3", Gone, 3)
	env.kill(t, NoSubscriber, "evt_4", Unroutable, 4)
	env.kill(t, "demo", "evt_5", Malformed, 5, streams.HeaderDeadline, "1735689600")

	r := env.replayer()
	plan, err := r.Plan(ctx, Filter{})
	require.NoError(t, err)
	require.Equal(t, map[string]int{"ghost": 2, NoSubscriber: 1}, plan.Unknown)
	sum, err := r.Run(ctx, plan)
	require.NoError(t, err)
	require.Equal(t, Summary{Replayed: 1, Skipped: 4, SkippedBy: map[string]int{SkipUnknown: 3, SkipMalformed: 1}}, sum)
	require.Equal(t, uint64(4), dlqCount(t, env.n.JS), "the removed subscribers' and the malformed entries stay")
	require.Len(t, env.queued(t), 1)
}
