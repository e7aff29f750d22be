package ratelimit_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/clock"
	"github.com/relay-dev/relay/internal/ratelimit"
	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

// TestForgetFollowsTheSubscriberSet: 10,000 subscribers with a lease and a
// bucket entry each, then all removed: what this relay holds of them goes,
// but the entries that pause a subscriber now, which a subscriber added
// again under its id must still obey.
func TestForgetFollowsTheSubscriberSet(t *testing.T) {
	t.Parallel()
	const total, paused = 10_000, 10
	n := testutil.StartRelayNATS(t)
	ctx := testutil.Context(t)
	now := time.Now()
	s := newShared(t, n, clock.NewFake(now), ratelimit.Options{})
	id := func(i int) string { return fmt.Sprintf("sub-%05d", i) }
	for i := range total {
		st := ratelimit.State{Tokens: 1, At: now}
		if i < paused {
			st.PausedUntil = now.Add(time.Hour)
		}
		raw, err := json.Marshal(st)
		require.NoError(t, err)
		_, err = n.JS.PublishMsgAsync(&nats.Msg{Subject: "$KV." + streams.RateLimitBucket + "." + id(i), Data: raw})
		require.NoError(t, err)
		if i%1000 == 999 {
			<-n.JS.PublishAsyncComplete()
		}
	}
	<-n.JS.PublishAsyncComplete()
	testutil.Eventually(t, func() bool { return s.Stats().Watched == total }, "the watch holds %d entries", s.Stats().Watched)
	for i := range total {
		_, err := s.Reserve(ctx, id(i), ratelimit.Limit{})
		require.NoError(t, err)
	}
	require.Equal(t, total, s.Stats().Subscribers)

	s.Forget(func(string) bool { return false })
	st := s.Stats()
	require.Zero(t, st.Subscribers, "leases and flow state of removed subscribers")
	require.Equal(t, paused, st.Watched, "only the entries that pause a subscriber now are kept")
	d, err := s.Reserve(ctx, id(0), ratelimit.Limit{})
	require.NoError(t, err)
	require.Equal(t, ratelimit.Paused, d.Verdict, "a subscriber added again within its pause is held")
}
