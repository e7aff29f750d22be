package subscribers

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

// waitFor waits on the view's Changed channel until cond holds, the way the
// fan-out and the lanes follow changes.
func waitFor(t *testing.T, l *Live, msg string, cond func() bool) {
	t.Helper()
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	for {
		changed := l.Changed()
		if cond() {
			return
		}
		select {
		case <-changed:
		case <-l.Done():
			t.Fatalf("watch stopped (%v) before: %s", l.Err(), msg)
		case <-timeout.C:
			t.Fatalf("view did not change: %s", msg)
		}
	}
}

// ids returns the ids of subs in order.
func ids(subs []Subscriber) []string {
	out := make([]string, len(subs))
	for i, s := range subs {
		out[i] = s.ID
	}
	return out
}

func TestWatchLoadsInitialValues(t *testing.T) {
	t.Parallel()
	st, n := newStore(t)
	ctx := testutil.Context(t)
	for _, id := range []string{"c", "a", "b"} {
		require.NoError(t, st.Put(ctx, valid(id)))
	}
	require.NoError(t, st.SetDisabled(ctx, "b", true, "gone"))
	require.NoError(t, st.Put(ctx, valid("deleted")))
	require.NoError(t, st.Delete(ctx, "deleted"))
	_, err := rawKV(t, n).PutString(ctx, "junk", "not json")
	require.NoError(t, err)

	l, err := st.Watch(ctx)
	require.NoError(t, err)

	require.Equal(t, []string{"a", "b", "c"}, ids(l.All()), "loaded before Watch returns, sorted")
	require.Equal(t, []string{"a", "c"}, ids(l.Enabled()))
	b, ok := l.Get("b")
	require.True(t, ok)
	require.True(t, b.Disabled)
	require.Equal(t, "gone", b.DisabledReason)
	_, ok = l.Get("deleted")
	require.False(t, ok)
	require.Len(t, l.Invalid(), 1)
	require.ErrorIs(t, l.Invalid()["junk"], ErrCorrupt)
	require.NoError(t, l.Err())
}

func TestWatchEmptyBucket(t *testing.T) {
	t.Parallel()
	st, _ := newStore(t)
	l, err := st.Watch(testutil.Context(t))
	require.NoError(t, err)
	require.NotNil(t, l.All())
	require.Empty(t, l.All())
	require.NotNil(t, l.Enabled())
	require.Empty(t, l.Enabled())
	require.NotNil(t, l.Invalid())
	require.Empty(t, l.Invalid())
}

func TestWatchFollowsChanges(t *testing.T) {
	t.Parallel()
	st, _ := newStore(t)
	ctx := testutil.Context(t)
	l, err := st.Watch(ctx)
	require.NoError(t, err)

	require.NoError(t, st.Put(ctx, valid("a")))
	waitFor(t, l, "a added", func() bool { _, ok := l.Get("a"); return ok })
	require.Equal(t, []string{"a"}, ids(l.Enabled()))

	s := valid("a")
	s.URL = "https://moved.example/hook"
	require.NoError(t, st.Put(ctx, s))
	waitFor(t, l, "a updated", func() bool { got, _ := l.Get("a"); return got.URL == s.URL })

	require.NoError(t, st.SetDisabled(ctx, "a", true, "gone"))
	waitFor(t, l, "a disabled", func() bool { return len(l.Enabled()) == 0 })
	require.Equal(t, []string{"a"}, ids(l.All()), "disabled subscribers stay in All")

	require.NoError(t, st.Put(ctx, valid("b")))
	waitFor(t, l, "b added", func() bool { return len(l.All()) == 2 })
	require.Equal(t, []string{"b"}, ids(l.Enabled()))

	require.NoError(t, st.Delete(ctx, "a"))
	waitFor(t, l, "a deleted", func() bool { _, ok := l.Get("a"); return !ok })
	require.Equal(t, []string{"b"}, ids(l.All()))
}

