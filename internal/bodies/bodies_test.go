package bodies_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/relay-dev/relay/internal/bodies"
	"github.com/relay-dev/relay/internal/clock"
	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// id is the event id of the event at seq in these tests.
func id(seq uint64) string { return fmt.Sprintf("ev-%d", seq) }

func body(i, size int) []byte { return bytes.Repeat([]byte{byte(i)}, size) }

// events starts a server with relay's streams and publishes n events of
// size bytes each, the i-th body filled with byte i, with ids id(seq),
// each body stored in BODIES too (unless inEventsOnly), as the fan-out
// does.
func events(t *testing.T, n, size int, inEventsOnly bool) *testutil.NATS {
	t.Helper()
	nc := testutil.StartRelayNATS(t)
	for i := range n {
		seq := publish(t, nc, i, size)
		if !inEventsOnly {
			storeBody(t, nc, seq, id(seq), body(i, size))
		}
	}
	return nc
}

func publish(t *testing.T, n *testutil.NATS, i, size int) uint64 {
	t.Helper()
	m := &nats.Msg{Subject: fmt.Sprintf("events.t%d", i%3), Data: body(i, size), Header: nats.Header{}}
	m.Header.Set(nats.MsgIdHdr, fmt.Sprintf("ev-%d", i+1))
	ack, err := n.JS.PublishMsg(testutil.Context(t), m)
	require.NoError(t, err)
	require.Equal(t, uint64(i+1), ack.Sequence)
	return ack.Sequence
}

// storeBody stores a body in BODIES as the fan-out does.
func storeBody(t *testing.T, n *testutil.NATS, seq uint64, eventID string, data []byte) {
	t.Helper()
	m := &nats.Msg{Subject: streams.BodySubject(seq), Data: data, Header: nats.Header{}}
	m.Header.Set(streams.HeaderEventID, eventID)
	_, err := n.JS.PublishMsg(testutil.Context(t), m)
	require.NoError(t, err)
}

// purge purges stream below sequence below.
func purge(t *testing.T, n *testutil.NATS, stream string, below uint64) {
	t.Helper()
	ctx := testutil.Context(t)
	s, err := n.JS.Stream(ctx, stream)
	require.NoError(t, err)
	require.NoError(t, s.Purge(ctx, jetstream.WithPurgeSequence(below)))
}

// TestBodyReadsAheadOnceForMany: the body of each event exactly as
// published, the next events read with the first, and many callers asking
// for one event at once cost one read.
func TestBodyReadsAheadOnceForMany(t *testing.T) {
	n := events(t, 100, 1000, false)
	r := bodies.New(n.Conn, 0, nil)
	ctx := testutil.Context(t)

	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			got, err := r.Body(ctx, 1, id(1))
			if err != nil || !bytes.Equal(got, body(0, 1000)) {
				t.Errorf("event 1: %v, %d bytes", err, len(got))
			}
		})
	}
	wg.Wait()
	require.Equal(t, int64(1), r.Requests(), "50 callers of one event")
	for seq := uint64(2); seq <= bodies.ReadAhead; seq++ {
		got, err := r.Body(ctx, seq, id(seq))
		require.NoError(t, err)
		require.Equal(t, body(int(seq-1), 1000), got)
	}
	require.Equal(t, int64(1), r.Requests(), "the events read ahead")
	_, err := r.Body(ctx, bodies.ReadAhead+1, id(bodies.ReadAhead+1))
	require.NoError(t, err)
	require.Equal(t, int64(2), r.Requests())
}

// TestManyCallersOfABodyNotInBodiesReadItOnce: a body BODIES does not hold
// yet, asked for by the 50 deliveries of its event at once, costs the read
// ahead, one read of it alone and one of EVENTS: not one each.
func TestManyCallersOfABodyNotInBodiesReadItOnce(t *testing.T) {
	n := events(t, 3, 1000, true)
	r := bodies.New(n.Conn, 0, nil)
	ctx := testutil.Context(t)
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			got, err := r.Body(ctx, 2, id(2))
			if err != nil || !bytes.Equal(got, body(1, 1000)) {
				t.Errorf("event 2: %v, %d bytes", err, len(got))
			}
		})
	}
	wg.Wait()
	require.LessOrEqual(t, r.Requests(), int64(3))
}

