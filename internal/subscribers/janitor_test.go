package subscribers

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sourcegraph/conc"
	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/clock"
	"github.com/relay-dev/relay/internal/testutil"
)

// startJanitor runs the janitor of st on its own view with the fake clock
// until the test ends.
func startJanitor(t *testing.T, st *Store, clk *clock.Fake) *Live {
	t.Helper()
	ctx, cancel := context.WithCancel(testutil.Context(t))
	live, err := st.Watch(ctx)
	require.NoError(t, err)
	var wg conc.WaitGroup
	wg.Go(func() { st.RunJanitor(ctx, live, clk, nil) })
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	return live
}

// waitWaiting waits until the janitor sleeps on the fake clock, so that an
// Advance wakes it rather than passing it by.
func waitWaiting(t *testing.T, clk *clock.Fake) {
	t.Helper()
	testutil.Eventually(t, func() bool { return clk.Waiters() > 0 }, "the janitor does not wait on the clock")
}

func TestJanitorDropsEndedSecretsFromTheBucket(t *testing.T) {
	t.Parallel()
	st, n := newStore(t)
	ctx := testutil.Context(t)
	clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	st.now = clk.Now
	require.NoError(t, st.Put(ctx, valid("a")))
	quiet := valid("quiet")
	quiet.Paused = true // until resume: nothing of it ends by itself
	require.NoError(t, st.Put(ctx, quiet))
	_, err := st.RotateSecret(ctx, "a", []string{secretB}, time.Hour)
	require.NoError(t, err)
	live := startJanitor(t, st, clk)
	require.Equal(t, []expiring{{id: "a", at: clk.Now().Add(time.Hour)}}, live.expiring(),
		"the view lists only the subscriber with something that ends")

	waitWaiting(t, clk)
	clk.Advance(59 * time.Minute)
	got, err := st.Get(ctx, "a")
	require.NoError(t, err)
	require.Len(t, got.PreviousSecrets, 1, "nothing is dropped before its grace ends")

	waitWaiting(t, clk)
	clk.Advance(time.Minute)
	waitFor(t, live, "the ended secret is dropped", func() bool {
		sub, ok := live.Get("a")
		return ok && len(sub.PreviousSecrets) == 0
	})
	require.Empty(t, live.expiring())
	old := strings.TrimPrefix(secretA, "whsec_")
	for _, v := range rawValues(t, n, "a") {
		require.NotContains(t, v, old, "the retired secret is not readable in the bucket any more")
	}
	require.Len(t, rawValues(t, n, "a"), 1)
	got, err = st.Get(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, []string{secretB}, got.Secrets)
}

func TestJanitorEndsATimedPause(t *testing.T) {
	t.Parallel()
	st, _ := newStore(t)
	ctx := testutil.Context(t)
	clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	st.now = clk.Now
	require.NoError(t, st.Put(ctx, valid("a")))
	live := startJanitor(t, st, clk)
	until := clk.Now().Add(30 * time.Minute)
	_, err := st.Pause(ctx, "a", until)
	require.NoError(t, err)
	waitFor(t, live, "the pause is in the view", func() bool {
		sub, _ := live.Get("a")
		return sub.Paused
	})

	waitWaiting(t, clk)
	clk.Advance(30 * time.Minute)
	waitFor(t, live, "the ended pause is cleared", func() bool {
		sub, _ := live.Get("a")
		return !sub.Paused && sub.PausedUntil.IsZero()
	})
}

// The janitor's rewrite is compare-and-set: a change made between its read
// and its write is kept, and the ended secret still goes.
func TestTidyKeepsAConcurrentChange(t *testing.T) {
	t.Parallel()
	st, n := newStore(t)
	ctx := testutil.Context(t)
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	st.now = func() time.Time { return t0 }
	require.NoError(t, st.Put(ctx, valid("a")))
	_, err := st.RotateSecret(ctx, "a", []string{secretB}, time.Minute)
	require.NoError(t, err)

	other, err := Open(ctx, n.JS)
	require.NoError(t, err)
	other.now = st.now
	var once sync.Once
	st.beforeWrite = func() {
		once.Do(func() {
			_, err := other.Update(ctx, "a", func(s *Subscriber) error { s.Rate = 7; return nil })
			require.NoError(t, err)
		})
	}
	wrote, err := st.tidy(ctx, "a", t0.Add(time.Minute))
	require.NoError(t, err)
	require.True(t, wrote)
	got, err := st.Get(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, 7.0, got.Rate, "the concurrent change survived")
	require.Empty(t, got.PreviousSecrets)

	wrote, err = st.tidy(ctx, "a", t0.Add(time.Minute))
	require.NoError(t, err)
	require.False(t, wrote, "nothing ended: nothing written")
}
