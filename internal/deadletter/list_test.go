package deadletter

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

// dlqConsumers is how many consumers the DLQ stream has.
func dlqConsumers(t *testing.T, js jetstream.JetStream) int {
	t.Helper()
	ctx := testutil.Context(t)
	s, err := js.Stream(ctx, streams.DLQ)
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	return info.State.Consumers
}

// seed dead-letters one delivery per (subscriber, reason) pair, in order,
// with event ids "<subscriber>/<reason>".
func seed(t *testing.T, js jetstream.JetStream, pairs ...[2]string) {
	t.Helper()
	ctx := testutil.Context(t)
	for i, p := range pairs {
		hdr := nats.Header{streams.HeaderEventID: {p[0] + "/" + p[1]}}
		d := Death{Subscriber: p[0], Reason: Reason(p[1]), Attempts: 1, OriginSeq: uint64(i + 1)}
		_, err := Publish(ctx, js, []byte("{}"), hdr, d)
		require.NoError(t, err)
	}
}

func eventIDs(entries []Entry) []string {
	ids := []string{}
	for _, e := range entries {
		ids = append(ids, e.EventID)
	}
	return ids
}

func TestListFilters(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	seed(t, n.JS,
		[2]string{"a", "gone"}, [2]string{"b", "gone"}, [2]string{"a", "rejected"},
		[2]string{"b", "max_attempts"}, [2]string{"a", "gone"})
	tests := []struct {
		name   string
		filter Filter
		want   []string
	}{
		{"everything", Filter{}, []string{"a/gone", "b/gone", "a/rejected", "b/max_attempts", "a/gone"}},
		{"by subscriber", Filter{Subscriber: "a"}, []string{"a/gone", "a/rejected", "a/gone"}},
		{"by reason", Filter{Reason: Gone}, []string{"a/gone", "b/gone", "a/gone"}},
		{"by both", Filter{Subscriber: "b", Reason: MaxAttempts}, []string{"b/max_attempts"}},
		{"unknown subscriber", Filter{Subscriber: "c"}, []string{}},
		{"reason nobody died of", Filter{Reason: Refused}, []string{}},
		{"both, no match", Filter{Subscriber: "a", Reason: MaxAttempts}, []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := List(testutil.Context(t), n.JS, tt.filter, 0)
			require.NoError(t, err)
			require.NotNil(t, got)
			require.Equal(t, tt.want, eventIDs(got))
			for i := 1; i < len(got); i++ {
				require.Less(t, got[i-1].DLQSeq, got[i].DLQSeq, "stream order")
			}
		})
	}
	t.Cleanup(func() {
		if c := dlqConsumers(t, n.JS); c != 0 {
			t.Errorf("List left %d consumers on the DLQ stream", c)
		}
	})
}

func TestListOnAnEmptyDLQReturnsAnEmptySliceAndCreatesNoConsumer(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	for _, f := range []Filter{{}, {Subscriber: "demo"}, {Reason: Gone}} {
		got, err := List(testutil.Context(t), n.JS, f, 0)
		require.NoError(t, err)
		require.NotNil(t, got)
		require.Empty(t, got)
	}
	require.Zero(t, dlqConsumers(t, n.JS))
}

func TestListLimit(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	seed(t, n.JS, [2]string{"a", "gone"}, [2]string{"a", "rejected"}, [2]string{"b", "gone"})
	tests := []struct {
		name   string
		filter Filter
		limit  int
		want   []string
		more   int // > 0: ErrTruncated, saying this many more match
	}{
		{"below the count", Filter{}, 2, []string{"a/gone", "a/rejected"}, 1},
		{"one", Filter{}, 1, []string{"a/gone"}, 2},
		{"equal to the count", Filter{}, 3, []string{"a/gone", "a/rejected", "b/gone"}, 0},
		{"zero means the default", Filter{}, 0, []string{"a/gone", "a/rejected", "b/gone"}, 0},
		{"negative means the default", Filter{}, -5, []string{"a/gone", "a/rejected", "b/gone"}, 0},
		{"filtered, equal", Filter{Subscriber: "a"}, 2, []string{"a/gone", "a/rejected"}, 0},
		{"filtered, below", Filter{Reason: Gone}, 1, []string{"a/gone"}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := List(testutil.Context(t), n.JS, tt.filter, tt.limit)
			if tt.more > 0 {
				require.ErrorIs(t, err, ErrTruncated)
				require.Contains(t, err.Error(), fmt.Sprintf("%d more match", tt.more))
			} else {
				require.NoError(t, err)
			}
			require.Equal(t, tt.want, eventIDs(got))
		})
	}
}

