package subscribers

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/testutil"
)

// dropping makes the view discard the changes of its watch for which drop
// returns true, as a slow consumer's client drops messages it was sent.
func dropping(drop func(jetstream.KeyValueEntry) bool) WatchOption {
	return func(l *Live) { l.drop = drop }
}

// TestViewCatchesUpAfterItsWatchDropsChanges: the watch loses every change
// from some revision on (a slow consumer's client drops what it was sent,
// and nothing tells the watch), subscribers added and one deleted among
// them. The view knows it is behind (from the last change it got, and from
// Sync), watches again from the last revision it holds, and catches up:
// Sync returns, the view holds every subscriber added and not the deleted
// one, and says it resynced once.
func TestViewCatchesUpAfterItsWatchDropsChanges(t *testing.T) {
	t.Parallel()
	st, _ := newStore(t)
	ctx := testutil.Context(t)
	require.NoError(t, st.Put(ctx, valid("a")))
	require.NoError(t, st.Put(ctx, valid("b")))
	// Each revision past from is dropped once: the first time the watch
	// sends it.
	var from atomic.Uint64
	from.Store(^uint64(0))
	dropped := map[uint64]bool{}
	watchCtx, cancel := context.WithCancel(ctx)
	l, err := st.Watch(watchCtx, dropping(func(e jetstream.KeyValueEntry) bool {
		if e.Revision() < from.Load() || dropped[e.Revision()] {
			return false
		}
		dropped[e.Revision()] = true
		return true
	}))
	require.NoError(t, err)
	t.Cleanup(func() { cancel(); <-l.Done() })
	require.Zero(t, l.Behind())

	from.Store(l.snap.Load().rev + 2) // the first Put below comes through
	const added = 50
	for i := range added {
		require.NoError(t, st.Put(ctx, valid(fmt.Sprintf("n%02d", i))))
		if i == added/2 {
			require.NoError(t, st.Delete(ctx, "a"))
		}
	}
	require.NoError(t, l.Sync(ctx), "the view did not catch up")
	require.Zero(t, l.Behind())
	require.GreaterOrEqual(t, l.Resyncs(), uint64(1))
	for i := range added {
		_, ok := l.Get(fmt.Sprintf("n%02d", i))
		require.True(t, ok, "n%02d, added while the watch dropped changes, is not in the view", i)
	}
	_, ok := l.Get("a")
	require.False(t, ok, "a, deleted while the watch dropped changes, is still in the view")
	_, ok = l.Get("b")
	require.True(t, ok)
	require.False(t, l.Lagging())
}
