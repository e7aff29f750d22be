package main

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/overflow"
	"github.com/relay-dev/relay/internal/retry"
	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/internal/timeliness"
	"github.com/relay-dev/relay/streams"
)

// `relay sub rm` drops everything of the removed subscriber on purpose and
// says how much: queued on its lane, waiting in its overflow, parked for a
// retry, scheduled until its due time; and its deadline counts. A
// lane-mate's deliveries and counts stay.
func TestSubRmDropsQueuedAndParkedDeliveries(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	ctx := testutil.Context(t)
	mustRelay(t, "sub", "add", "gone", "--nats", n.URL, "--url", "https://example.com/", "--secret", testSecret)
	pub := func(subject string, count int) {
		for range count {
			_, err := n.JS.PublishMsg(ctx, &nats.Msg{Subject: subject, Data: []byte(`{}`)})
			require.NoError(t, err)
		}
	}
	pub("deliveries.s01.gone", 3)
	pub("deliveries.s01.mate", 1)
	require.NoError(t, overflow.Put(ctx, n.JS, "gone", []byte(`{}`), nil, 1))
	require.NoError(t, retry.Park(ctx, n.JS, "gone", []byte(`{}`), nil, time.Now().Add(time.Hour), "park-1"))
	require.NoError(t, retry.Park(ctx, n.JS, "gone", []byte(`{}`), nil, time.Now().Add(time.Hour), "park-2"))
	_, err := n.JS.PublishMsg(ctx, retry.Scheduled("gone", []byte(`{}`), nil, time.Now().Add(time.Hour)), jetstream.WithMsgID("evt.gone"))
	require.NoError(t, err)
	kv, err := n.JS.KeyValue(ctx, streams.TimelinessBucket)
	require.NoError(t, err)
	counts := timeliness.NewRecorder(kv)
	counts.Met("gone")
	counts.Missed("mate")
	require.NoError(t, counts.Flush(ctx))

	count := func(stream, filter string) uint64 {
		s, err := n.JS.Stream(ctx, stream)
		require.NoError(t, err)
		info, err := s.Info(ctx, jetstream.WithSubjectFilter(filter))
		require.NoError(t, err)
		var c uint64
		for _, v := range info.State.Subjects {
			c += v
		}
		return c
	}
	// Deliveries wait: nothing is removed without --yes, as relay dlq purge.
	code, out, errOut := relayCmd(t, "sub", "rm", "gone", "--nats", n.URL)
	requireOneLine(t, code, errOut, exitUsage, "subscriber gone has 7 deliveries waiting (4 queued, 2 parked, 1 scheduled): add --yes")
	require.Empty(t, out)
	require.Equal(t, "https://example.com/", stored(t, n, "gone").URL, "the subscriber stays")
	require.Equal(t, uint64(4), count(streams.Deliveries, "deliveries.*.gone"), "its deliveries stay")

	out = mustRelay(t, "sub", "rm", "gone", "--nats", n.URL, "--yes")
	require.True(t, strings.Contains(out, "4 queued, 2 parked and 1 scheduled deliveries dropped"), out)
	c, err := timeliness.Read(ctx, kv, "gone")
	require.NoError(t, err)
	require.Zero(t, c, "the removed subscriber's deadline counts")
	c, err = timeliness.Read(ctx, kv, "mate")
	require.NoError(t, err)
	require.Equal(t, timeliness.Counts{Missed: 1}, c, "a lane-mate's deadline counts")

	require.Zero(t, count(streams.Deliveries, "deliveries.*.gone"))
	require.Zero(t, count(streams.Retries, "retries.>"))
	require.Equal(t, uint64(1), count(streams.Deliveries, "deliveries.*.mate"))
}

// On a cluster whose relays predate the relay_timeliness bucket, `relay sub
// rm` removes the subscriber all the same, with nothing to warn about.
func TestSubRmWithoutTheTimelinessBucket(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	require.NoError(t, n.JS.DeleteKeyValue(testutil.Context(t), streams.TimelinessBucket))
	mustRelay(t, "sub", "add", "gone", "--nats", n.URL, "--url", "https://example.com/", "--secret", testSecret)
	code, out, stderr := relayCmd(t, "sub", "rm", "gone", "--nats", n.URL)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "subscriber gone removed")
	require.Empty(t, stderr)
}