func TestWatchSkipsJunk(t *testing.T) {
	t.Parallel()
	st, n := newStore(t)
	ctx := testutil.Context(t)
	kv := rawKV(t, n)
	require.NoError(t, st.Put(ctx, valid("a")))
	l, err := st.Watch(ctx)
	require.NoError(t, err)

	_, err = kv.PutString(ctx, "junk", `{"id": 42}`)
	require.NoError(t, err)
	waitFor(t, l, "junk reported", func() bool { return l.Invalid()["junk"] != nil })
	require.ErrorIs(t, l.Invalid()["junk"], ErrCorrupt)
	_, ok := l.Get("junk")
	require.False(t, ok)
	require.Equal(t, []string{"a"}, ids(l.All()))

	// Junk over a valid value leaves the last valid value in effect.
	_, err = kv.PutString(ctx, "a", "]]]")
	require.NoError(t, err)
	waitFor(t, l, "a reported", func() bool { return l.Invalid()["a"] != nil })
	got, ok := l.Get("a")
	require.True(t, ok)
	require.Equal(t, valid("a").URL, got.URL)

	// A valid write clears the report, and so does a delete.
	require.NoError(t, st.Put(ctx, valid("a")))
	waitFor(t, l, "a fixed", func() bool { return l.Invalid()["a"] == nil })
	require.NoError(t, st.Delete(ctx, "junk"))
	waitFor(t, l, "junk deleted", func() bool { return len(l.Invalid()) == 0 })
	require.Equal(t, []string{"a"}, ids(l.All()))
}

func TestWatchStopsWithContext(t *testing.T) {
	t.Parallel()
	st, _ := newStore(t)
	require.NoError(t, st.Put(testutil.Context(t), valid("a")))
	ctx, cancel := context.WithCancel(testutil.Context(t))
	l, err := st.Watch(ctx)
	require.NoError(t, err)
	require.NoError(t, l.Err())

	cancel()
	select {
	case <-l.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("watch did not stop")
	}
	require.ErrorIs(t, l.Err(), context.Canceled)
	require.Equal(t, []string{"a"}, ids(l.All()), "the last state stays readable")
	require.True(t, l.Lagging(), "a view that follows the bucket no more says it lags")
}

func TestWatchStopsWhenConnectionCloses(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	nc := testutil.Connect(t, n.URL)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	st, err := Open(testutil.Context(t), js)
	require.NoError(t, err)
	l, err := st.Watch(testutil.Context(t))
	require.NoError(t, err)

	nc.Close()
	select {
	case <-l.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("watch did not stop")
	}
	require.ErrorIs(t, l.Err(), errWatchEnded)
}

func TestWatchWithCancelledContext(t *testing.T) {
	t.Parallel()
	st, _ := newStore(t)
	ctx, cancel := context.WithCancel(testutil.Context(t))
	cancel()
	_, err := st.Watch(ctx)
	require.Error(t, err)
}

// TestWatchConcurrentReads reads the view from several goroutines, each
// following Changed as the fan-out does, while it changes, for the race
// detector.
func TestWatchConcurrentReads(t *testing.T) {
	t.Parallel()
	st, _ := newStore(t)
	ctx := testutil.Context(t)
	l, err := st.Watch(ctx)
	require.NoError(t, err)

	const writes = 30
	stop := make(chan struct{})
	var readers sync.WaitGroup
	for range 4 {
		readers.Go(func() {
			for {
				changed := l.Changed()
				for _, s := range l.Enabled() {
					if got, ok := l.Get(s.ID); !ok || got.ID != s.ID {
						t.Errorf("Get(%q) disagrees with Enabled", s.ID)
						return
					}
					_ = s.Matches("video.trending")
				}
				_ = l.Invalid()
				select {
				case <-changed:
				case <-stop:
					return
				}
			}
		})
	}
	for i := range writes {
		require.NoError(t, st.Put(ctx, valid(fmt.Sprintf("s%02d", i))))
	}
	waitFor(t, l, "every write seen", func() bool { return len(l.All()) == writes })
	close(stop)
	readers.Wait()
}

