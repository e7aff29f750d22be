package overflow_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/overflow"
	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

// fill puts count deliveries for sub in its overflow, with event ids
// <sub>-0, <sub>-1, …, as a lane would from DELIVERIES sequences base+i.
func fill(t *testing.T, js jetstream.JetStream, sub string, count int, base uint64) {
	t.Helper()
	for i := range count {
		h := nats.Header{streams.HeaderEventID: []string{fmt.Sprintf("%s-%d", sub, i)}, "Nats-Msg-Id": []string{"x"}}
		require.NoError(t, overflow.Put(testutil.Context(t), js, sub, []byte(strconv.Itoa(i)), h, base+uint64(i)))
	}
}

func TestRefillBringsBackInPublishOrderAndPurges(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	ctx := testutil.Context(t)
	fill(t, n.JS, "a", 700, 1)
	fill(t, n.JS, "b", 3, 10_000)
	// A second Put of the same DELIVERIES message stores nothing more.
	require.NoError(t, overflow.Put(ctx, n.JS, "a", []byte("0"), nil, 1))

	stream, err := n.JS.Stream(ctx, streams.Deliveries)
	require.NoError(t, err)
	backlogs, err := overflow.Backlogs(ctx, stream)
	require.NoError(t, err)
	require.Equal(t, map[string]uint64{"a": 700, "b": 3}, backlogs)

	r, err := overflow.NewRefiller(ctx, n.JS, nil)
	require.NoError(t, err)
	sub, err := n.Conn.SubscribeSync("deliveries.s01.a")
	require.NoError(t, err)

	var next uint64
	total := 0
	for {
		moved, nx, more, err := r.Refill(ctx, "a", "deliveries.s01.a", next, 300)
		require.NoError(t, err)
		require.LessOrEqual(t, moved, 300)
		total += moved
		next = nx
		if moved == 0 {
			require.False(t, more)
			break
		}
	}
	require.Equal(t, 700, total)
	for i := range 700 {
		m, err := sub.NextMsg(5e9)
		require.NoError(t, err)
		require.Equal(t, strconv.Itoa(i), string(m.Data), "order")
		require.Equal(t, fmt.Sprintf("a-%d", i), m.Header.Get(streams.HeaderEventID))
		require.NotEmpty(t, m.Header.Get(streams.HeaderOverflowSeq))
		require.Empty(t, m.Header.Values("Nats-Sequence"), "no direct-get header rides on the copy")
	}
	backlogs, err = overflow.Backlogs(ctx, stream)
	require.NoError(t, err)
	require.Equal(t, map[string]uint64{"b": 3}, backlogs, "what was brought back is purged, the rest stays")
}

func TestRefillFromTwoReadersStoresOneCopy(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	ctx := testutil.Context(t)
	fill(t, n.JS, "a", 50, 1)
	r1, err := overflow.NewRefiller(ctx, n.JS, nil)
	require.NoError(t, err)
	msgs, err := overflow.Read(ctx, n.Conn, "a", 0, 50)
	require.NoError(t, err)
	require.Len(t, msgs, 50)
	// Both read the same 50 before either purged: a second relay in a race.
	moved, _, _, err := r1.Refill(ctx, "a", "deliveries.s01.a", 0, 50)
	require.NoError(t, err)
	require.Equal(t, 50, moved)
	for _, m := range msgs {
		m.Header.Set(streams.HeaderOverflowSeq, strconv.FormatUint(m.Seq, 10))
		ack, err := n.JS.PublishMsg(ctx, &nats.Msg{Subject: "deliveries.s01.a", Header: m.Header, Data: m.Data},
			jetstream.WithMsgID("refill-"+strconv.FormatUint(m.Seq, 10)))
		require.NoError(t, err)
		require.True(t, ack.Duplicate)
	}
}

func TestReadOfAnEmptyOverflow(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	msgs, err := overflow.Read(testutil.Context(t), n.Conn, "nobody", 0, 10)
	require.NoError(t, err)
	require.Empty(t, msgs)
}

