package bodies_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/relay-dev/relay/internal/bodies"
	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// events starts a server with relay's streams and publishes n events of
// size bytes each, the i-th body filled with byte i, each body stored in
// BODIES too, as the fan-out does.
func events(t *testing.T, n, size int) *testutil.NATS {
	t.Helper()
	nats := testutil.StartRelayNATS(t)
	ctx := testutil.Context(t)
	for i := range n {
		ack, err := nats.JS.Publish(ctx, fmt.Sprintf("events.t%d", i%3), body(i, size))
		require.NoError(t, err)
		_, err = nats.JS.Publish(ctx, streams.BodySubject(ack.Sequence), body(i, size))
		require.NoError(t, err)
	}
	return nats
}

// purge purges stream below sequence below.
func purge(t *testing.T, n *testutil.NATS, stream string, below uint64) {
	t.Helper()
	ctx := testutil.Context(t)
	s, err := n.JS.Stream(ctx, stream)
	require.NoError(t, err)
	require.NoError(t, s.Purge(ctx, jetstream.WithPurgeSequence(below)))
}

func body(i, size int) []byte { return bytes.Repeat([]byte{byte(i)}, size) }

// TestBodyReadsAheadOnceForMany: the body of each event exactly as
// published, the next events read with the first, and many callers asking
// for one event at once cost one read.
func TestBodyReadsAheadOnceForMany(t *testing.T) {
	n := events(t, 100, 1000)
	r := bodies.New(n.Conn, 0)
	ctx := testutil.Context(t)

	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			got, err := r.Body(ctx, 1)
			if err != nil || !bytes.Equal(got, body(0, 1000)) {
				t.Errorf("event 1: %v, %d bytes", err, len(got))
			}
		})
	}
	wg.Wait()
	require.Equal(t, int64(1), r.Requests(), "50 callers of one event")
	for seq := uint64(2); seq <= bodies.ReadAhead; seq++ {
		got, err := r.Body(ctx, seq)
		require.NoError(t, err)
		require.Equal(t, body(int(seq-1), 1000), got)
	}
	require.Equal(t, int64(1), r.Requests(), "the events read ahead")
	_, err := r.Body(ctx, bodies.ReadAhead+1)
	require.NoError(t, err)
	require.Equal(t, int64(2), r.Requests())
}

// TestBodyOutlivesEventsAndFallsBackToIt: a body is read from BODIES once
// EVENTS no longer holds its event (an operator's purge), and from EVENTS
// while BODIES does not hold it (not stored yet, or purged); one that
// neither holds is ErrGone, not another event's body, and not an error of
// the connection.
func TestBodyOutlivesEventsAndFallsBackToIt(t *testing.T) {
	n := events(t, 10, 100)
	ctx := testutil.Context(t)
	purge(t, n, streams.Events, 5)
	r := bodies.New(n.Conn, 0)
	got, err := r.Body(ctx, 2)
	require.NoError(t, err, "event 2 purged from EVENTS, in BODIES")
	require.Equal(t, body(1, 100), got)

	// BODIES' first ten messages are the bodies of events 1 to 10.
	purge(t, n, streams.Bodies, 8)
	s, err := n.JS.Stream(ctx, streams.Events)
	require.NoError(t, err)
	require.NoError(t, s.DeleteMsg(ctx, 6))
	r = bodies.New(n.Conn, 0)
	for _, seq := range []uint64{1, 4, 6, 11} {
		_, err := r.Body(ctx, seq)
		require.ErrorIs(t, err, bodies.ErrGone, "event %d", seq)
	}
	got, err = r.Body(ctx, 7)
	require.NoError(t, err, "event 7 purged from BODIES, in EVENTS")
	require.Equal(t, body(6, 100), got)
	got, err = r.Body(ctx, 9)
	require.NoError(t, err)
	require.Equal(t, body(8, 100), got)
}

// TestCacheStaysWithinItsBytes: the cache never keeps more than its
// bound, evicting the least recently used, and a body larger than the
// whole cache is still returned.
func TestCacheStaysWithinItsBytes(t *testing.T) {
	n := events(t, 200, 10_000)
	r := bodies.New(n.Conn, 50_000)
	ctx := testutil.Context(t)
	for seq := uint64(1); seq <= 200; seq++ {
		got, err := r.Body(ctx, seq)
		require.NoError(t, err)
		require.Equal(t, body(int(seq-1), 10_000), got)
		require.LessOrEqual(t, r.Size(), 50_000)
	}
	tiny := bodies.New(n.Conn, 100)
	got, err := tiny.Body(ctx, 3)
	require.NoError(t, err)
	require.Len(t, got, 10_000)
}

// TestBodyGivesUpWithItsContext: a read is no longer than its caller's
// context.
func TestBodyGivesUpWithItsContext(t *testing.T) {
	n := events(t, 1, 10)
	r := bodies.New(n.Conn, 0)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := r.Body(ctx, 1)
	require.True(t, errors.Is(err, context.Canceled), "%v", err)
}
