package lanes

import (
	"context"
	"testing"
	"time"

	"github.com/sourcegraph/conc"
	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/clock"
	"github.com/relay-dev/relay/internal/ratelimit"
	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/internal/testutil"
)

// TestPruneNeverDropsASchedulerBeingOffered: a sweep's prune that runs
// while the pull loop hands a delivery to its subscriber's scheduler (the
// subscriber removed and added again within a sweep: the prune sees it
// gone, the pull loop sees it back) never drops the scheduler the delivery
// goes to. Every delivery ends held by the one scheduler the lane knows for
// its subscriber, so it is renewed, counted and drained with the lane's.
func TestPruneNeverDropsASchedulerBeingOffered(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	ctx := testutil.Context(t)
	store, err := subscribers.Open(ctx, n.JS)
	require.NoError(t, err)
	require.NoError(t, store.Put(ctx, subscribers.Subscriber{ID: "again", URL: "http://127.0.0.1:1/again",
		Secrets: []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}}))
	sub, err := store.Get(ctx, "again")
	require.NoError(t, err)
	watchCtx, stopWatch := context.WithCancel(context.Background())
	live, err := store.Watch(watchCtx)
	require.NoError(t, err)
	defer func() {
		stopWatch()
		<-live.Done()
	}()
	testutil.Eventually(t, func() bool { _, ok := live.Get("again"); return ok }, "the view never held the subscriber")

	limiter, err := ratelimit.NewShared(ctx, n.JS, ratelimit.Options{})
	require.NoError(t, err)
	l := &lane{cfg: Config{Subscribers: live, Clock: clock.Real, AckWait: time.Minute, MaxAckPending: 1000, Backlogs: noMarks{},
		Limiter: limiter},
		scheds: make(map[string]*scheduler)}
	l.oldestSinceConfirmed, l.oldestSinceRound = noStamp, noStamp
	// The loop an offer starts returns at once: the delivery stays held.
	stopped, cancel := context.WithCancel(context.Background())
	cancel()
	gone := func(string) bool { return false }
	for i := range 10000 {
		l.scheduler(sub.ID) // an idle scheduler, as a drained subscriber leaves
		var wg conc.WaitGroup
		wg.Go(func() { l.hold(stopped, delivery{seq: uint64(i + 1)}, sub) })
		wg.Go(func() { l.prune(gone) })
		wg.Wait()
		l.work.Wait()
		l.mu.Lock()
		s, ok := l.scheds[sub.ID]
		l.mu.Unlock()
		require.True(t, ok, "iteration %d: the delivery went to a scheduler the lane no longer knows", i)
		s.mu.Lock()
		held := len(s.queue)
		s.queue, s.buf = nil, nil
		s.syncLocked()
		s.mu.Unlock()
		require.Equal(t, 1, held, "iteration %d: the lane's scheduler holds the delivery", i)
	}
}