// TestRefillSettlesLateMessagesTogether checks the Late contract: what Late
// takes is not brought back, its settles run at once rather than one round
// trip after another (every settle here waits for all the others to have
// started), and a settle that fails keeps it, and it alone, in the
// overflow: what follows it was stored or settled, and is removed too, so
// that no later refill brings it back a second time.
func TestRefillSettlesLateMessagesTogether(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	ctx := testutil.Context(t)
	fill(t, n.JS, "a", 20, 1)
	const late = 8 // the even bodies below 16
	var started sync.WaitGroup
	started.Add(late)
	var mu sync.Mutex
	var settled []string
	isLate := func(m overflow.Msg) bool {
		i, _ := strconv.Atoi(string(m.Data))
		return i%2 == 0 && i < 16
	}
	r, err := overflow.NewRefiller(ctx, n.JS, func(sub string, m overflow.Msg) func(context.Context) error {
		if !isLate(m) {
			return nil
		}
		return func(context.Context) error {
			started.Done()
			started.Wait()
			mu.Lock()
			defer mu.Unlock()
			settled = append(settled, string(m.Data))
			if string(m.Data) == "14" {
				return errors.New("no DLQ")
			}
			return nil
		}
	})
	require.NoError(t, err)
	sub, err := n.Conn.SubscribeSync("deliveries.s01.a")
	require.NoError(t, err)

	moved, next, _, err := r.Refill(ctx, "a", "deliveries.s01.a", 0, 20)
	require.ErrorContains(t, err, "no DLQ")
	require.Len(t, settled, late)
	// Bodies 0–13 are settled or stored, and 15–19 stored; 14 failed.
	require.Equal(t, 12, moved, "the odd bodies 1–13 and 15–19 are brought back")
	require.Equal(t, uint64(15), next, "read again from body 14's sequence")
	for _, want := range []string{"1", "3", "5", "7", "9", "11", "13", "15", "16", "17", "18", "19"} {
		m, err := sub.NextMsg(5e9)
		require.NoError(t, err)
		require.Equal(t, want, string(m.Data), "the late ones are not brought back")
	}
	stream, err := n.JS.Stream(ctx, streams.Deliveries)
	require.NoError(t, err)
	backlogs, err := overflow.Backlogs(ctx, stream)
	require.NoError(t, err)
	require.Equal(t, map[string]uint64{"a": 1}, backlogs, "only the failed settle's message stays")
	msgs, err := overflow.Read(ctx, n.Conn, "a", next, 20)
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	require.Equal(t, "14", string(msgs[0].Data))
}

// TestRefillOfAFullDeliveriesSpillsToRetries: when DELIVERIES has no room
// for the copies a refill brings back (the stream full of the very backlog
// being brought back), the refused ones go to RETRIES, due at once, and
// the overflow is purged all the same: the way out needs no room in the
// full stream, and nothing is lost.
func TestRefillOfAFullDeliveriesSpillsToRetries(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	ctx := testutil.Context(t)
	const count, size = 40, 1000
	body := bytes.Repeat([]byte("x"), size)
	for i := range count {
		h := nats.Header{streams.HeaderEventID: []string{fmt.Sprintf("a-%d", i)}}
		require.NoError(t, overflow.Put(ctx, n.JS, "a", body, h, uint64(i+1)))
	}
	// The operator shrinks DELIVERIES to what it holds, and a bit.
	s, err := n.JS.Stream(ctx, streams.Deliveries)
	require.NoError(t, err)
	cfg := s.CachedInfo().Config
	cfg.MaxBytes = int64(s.CachedInfo().State.Bytes) + 3*size
	_, err = n.JS.UpdateStream(ctx, cfg)
	require.NoError(t, err)
	_, err = n.JS.Publish(ctx, "deliveries.s01.other", bytes.Repeat([]byte("y"), 10*size))
	require.True(t, streams.NoRoom(err), "a publish past max_bytes: %v", err)

	r, err := overflow.NewRefiller(ctx, n.JS, nil)
	require.NoError(t, err)
	moved, next, _, err := r.Refill(ctx, "a", "deliveries.s01.a", 0, count)
	require.NoError(t, err)
	require.Greater(t, next, uint64(count), "everything read is safe and purged")

	info, err := s.Info(ctx, jetstream.WithSubjectFilter("deliveries.>"))
	require.NoError(t, err)
	require.Zero(t, info.State.Subjects["deliveries.overflow.a"], "overflow purged")
	onLane := int(info.State.Subjects["deliveries.s01.a"])
	require.Equal(t, moved, onLane)
	retries, err := n.JS.Stream(ctx, streams.Retries)
	require.NoError(t, err)
	rinfo, err := retries.Info(ctx, jetstream.WithSubjectFilter("retries.due.a"))
	require.NoError(t, err)
	spilled := int(rinfo.State.Subjects["retries.due.a"])
	t.Logf("%d brought back to the lane, %d spilled to RETRIES", onLane, spilled)
	require.Positive(t, spilled, "nothing spilled: the stream was not full")
	require.Equal(t, count, onLane+spilled, "every message is on the lane or in RETRIES")
	m, err := retries.GetLastMsgForSubject(ctx, "retries.due.a")
	require.NoError(t, err)
	require.Empty(t, m.Header.Get(streams.HeaderOverflowSeq), "a spilled delivery is not taken for one brought back into room")
	require.NotEmpty(t, m.Header.Get(streams.HeaderEventID))
}

func TestNoRoomIsOnlyAFullStream(t *testing.T) {
	t.Parallel()
	require.False(t, streams.NoRoom(nil))
	require.False(t, streams.NoRoom(errors.New("maximum bytes exceeded")))
	require.False(t, streams.NoRoom(&jetstream.APIError{ErrorCode: 10077, Description: "some I/O error"}))
	require.True(t, streams.NoRoom(&jetstream.APIError{ErrorCode: 10077, Description: "maximum bytes exceeded"}))
	require.True(t, streams.NoRoom(fmt.Errorf("wrapped: %w", &jetstream.APIError{ErrorCode: 10047})))
}
