package subscribers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
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

// watchers gives the test every watch the view starts.
type watchers struct {
	mu  sync.Mutex
	all []jetstream.KeyWatcher
}

func (ws *watchers) option() WatchOption {
	return func(l *Live) {
		l.watching = func(w jetstream.KeyWatcher) {
			ws.mu.Lock()
			defer ws.mu.Unlock()
			ws.all = append(ws.all, w)
		}
	}
}

func (ws *watchers) last() jetstream.KeyWatcher {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return ws.all[len(ws.all)-1]
}

// TestViewWatchesAgainWhenItsWatchEnds: the watch ends without being asked
// to while the connection stays up (its subscription gone). The view does
// not stop, frozen: it watches again from its revision and follows the
// bucket; Lagging stays false.
func TestViewWatchesAgainWhenItsWatchEnds(t *testing.T) {
	t.Parallel()
	st, _ := newStore(t)
	ctx := testutil.Context(t)
	require.NoError(t, st.Put(ctx, valid("a")))
	var ws watchers
	watchCtx, cancel := context.WithCancel(ctx)
	l, err := st.Watch(watchCtx, ws.option())
	require.NoError(t, err)
	t.Cleanup(func() { cancel(); <-l.Done() })

	require.NoError(t, ws.last().Stop())
	require.NoError(t, st.Put(ctx, valid("b")))
	waitFor(t, l, "the view follows the bucket after its watch ended", func() bool {
		_, ok := l.Get("b")
		return ok
	})
	require.NoError(t, l.Sync(ctx))
	require.GreaterOrEqual(t, l.Resyncs(), uint64(1))
	require.NoError(t, l.Err())
	require.False(t, l.Lagging())
}

// TestViewLoadsABucketCreatedAgain: the bucket is deleted and created again
// (as a restore from a backup does), so its revisions start again lower
// than the view's. Sync does not take the view, which holds subscribers no
// longer stored and lacks the new one, as current: it fails, and the view
// loads the bucket again; then Sync succeeds with a view holding exactly
// what is stored.
func TestViewLoadsABucketCreatedAgain(t *testing.T) {
	t.Parallel()
	st, n := newStore(t)
	ctx := testutil.Context(t)
	for _, id := range []string{"a", "b", "c", "d"} {
		require.NoError(t, st.Put(ctx, valid(id)))
	}
	watchCtx, cancel := context.WithCancel(ctx)
	l, err := st.Watch(watchCtx)
	require.NoError(t, err)
	t.Cleanup(func() { cancel(); <-l.Done() })

	require.NoError(t, n.JS.DeleteKeyValue(ctx, streams.SubscribersBucket))
	require.NoError(t, streams.Ensure(ctx, n.JS, streams.Options{}))
	again, err := Open(ctx, n.JS)
	require.NoError(t, err)
	require.NoError(t, again.Put(ctx, valid("z")))
	err = l.Sync(ctx)
	require.ErrorIs(t, err, errBucketReset, "Sync took a view of the bucket before it was created again as current")
	var last error
	testutil.Eventually(t, func() bool {
		last = l.Sync(ctx)
		return last == nil
	}, "Sync never succeeded after the bucket was created again")
	require.False(t, errors.Is(last, errBucketReset))
	require.Equal(t, []string{"z"}, ids(l.All()))
	require.Zero(t, l.Behind())
	require.NotZero(t, l.Removals(), "the view lost a, b, c and d and its removals did not move")
}

// TestRemovalsMoveOnlyWithARemoval: the view's Removals, which what keeps
// state per subscriber checks before looking at its ids again, moves when a
// subscriber is removed, and not when one is added or changed.
func TestRemovalsMoveOnlyWithARemoval(t *testing.T) {
	t.Parallel()
	st, _ := newStore(t)
	ctx := testutil.Context(t)
	watchCtx, cancel := context.WithCancel(ctx)
	l, err := st.Watch(watchCtx)
	require.NoError(t, err)
	t.Cleanup(func() { cancel(); <-l.Done() })

	for _, id := range []string{"a", "b", "c"} {
		require.NoError(t, st.Put(ctx, valid(id)))
	}
	changed := valid("a")
	changed.URL = "https://example.com/other"
	require.NoError(t, st.Put(ctx, changed))
	require.NoError(t, l.Sync(ctx))
	require.Zero(t, l.Removals(), "adds and a change are no removal")

	require.NoError(t, st.Delete(ctx, "b"))
	require.NoError(t, l.Sync(ctx))
	require.Equal(t, uint64(1), l.Removals())
	require.NoError(t, st.Put(ctx, valid("b")))
	require.NoError(t, l.Sync(ctx))
	require.Equal(t, uint64(1), l.Removals(), "adding b again is no removal")
	require.NoError(t, st.kv.Delete(ctx, "nobody")) // a removal mark for an id never stored
	require.NoError(t, l.Sync(ctx))
	require.Equal(t, uint64(1), l.Removals(), "deleting an id the view never held is no removal")
}

// TestWatchAgainKeepsWhatSyncLearnt: a watch started again (a resync) ends
// its initial values with the view at some revision; what the bucket was
// known to store then and the view lacks is no longer stored. But a Sync
// that learnt meanwhile of a later revision keeps it: the view is still
// behind, not taken as current.
func TestWatchAgainKeepsWhatSyncLearnt(t *testing.T) {
	t.Parallel()
	st, _ := newStore(t)
	ctx := testutil.Context(t)
	l, ls := frozenView(t, st)
	require.NoError(t, st.Put(ctx, valid("a")))
	a, err := st.kv.Get(ctx, "a")
	require.NoError(t, err)
	f := &follower{l: l, st: ls, published: time.Now(), progress: time.Now(), knownAt: l.known.Load()}
	defer f.stopTimers()
	f.fold(a)
	f.snapshot()
	l.noteAhead(a.Revision() + 1) // Sync learns of a later write
	f.fold(nil)                   // the watch's initial values have all come
	require.Equal(t, a.Revision()+1, l.known.Load())
	require.Equal(t, uint64(1), l.Behind())
}

// TestWatchAgainBacksOffAndLogsOnce: while a watch cannot be started (the
// connection down), each try waits twice as long as the last, up to
// resyncRetryMax, and the failure is logged once, not at every try.
func TestWatchAgainBacksOffAndLogsOnce(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	nc := testutil.Connect(t, n.URL)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	st, err := Open(testutil.Context(t), js)
	require.NoError(t, err)
	var logged bytes.Buffer
	l, ls := frozenView(t, st)
	l.log = slog.New(slog.NewTextHandler(&logged, nil))
	nc.Close()

	f := &follower{l: l, st: ls, published: time.Now(), progress: time.Now()}
	defer f.stopTimers()
	var waits []time.Duration
	for range 8 {
		f.watchAgain(testutil.Context(t), "watching again")
		require.NotNil(t, f.retry, "no try armed after a failure")
		waits = append(waits, f.backoff)
	}
	require.Equal(t, []time.Duration{resyncRetry, 2 * resyncRetry, 4 * resyncRetry, 8 * resyncRetry, 16 * resyncRetry,
		resyncRetryMax, resyncRetryMax, resyncRetryMax}, waits)
	require.Equal(t, 1, strings.Count(logged.String(), "cannot watch the bucket"), logged.String())
}
