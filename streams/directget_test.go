package streams_test

import (
	"strconv"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

// TestGetBatchReadsInOrderWithinItsBounds: a batched direct get brings the
// messages from a sequence on, in order, with their subjects, times and
// headers, no more than its batch or past its bytes, says when nothing follows,
// and on a subject skips the others.
func TestGetBatchReadsInOrderWithinItsBounds(t *testing.T) {
	n := testutil.StartNATS(t)
	ctx := testutil.Context(t)
	_, err := n.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, AllowDirect: true})
	require.NoError(t, err)
	body := make([]byte, 1000)
	for i := range 10 {
		_, err := n.JS.Publish(ctx, "s."+strconv.Itoa(i%2), body)
		require.NoError(t, err)
	}

	got, done, err := streams.GetBatch(ctx, n.Conn, "S", streams.DirectGet{Seq: 3, Batch: 4})
	require.NoError(t, err)
	require.False(t, done)
	require.Len(t, got, 4)
	for i, m := range got {
		require.Equal(t, uint64(3+i), m.Seq)
		require.Equal(t, "s."+strconv.Itoa((2+i)%2), m.Subject)
		require.False(t, m.Time.IsZero())
		require.Len(t, m.Data, len(body))
	}

	got, done, err = streams.GetBatch(ctx, n.Conn, "S", streams.DirectGet{Seq: 1, Batch: 100, MaxBytes: 3500})
	require.NoError(t, err)
	require.False(t, done, "bytes ended the batch, not the stream")
	require.Len(t, got, 4, "1,000-byte bodies up to the one that passes 3,500 bytes")

	got, done, err = streams.GetBatch(ctx, n.Conn, "S", streams.DirectGet{Seq: 6, NextBySubj: "s.1", Batch: 100})
	require.NoError(t, err)
	require.True(t, done)
	require.Equal(t, []uint64{6, 8, 10}, seqs(got))

	got, done, err = streams.GetBatch(ctx, n.Conn, "S", streams.DirectGet{Seq: 11, Batch: 10})
	require.NoError(t, err)
	require.True(t, done)
	require.Empty(t, got)

	_, _, err = streams.GetBatch(ctx, n.Conn, "NOPE", streams.DirectGet{Seq: 1, Batch: 1})
	require.Error(t, err)
}

func seqs(ms []streams.Stored) []uint64 {
	out := make([]uint64, len(ms))
	for i, m := range ms {
		out[i] = m.Seq
	}
	return out
}