// frozenView returns a view of st's bucket, empty when st is, that does not
// follow the bucket: a watch far behind, which the test moves by hand.
func frozenView(t *testing.T, st *Store) (*Live, *liveState) {
	t.Helper()
	l := &Live{kv: st.kv, nc: st.nc, done: make(chan struct{})}
	require.NoError(t, l.chooseGet(testutil.Context(t)))
	ls := newLiveState(nil)
	l.snap.Store(ls.snapshot())
	return l, ls
}

// TestSyncWaitsForAWatchFarBehind: a watch behind a burst of writes may take
// longer than Sync's patience to deliver one stored before Sync was called.
// Sync waits for it (until its context ends), and returns once the view
// holds it: a subscriber stored before an event is in the view that fans
// the event out.
func TestSyncWaitsForAWatchFarBehind(t *testing.T) {
	t.Parallel()
	st, _ := newStore(t)
	ctx := testutil.Context(t)
	l, ls := frozenView(t, st)
	require.NoError(t, st.Put(ctx, valid("a")))

	done := make(chan error, 1)
	go func() { done <- l.Sync(ctx) }()
	select {
	case err := <-done:
		t.Fatalf("Sync returned (%v) while the view lacked a stored write", err)
	case <-time.After(4 * syncWait):
	}
	e, err := st.kv.Get(ctx, "a")
	require.NoError(t, err)
	ls.apply(e)
	l.publish(ls.snapshot())
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-ctx.Done():
		t.Fatal("Sync did not return once the view held the write")
	}
	_, ok := l.Get("a")
	require.True(t, ok)
}

// TestSyncPassesARevisionRemovedBeforeTheWatchSawIt: a revision removed from
// the bucket's stream (as `nats kv purge --deletes` removes delete markers)
// never reaches the view; Sync does not wait for it.
func TestSyncPassesARevisionRemovedBeforeTheWatchSawIt(t *testing.T) {
	t.Parallel()
	st, n := newStore(t)
	ctx := testutil.Context(t)
	l, _ := frozenView(t, st)
	rev, err := st.kv.Put(ctx, "a", []byte("{}"))
	require.NoError(t, err)
	stream, err := n.JS.Stream(ctx, "KV_"+streams.SubscribersBucket)
	require.NoError(t, err)

	syncCtx, cancel := context.WithTimeout(ctx, 10*syncWait)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- l.Sync(syncCtx) }()
	require.NoError(t, stream.Purge(ctx, jetstream.WithPurgeSequence(rev+1)))
	require.NoError(t, <-done, "Sync waited for a revision no longer stored")
}

// TestWatchCompilesAFilterOnceAndReportsABadOne: a subscriber's content
// filter is compiled when its value is read, once, and every later view
// shares the compiled filter until the value changes; a stored filter CEL
// refuses (written by hand, or by a later relay's syntax) makes the value
// invalid, reported, and the last valid one stays in effect.
func TestWatchCompilesAFilterOnceAndReportsABadOne(t *testing.T) {
	t.Parallel()
	st, n := newStore(t)
	ctx := testutil.Context(t)
	s := valid("a")
	s.Filter = `body.status == "paid"`
	require.NoError(t, st.Put(ctx, s))
	l, err := st.Watch(ctx)
	require.NoError(t, err)
	got := l.Matching("order.shipped")
	require.Len(t, got, 1)
	compiled := got[0].Content()
	require.NotNil(t, compiled)
	require.Equal(t, s.Filter, compiled.String())

	require.NoError(t, st.Put(ctx, valid("b")))
	waitFor(t, l, "b added", func() bool { return len(l.All()) == 2 })
	for _, sub := range l.Matching("order.shipped") {
		if sub.ID == "a" {
			require.Same(t, compiled, sub.Content(), "compiled again on another subscriber's change")
		} else {
			require.Nil(t, sub.Content())
		}
	}

	_, err = rawKV(t, n).PutString(ctx, "a", `{"id":"a","url":"https://example.com/h","secrets":["`+secretA+`"],"filter":"body.status =="}`)
	require.NoError(t, err)
	waitFor(t, l, "a reported", func() bool { return l.Invalid()["a"] != nil })
	require.ErrorIs(t, l.Invalid()["a"], ErrCorrupt)
	require.ErrorContains(t, l.Invalid()["a"], "--filter")
	still, ok := l.Get("a")
	require.True(t, ok)
	require.Same(t, compiled, still.Content())

	s.Filter = ""
	require.NoError(t, st.Put(ctx, s))
	waitFor(t, l, "a's filter removed", func() bool { got, _ := l.Get("a"); return got.Content() == nil && l.Invalid()["a"] == nil })
}