// TestBodyOutlivesEventsAndFallsBackToIt: a body is read from BODIES once
// EVENTS no longer holds its event (an operator's purge), and from EVENTS
// while BODIES does not hold it (not stored yet, or purged); one that
// neither holds is ErrGone, not another event's body, and not an error of
// the connection.
func TestBodyOutlivesEventsAndFallsBackToIt(t *testing.T) {
	n := events(t, 10, 100, false)
	ctx := testutil.Context(t)
	purge(t, n, streams.Events, 5)
	r := bodies.New(n.Conn, 0, nil)
	got, err := r.Body(ctx, 2, id(2))
	require.NoError(t, err, "event 2 purged from EVENTS, in BODIES")
	require.Equal(t, body(1, 100), got)

	// BODIES' first ten messages are the bodies of events 1 to 10.
	purge(t, n, streams.Bodies, 8)
	s, err := n.JS.Stream(ctx, streams.Events)
	require.NoError(t, err)
	require.NoError(t, s.DeleteMsg(ctx, 6))
	r = bodies.New(n.Conn, 0, nil)
	for _, seq := range []uint64{1, 4, 6, 11} {
		_, err := r.Body(ctx, seq, id(seq))
		require.ErrorIs(t, err, bodies.ErrGone, "event %d", seq)
	}
	got, err = r.Body(ctx, 7, id(7))
	require.NoError(t, err, "event 7 purged from BODIES, in EVENTS")
	require.Equal(t, body(6, 100), got)
	got, err = r.Body(ctx, 9, id(9))
	require.NoError(t, err)
	require.Equal(t, body(8, 100), got)
}

// TestBodyStoredAgainBehindLargerOnesIsRead: a body the fan-out stored
// again (an event fanned out a second time) comes after the bodies of
// later events, so a read ahead that stops at its bytes leaves it out; it
// is then read alone, not taken as gone, with EVENTS purged.
func TestBodyStoredAgainBehindLargerOnesIsRead(t *testing.T) {
	const size = 200 << 10
	n := events(t, 20, size, false)
	storeBody(t, n, 1, id(1), body(0, size))
	purge(t, n, streams.Events, 21)
	r := bodies.New(n.Conn, 0, nil)
	got, err := r.Body(testutil.Context(t), 1, id(1))
	require.NoError(t, err)
	require.Equal(t, body(0, size), got)
}

// TestBodyOfAnotherEventIsNeverReturned: a body BODIES or the cache holds
// for another event at the same sequence (EVENTS deleted and made again)
// is not the body of this one: it is read from EVENTS, and is gone when
// EVENTS holds another event there too.
func TestBodyOfAnotherEventIsNeverReturned(t *testing.T) {
	n := events(t, 3, 100, true)
	storeBody(t, n, 2, "old-event", []byte("old body"))
	r := bodies.New(n.Conn, 0, nil)
	ctx := testutil.Context(t)
	got, err := r.Body(ctx, 2, "old-event")
	require.NoError(t, err)
	require.Equal(t, []byte("old body"), got)
	got, err = r.Body(ctx, 2, id(2))
	require.NoError(t, err, "cached and in BODIES for another event, in EVENTS for this one")
	require.Equal(t, body(1, 100), got)
	_, err = r.Body(ctx, 3, "another-event")
	require.ErrorIs(t, err, bodies.ErrGone)
}

// TestCacheStaysWithinItsBytes: the cache never keeps more than its
// bound, evicting the least recently used, and a body larger than the
// whole cache is still returned.
func TestCacheStaysWithinItsBytes(t *testing.T) {
	n := events(t, 200, 10_000, false)
	r := bodies.New(n.Conn, 50_000, nil)
	ctx := testutil.Context(t)
	for seq := uint64(1); seq <= 200; seq++ {
		got, err := r.Body(ctx, seq, id(seq))
		require.NoError(t, err)
		require.Equal(t, body(int(seq-1), 10_000), got)
		require.LessOrEqual(t, r.Size(), 50_000)
	}
	tiny := bodies.New(n.Conn, 100, nil)
	got, err := tiny.Body(ctx, 3, id(3))
	require.NoError(t, err)
	require.Len(t, got, 10_000)
}

