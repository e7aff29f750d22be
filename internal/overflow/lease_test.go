package overflow_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/overflow"
	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

// TestRefillsOfSeveralRelaysDoNotOverlap: three relays refilling one
// overflow at once, each as often as it can, publish every message once:
// the subscription on the lane's subject sees every publish, those the
// stream would drop as duplicates included, so none was read twice.
func TestRefillsOfSeveralRelaysDoNotOverlap(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	ctx := testutil.Context(t)
	const count = 3000
	fill(t, n.JS, "a", count, 1)
	sub, err := n.Conn.SubscribeSync("deliveries.s01.a")
	require.NoError(t, err)

	var wg sync.WaitGroup
	var mu sync.Mutex
	moved, leased := 0, 0
	var failed error
	for range 3 {
		r, err := overflow.NewRefiller(ctx, n.JS, nil)
		require.NoError(t, err)
		wg.Go(func() {
			var next uint64
			for {
				m, nx, more, err := r.Refill(ctx, "a", "deliveries.s01.a", next, 100)
				mu.Lock()
				moved += m
				switch {
				case errors.Is(err, overflow.ErrLeased):
					leased++
				case err != nil:
					failed = err
				}
				mu.Unlock()
				next = nx
				if !more || err != nil && !errors.Is(err, overflow.ErrLeased) {
					return
				}
				for r.Busy("a") { // what a lane does: no refill while busy
					time.Sleep(5 * time.Millisecond)
				}
			}
		})
	}
	wg.Wait()
	require.NoError(t, failed)
	require.Equal(t, count, moved)
	seen := make(map[string]bool, count)
	for range count {
		m, err := sub.NextMsg(5e9)
		require.NoError(t, err)
		seq := m.Header.Get(streams.HeaderOverflowSeq)
		require.False(t, seen[seq], "overflow sequence %s republished twice", seq)
		seen[seq] = true
	}
	require.NoError(t, n.Conn.Flush())
	pending, _, err := sub.Pending()
	require.NoError(t, err)
	require.Zero(t, pending, "publishes beyond one a message")
	t.Logf("%d messages brought back by three relays; %d refills found another relay at it", count, leased)
}

// TestRefillLeaseOfAnotherRelay: a refill leaves alone an overflow whose
// lease another relay holds, and asks again only after a while; a lease
// given back is taken at once, and one whose holder died (never given
// back) goes with the bucket's TTL, after which a relay takes it.
func TestRefillLeaseOfAnotherRelay(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	ctx := testutil.Context(t)
	fill(t, n.JS, "a", 10, 1)
	kv, err := n.JS.KeyValue(ctx, streams.RefillBucket)
	require.NoError(t, err)
	rev, err := kv.Create(ctx, "a", []byte("other-relay"))
	require.NoError(t, err)

	r, err := overflow.NewRefiller(ctx, n.JS, nil)
	require.NoError(t, err)
	_, next, more, err := r.Refill(ctx, "a", "deliveries.s01.a", 0, 5)
	require.ErrorIs(t, err, overflow.ErrLeased)
	require.True(t, more)
	require.Zero(t, next)
	require.True(t, r.Busy("a"), "a lease found taken is not asked for again at once")
	msgs, err := overflow.Read(ctx, n.Conn, "a", 0, 100)
	require.NoError(t, err)
	require.Len(t, msgs, 10, "nothing read, nothing purged")

	// The other relay gives it back: taken once Busy has passed.
	_, err = kv.Update(ctx, "a", nil, rev)
	require.NoError(t, err)
	testutil.Eventually(t, func() bool { return !r.Busy("a") }, "busy for good")
	moved, _, _, err := r.Refill(ctx, "a", "deliveries.s01.a", 0, 5)
	require.NoError(t, err)
	require.Equal(t, 5, moved)
	entry, err := kv.Get(ctx, "a")
	require.NoError(t, err)
	require.Empty(t, entry.Value(), "given back after the refill")

	// A relay that dies holding it: the lease goes with the bucket's TTL.
	_, err = kv.Update(ctx, "a", []byte("dead-relay"), entry.Revision())
	require.NoError(t, err)
	require.True(t, testutil.Within(3*streams.RefillLeaseTTL, func() bool {
		moved, _, _, err = r.Refill(ctx, "a", "deliveries.s01.a", 0, 5)
		return err == nil
	}), "the lease of a dead relay was never taken over")
	require.Equal(t, 5, moved)
}