func TestListSkipsAndReportsMalformedMessages(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	ctx := testutil.Context(t)
	seed(t, n.JS, [2]string{"a", "gone"})
	// Written around relay, as `nats pub` could.
	bad := &nats.Msg{Subject: "dlq.a.gone", Header: nats.Header{streams.HeaderAttempts: {"many"}}, Data: []byte("x")}
	ack, err := n.JS.PublishMsg(ctx, bad)
	require.NoError(t, err)
	bare, err := n.JS.Publish(ctx, "dlq.a.rejected", []byte("no headers at all"))
	require.NoError(t, err)

	got, err := List(ctx, n.JS, Filter{}, 0)
	require.ErrorIs(t, err, ErrMalformedEntry)
	require.NotErrorIs(t, err, ErrTruncated)
	require.Contains(t, err.Error(), fmt.Sprintf("sequence %d", ack.Sequence))
	require.Contains(t, err.Error(), streams.HeaderAttempts)
	require.Len(t, got, 2, "the well-formed entries are still listed")
	require.Equal(t, "a/gone", got[0].EventID)

	// A copy without Relay-Dead-At is dated by JetStream's own timestamp.
	require.Equal(t, bare.Sequence, got[1].DLQSeq)
	require.False(t, got[1].DeadAt.IsZero())
	require.Equal(t, "no headers at all", string(rawDLQ(t, n.JS, bare.Sequence).Data))
	require.Equal(t, len("no headers at all"), got[1].Size)
}

func TestListRejectsAFilterThatWouldChangeTheSubject(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	for _, f := range []Filter{{Subscriber: "a.b"}, {Subscriber: "*"}, {Subscriber: ">"}, {Subscriber: "a b"}, {Reason: "nope"}, {Reason: "*"}} {
		_, err := List(testutil.Context(t), n.JS, f, 0)
		require.ErrorIs(t, err, ErrInvalidFilter, "filter %+v", f)
	}
}

func TestListWithoutTheDLQStreamFails(t *testing.T) {
	t.Parallel()
	n := testutil.StartNATS(t)
	_, err := List(testutil.Context(t), n.JS, Filter{}, 0)
	require.ErrorIs(t, err, jetstream.ErrStreamNotFound)
	require.Contains(t, err.Error(), "relay run")
}

// After starts a listing past a sequence, with the other filters and with
// Since judged on each entry; past the last entry nothing is listed.
func TestListAfter(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	seed(t, n.JS, [2]string{"a", "gone"}, [2]string{"b", "gone"}, [2]string{"a", "rejected"}, [2]string{"a", "gone"})
	ctx := testutil.Context(t)
	all, err := List(ctx, n.JS, Filter{}, 0)
	require.NoError(t, err)
	require.Len(t, all, 4)
	got, err := List(ctx, n.JS, Filter{Subscriber: "a", After: all[0].DLQSeq}, 0)
	require.NoError(t, err)
	require.Equal(t, []string{"a/rejected", "a/gone"}, eventIDs(got))
	got, err = List(ctx, n.JS, Filter{After: all[1].DLQSeq, Since: time.Now().Add(time.Hour)}, 0)
	require.NoError(t, err)
	require.Empty(t, got, "Since is judged on each entry")
	got, err = List(ctx, n.JS, Filter{After: all[3].DLQSeq}, 0)
	require.NoError(t, err)
	require.Empty(t, got)
	_, err = List(ctx, n.JS, Filter{Seqs: []uint64{1}, After: 1}, 0)
	require.ErrorIs(t, err, ErrInvalidFilter)
}