// TestBodyGivesUpWithItsContext: a read is no longer than its caller's
// context.
func TestBodyGivesUpWithItsContext(t *testing.T) {
	n := events(t, 1, 10, false)
	r := bodies.New(n.Conn, 0, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := r.Body(ctx, 1, id(1))
	require.True(t, errors.Is(err, context.Canceled), "%v", err)
}

// TestBodiesDeletedAreReadFromEvents: with BODIES deleted, every body is
// read from EVENTS, ahead as from BODIES (a failed read of BODIES and one
// of EVENTS for the next 64 events), not handed back as an error.
func TestBodiesDeletedAreReadFromEvents(t *testing.T) {
	n := events(t, 100, 1000, false)
	ctx := testutil.Context(t)
	require.NoError(t, n.JS.DeleteStream(ctx, streams.Bodies))
	r := bodies.New(n.Conn, 0, nil)
	for seq := uint64(1); seq <= 100; seq++ {
		got, err := r.Body(ctx, seq, id(seq))
		require.NoError(t, err, "event %d", seq)
		require.Equal(t, body(int(seq-1), 1000), got)
	}
	require.Equal(t, int64(4), r.Requests(), "two reads ahead, each of BODIES and EVENTS")
}

// TestBodyNeitherStoreGivesIsUnreadableAfterGiveUp: a body that neither
// BODIES (deleted) nor EVENTS (purged; then deleted, not answering either)
// gives is an error to try again until its reads have failed for GiveUp
// by the Reader's clock (reads less than GiveUp apart: a read after a
// longer lull starts the count again), then ErrUnreadable naming what each stream
// answered; once BODIES answers again (made again), a body neither holds
// is ErrGone at once.
func TestBodyNeitherStoreGivesIsUnreadableAfterGiveUp(t *testing.T) {
	n := events(t, 3, 100, false)
	ctx := testutil.Context(t)
	require.NoError(t, n.JS.DeleteStream(ctx, streams.Bodies))
	purge(t, n, streams.Events, 3)
	fake := clock.NewFake(time.Now())
	r := bodies.New(n.Conn, 0, fake)

	unreadable := func(seq uint64) error {
		t.Helper()
		_, err := r.Body(ctx, seq, id(seq))
		require.Error(t, err)
		require.NotErrorIs(t, err, bodies.ErrGone, "BODIES did not answer: the body may be there")
		return err
	}
	for _, later := range []time.Duration{0, time.Second, bodies.GiveUp - 2*time.Second} {
		fake.Advance(later)
		err := unreadable(1)
		require.NotErrorIs(t, err, bodies.ErrUnreadable, "%s after the first failed read", later)
	}
	fake.Advance(time.Second)
	err := unreadable(1)
	require.ErrorIs(t, err, bodies.ErrUnreadable)
	require.Contains(t, err.Error(), "the body could be read from neither BODIES nor EVENTS for 1m0s: event 1 (ev-1): BODIES: ")
	require.Contains(t, err.Error(), "no responders")
	require.Contains(t, err.Error(), "; EVENTS: not stored")
	require.NotErrorIs(t, unreadable(2), bodies.ErrUnreadable, "another body's reads began failing now")
	fake.Advance(bodies.GiveUp)
	require.NotErrorIs(t, unreadable(2), bodies.ErrUnreadable, "read again after a lull of GiveUp: counted from now")

	// EVENTS not answering either.
	require.NoError(t, n.JS.DeleteStream(ctx, streams.Events))
	fake.Advance(bodies.GiveUp / 2)
	require.NotErrorIs(t, unreadable(2), bodies.ErrUnreadable)
	fake.Advance(bodies.GiveUp / 2)
	err = unreadable(2)
	require.ErrorIs(t, err, bodies.ErrUnreadable)
	require.Contains(t, err.Error(), "; EVENTS: reading EVENTS: ")

	// BODIES made again answers "not stored", and so does EVENTS.
	require.NoError(t, streams.Restore(ctx, n.JS, streams.Bodies, streams.Options{}))
	_, err = n.JS.CreateStream(ctx, jetstream.StreamConfig{Name: streams.Events, Subjects: []string{"events.>"}, AllowDirect: true})
	require.NoError(t, err)
	_, err = r.Body(ctx, 4, id(4))
	require.ErrorIs(t, err, bodies.ErrGone)
	require.Contains(t, err.Error(), "the body is in neither BODIES nor EVENTS: event 4 (ev-4): BODIES: not stored; EVENTS: not stored")
}

// TestCallersOfABodyLargerThanTheCacheAllGetIt: the many callers of one
// body that the cache cannot keep (larger than its bound) all get it from
// the one read they waited for, none an error.
func TestCallersOfABodyLargerThanTheCacheAllGetIt(t *testing.T) {
	n := events(t, 3, 1000, true)
	r := bodies.New(n.Conn, 100, nil)
	ctx := testutil.Context(t)
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			got, err := r.Body(ctx, 2, id(2))
			if err != nil || !bytes.Equal(got, body(1, 1000)) {
				t.Errorf("event 2: %v, %d bytes", err, len(got))
			}
		})
	}
	wg.Wait()
}
