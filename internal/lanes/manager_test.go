package lanes_test

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

// TestRemovedDedicatedLaneStopsApart: removing a dedicated subscriber whose
// request hangs stops its lane apart from the lanes' manager. Its lane
// waits for that request up to the subscriber's --timeout; meanwhile
// another subscriber that is paused and resumed gets its backlog at once,
// before the hanging request's timeout ends. (The manager waited for the
// stop, and the resume moved nothing until the timeout ended.)
func TestRemovedDedicatedLaneStopsApart(t *testing.T) {
	t.Parallel()
	const (
		shared = 2
		queued = 20
		// timeout is the hanging subscriber's --timeout: what the backlog
		// must beat. The test ends its request once the backlog is in.
		timeout = 25 * time.Second
	)
	b := setup(t)
	b.starts = &starts{}
	arrived := make(chan struct{}, 1)
	release := make(chan struct{})
	hanging := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case arrived <- struct{}{}:
		default:
		}
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(hanging.Close)
	ctx := testutil.Context(t)
	require.NoError(t, b.store.Put(ctx, subscribers.Subscriber{ID: "hang", URL: hanging.URL + "/hang", Secrets: []string{secret},
		Dedicated: true, Timeout: subscribers.Duration(timeout)}))
	hang, err := b.store.Get(ctx, "hang")
	require.NoError(t, err)
	other := b.put(t, subscribers.Subscriber{ID: "other", Paused: true})
	b.enqueue(t, hang, shared, 1)
	b.enqueue(t, other, shared, queued)
	b.flush(t)
	b.startLanes(t, shared)
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock) // before the lanes stop: their stop waits for the request

	select {
	case <-arrived:
	case <-ctx.Done():
		t.Fatal("the hanging subscriber got no request")
	}
	testutil.Eventually(t, func() bool { return b.overflowed(t, "other") == queued },
		"%d of %d in overflow", b.overflowed(t, "other"), queued)

	// `relay sub rm hang`: its lane stops pulling at once, and waits for
	// the hanging request.
	require.NoError(t, b.store.Delete(ctx, "hang"))
	testutil.Eventually(t, func() bool {
		info, err := b.n.JS.Consumer(ctx, streams.Deliveries, streams.LaneConsumer(hang.Lane(shared)))
		return err == nil && info.CachedInfo().NumWaiting == 0
	}, "the removed subscriber's lane still pulls")

	_, err = b.store.Resume(ctx, "other")
	require.NoError(t, err)
	testutil.Eventually(t, func() bool { return b.arr.count("other") == queued },
		"%d of %d delivered after resume", b.arr.count("other"), queued)
	// The relay gives the hanging request up at its timeout: it has not,
	// or it did after the backlog came in.
	last := slices.MaxFunc(b.arr.times("other"), time.Time.Compare)
	ended := b.starts.ends("hang")
	require.True(t, len(ended) == 0 || last.Before(ended[0]),
		"the backlog came in at %v, after the hanging request's timeout ended at %v", last, ended)
	unblock()
	t.Logf("the hanging subscriber's requests began at %v and ended at %v; the backlog was in at %v",
		b.starts.times("hang"), b.starts.ends("hang"), last)
}