// TestSyncWaitsForAKeyRewrittenWhileItWaits: the bucket keeps one value per
// key, so a key written again removes the revision the view lacks. Sync
// learns the bucket's last revision, the key is written again, and the
// revision Sync finds stored after the view's is later than the one it
// waited for: the view still lacks the key, so Sync waits for that later
// revision rather than return, and returns once the view holds it.
func TestSyncWaitsForAKeyRewrittenWhileItWaits(t *testing.T) {
	t.Parallel()
	st, _ := newStore(t)
	ctx := testutil.Context(t)
	l, ls := frozenView(t, st)
	require.NoError(t, st.Put(ctx, valid("x")))
	e, err := st.kv.Get(ctx, "x")
	require.NoError(t, err)
	first := e.Revision()

	done := make(chan error, 1)
	go func() { done <- l.Sync(ctx) }()
	waitKnown(ctx, t, l, done, first, "Sync did not note the bucket's last revision")
	second, err := st.kv.Put(ctx, "x", e.Value())
	require.NoError(t, err)
	// Sync looks at what is stored once the view has not moved for a while:
	// it then finds the second revision, and waits for it.
	waitKnown(ctx, t, l, done, second, "Sync did not wait for the revision that replaced the one it waited for")

	e, err = st.kv.Get(ctx, "x")
	require.NoError(t, err)
	ls.apply(e)
	l.publish(ls.snapshot())
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-ctx.Done():
		t.Fatal("Sync did not return once the view held the key")
	}
	_, ok := l.Get("x")
	require.True(t, ok)
}

// waitKnown waits until the view knows the bucket stores rev, failing if the
// Sync running meanwhile returns first.
func waitKnown(ctx context.Context, t *testing.T, l *Live, done <-chan error, rev uint64, msg string) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for l.known.Load() < rev {
		select {
		case err := <-done:
			t.Fatalf("Sync returned (%v) while the view lacked a stored write", err)
		case <-tick.C:
		case <-ctx.Done():
			t.Fatal(msg)
		}
	}
}

// TestWatchPublishesWhatSyncWaitsFor: while a burst of writes comes, the
// view publishes a snapshot at most every publishGap or more (more as the
// snapshots cost more), which may outlast the fan-out's bounded wait. Once
// the changes folded reach the revision a Sync waits for, the view
// publishes at once, whatever its gap: here one of an hour.
func TestWatchPublishesWhatSyncWaitsFor(t *testing.T) {
	t.Parallel()
	st, _ := newStore(t)
	ctx := testutil.Context(t)
	l, ls := frozenView(t, st)
	require.NoError(t, st.Put(ctx, valid("x")))
	e, err := st.kv.Get(ctx, "x")
	require.NoError(t, err)

	done := make(chan error, 1)
	go func() { done <- l.Sync(ctx) }()
	waitKnown(ctx, t, l, done, e.Revision(), "Sync did not note the bucket's last revision")
	f := &follower{l: l, st: ls, published: time.Now(), cost: time.Hour, progress: time.Now()}
	defer f.stopTimers()
	f.fold(e)
	f.settle(false) // more changes are on their way
	require.Equal(t, e.Revision(), l.snap.Load().rev, "the view did not publish the revision Sync waited for")
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-ctx.Done():
		t.Fatal("the view did not publish the revision Sync waited for")
	}
	_, ok := l.Get("x")
	require.True(t, ok)
}
