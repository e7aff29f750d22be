package lanes

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/clock"
	"github.com/relay-dev/relay/internal/ratelimit"
	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/internal/testutil"
)

// TestIdleSchedulersAreLeftOutOfTheRounds: of a lane's ten thousand
// schedulers, the sweep, a subscriber change and the stall watch look at the
// one with a backlog and the one that holds a delivery, not at the others:
// what a relay does every second or two must not grow with the subscribers
// it has ever delivered to. A scheduler whose backlog ends leaves the set.
func TestIdleSchedulersAreLeftOutOfTheRounds(t *testing.T) {
	t.Parallel()
	l := &lane{cfg: Config{Clock: clock.Real, AckWait: time.Minute, MaxAckPending: 1000, Backlogs: noMarks{}},
		scheds: make(map[string]*scheduler)}
	for i := range 10000 {
		l.scheduler(fmt.Sprintf("idle-%d", i))
	}
	backlogged, holding := l.scheduler("backlogged"), l.scheduler("holding")

	backlogged.mu.Lock()
	backlogged.backlog, backlogged.puts = true, 1
	backlogged.syncLocked()
	backlogged.mu.Unlock()
	holding.mu.Lock()
	holding.pushLocked(delivery{seq: 1})
	holding.syncLocked()
	holding.mu.Unlock()

	require.ElementsMatch(t, []*scheduler{backlogged}, l.markedSchedulers(false), "the sweep's round")
	require.ElementsMatch(t, []*scheduler{backlogged, holding}, l.markedSchedulers(true), "a subscriber change's round")
	held, locked := l.heldNow()
	require.Equal(t, 1, held)
	require.Zero(t, locked)

	backlogged.noBacklog(1)
	require.Empty(t, l.markedSchedulers(false), "a backlog that ended stays in the sweep's round")
	require.ElementsMatch(t, []*scheduler{holding}, l.markedSchedulers(true))
}

// forgetCounter is the real limiter, counting the prunes that reach it.
type forgetCounter struct {
	ratelimit.Limiter
	calls int
}

func (f *forgetCounter) Forget(keep func(id string) bool) {
	f.calls++
	f.Limiter.(forgetter).Forget(keep)
}

// TestPruneLooksAtEverySubscriberOnlyAfterARemoval: a sweep's prune walks
// the limiter's state and the lanes' schedulers (an entry for every
// subscriber delivered to) only when the view has lost a subscriber since
// the last walk, or pruneEvery has passed for one still busy then; a sweep
// of a relay whose subscribers stay walks nothing.
func TestPruneLooksAtEverySubscriberOnlyAfterARemoval(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	ctx := testutil.Context(t)
	store, err := subscribers.Open(ctx, n.JS)
	require.NoError(t, err)
	for _, id := range []string{"stays", "goes"} {
		require.NoError(t, store.Put(ctx, subscribers.Subscriber{ID: id, URL: "http://127.0.0.1:1/" + id,
			Secrets: []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}}))
	}
	watchCtx, stopWatch := context.WithCancel(context.Background())
	live, err := store.Watch(watchCtx)
	require.NoError(t, err)
	defer func() {
		stopWatch()
		<-live.Done()
	}()
	shared, err := ratelimit.NewShared(ctx, n.JS, ratelimit.Options{})
	require.NoError(t, err)
	limiter := &forgetCounter{Limiter: shared}
	fake := clock.NewFake(time.Now())
	cfg := Config{Subscribers: live, Clock: fake, Limiter: limiter}
	m := &manager{cfg: cfg, env: &engine{cfg: cfg}, prunedAt: fake.Now()}

	for range 5 {
		m.prune()
		fake.Advance(sweepEvery)
	}
	require.Zero(t, limiter.calls, "sweeps with no subscriber removed walked every subscriber")

	require.NoError(t, store.Delete(ctx, "goes"))
	require.NoError(t, live.Sync(ctx))
	m.prune()
	require.Equal(t, 1, limiter.calls, "the sweep after a removal did not prune")
	m.prune()
	require.Equal(t, 1, limiter.calls, "a second sweep pruned again with no new removal")

	fake.Advance(pruneEvery)
	m.prune()
	require.Equal(t, 2, limiter.calls, "pruneEvery passed with no prune")
}
