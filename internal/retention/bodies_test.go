package retention_test

import (
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/clock"
	"github.com/relay-dev/relay/internal/retention"
	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

// TestBodyKeeperKeepsWhatALaneMayNeed: BODIES keeps every body stored
// within BodySlack before the oldest delivery waiting on a lane, however
// long it waits; the deliveries in a subscriber's overflow (which carry
// their bodies) do not hold it; once the lanes are empty, what is older
// than BodySlack goes, and what is younger stays, by the server's clock
// when this host's is ahead.
func TestBodyKeeperKeepsWhatALaneMayNeed(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	ctx := testutil.Context(t)
	deliveries, err := n.JS.Stream(ctx, streams.Deliveries)
	require.NoError(t, err)
	_, err = deliveries.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable: "lane_s00", FilterSubject: "deliveries.s00.>", AckPolicy: jetstream.AckExplicitPolicy,
	})
	require.NoError(t, err)
	waiting, err := n.JS.Publish(ctx, "deliveries.s00.a", nil)
	require.NoError(t, err)
	_, err = n.JS.Publish(ctx, "deliveries.overflow.b", []byte("whole"))
	require.NoError(t, err)
	for seq := uint64(1); seq <= 5; seq++ {
		_, err := n.JS.Publish(ctx, streams.BodySubject(seq), []byte("body"))
		require.NoError(t, err)
	}
	bodies := func() uint64 {
		s, err := n.JS.Stream(ctx, streams.Bodies)
		require.NoError(t, err)
		return s.CachedInfo().State.Msgs
	}

	fake := clock.NewFake(time.Now())
	k, err := retention.NewBodyKeeper(retention.Config{JS: n.JS, Clock: fake})
	require.NoError(t, err)
	for _, later := range []time.Duration{0, time.Hour, 24 * time.Hour} {
		fake.Advance(later)
		below, err := retention.BodyPass(ctx, k)
		require.NoError(t, err)
		require.Zero(t, below, "%v later: a delivery waits on a lane", later)
		require.EqualValues(t, 5, bodies())
	}

	// The lanes empty, a day later by this host's clock: what is older
	// than the slack before the newest body goes, by the server's clock.
	require.NoError(t, deliveries.DeleteMsg(ctx, waiting.Sequence))
	below, err := retention.BodyPass(ctx, k)
	require.NoError(t, err)
	require.EqualValues(t, 5, below, "the newest body stays, whatever this host's clock says")
	require.EqualValues(t, 1, bodies())

	// A body stored within the slack stays: its deliveries may not be on
	// their lane yet.
	_, err = n.JS.Publish(ctx, streams.BodySubject(6), []byte("body"))
	require.NoError(t, err)
	k, err = retention.NewBodyKeeper(retention.Config{JS: n.JS})
	require.NoError(t, err)
	_, err = retention.BodyPass(ctx, k)
	require.NoError(t, err)
	require.EqualValues(t, 2, bodies())
}

// TestBodyKeeperMakesDeletedBodiesAgain: a pass that finds BODIES deleted
// makes it again with its definition, and two keepers doing so at once
// both succeed; the keeper then purges the new BODIES, whose sequences
// start over below what it purged of the old one.
func TestBodyKeeperMakesDeletedBodiesAgain(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	ctx := testutil.Context(t)
	fake := clock.NewFake(time.Now())
	k, err := retention.NewBodyKeeper(retention.Config{JS: n.JS, Clock: fake})
	require.NoError(t, err)
	for seq := uint64(1); seq <= 5; seq++ {
		_, err := n.JS.Publish(ctx, streams.BodySubject(seq), []byte("body"))
		require.NoError(t, err)
	}
	fake.Advance(time.Hour)
	below, err := retention.BodyPass(ctx, k)
	require.NoError(t, err)
	require.EqualValues(t, 5, below)

	require.NoError(t, n.JS.DeleteStream(ctx, streams.Bodies))
	other, err := retention.NewBodyKeeper(retention.Config{JS: n.JS, Clock: fake})
	require.NoError(t, err)
	var wg sync.WaitGroup
	for _, keeper := range []*retention.BodyKeeper{k, other} {
		wg.Go(func() {
			_, err := retention.BodyPass(ctx, keeper)
			assert.NoError(t, err)
		})
	}
	wg.Wait()
	s, err := n.JS.Stream(ctx, streams.Bodies)
	require.NoError(t, err)
	def, err := streams.Config(streams.Bodies)
	require.NoError(t, err)
	got := s.CachedInfo().Config
	require.Equal(t, def.Subjects, got.Subjects)
	require.Equal(t, def.Discard, got.Discard)
	require.Equal(t, def.MaxMsgsPerSubject, got.MaxMsgsPerSubject)
	require.Equal(t, def.AllowDirect, got.AllowDirect)

	for seq := uint64(6); seq <= 8; seq++ {
		_, err := n.JS.Publish(ctx, streams.BodySubject(seq), []byte("body"))
		require.NoError(t, err)
	}
	fake.Advance(time.Hour)
	below, err = retention.BodyPass(ctx, k)
	require.NoError(t, err)
	require.EqualValues(t, 3, below, "the new BODIES purged, below its own sequences")
}
