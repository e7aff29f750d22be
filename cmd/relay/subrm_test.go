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
	"github.com/relay-dev/relay/streams"
)

// `relay sub rm` drops everything of the removed subscriber on purpose and
// says how much: queued on its lane, waiting in its overflow, parked for a
// retry. A lane-mate's deliveries stay.
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
	require.NoError(t, retry.Park(ctx, n.JS, "gone", []byte(`{}`), nil, time.Now().Add(time.Hour), "park.1"))
	require.NoError(t, retry.Park(ctx, n.JS, "gone", []byte(`{}`), nil, time.Now().Add(time.Hour), "park.2"))

	out := mustRelay(t, "sub", "rm", "gone", "--nats", n.URL)
	require.True(t, strings.Contains(out, "4 queued and 2 parked deliveries dropped"), out)

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
	require.Zero(t, count(streams.Deliveries, "deliveries.*.gone"))
	require.Zero(t, count(streams.Retries, "retries.>"))
	require.Equal(t, uint64(1), count(streams.Deliveries, "deliveries.*.mate"))
}
