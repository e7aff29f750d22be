package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/lanes"
	"github.com/relay-dev/relay/internal/testutil"
)

// TestOneAckWaitPerCluster: a relay started with another --ack-wait than
// the running relays' is refused, naming both; one started without it
// takes theirs; with every relay stopped, one started with another
// --ack-wait changes it for the cluster.
func TestOneAckWaitPerCluster(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	ctx := testutil.Context(t)
	use := func() lanes.AckWaitUse {
		u, err := lanes.AckWaitInUse(ctx, n.JS)
		require.NoError(t, err)
		return u
	}
	first := startRelay(t, n.URL, "--ack-wait", "10s")
	testutil.Eventually(t, func() bool { return use().Pulling }, "the first relay's lanes are not pulling")
	require.Equal(t, 10*time.Second, use().Wait)

	code, _, stderr := relayCmd(t, "run", "--nats", n.URL, "--metrics", "", "--lanes", "4", "--ack-wait", "20s")
	require.Equal(t, 2, code, stderr)
	require.Contains(t, stderr, "--ack-wait 20s: the relays running on this cluster use 10s")

	second := startRelay(t, n.URL)
	testutil.Eventually(t, func() bool {
		return strings.Contains(second.stderr.String(), "using the ack wait of the cluster's lane consumers") &&
			strings.Contains(second.stderr.String(), "ack_wait=10s")
	}, "the second relay did not take the cluster's ack wait: %s", second.stderr.String())
	require.Zero(t, first.stop(), first.stderr.String())
	require.Zero(t, second.stop(), second.stderr.String())
	require.Equal(t, 10*time.Second, use().Wait, "a relay without --ack-wait changed it")

	testutil.Eventually(t, func() bool { return !use().Pulling }, "pull requests of the stopped relays still wait")
	third := startRelay(t, n.URL, "--ack-wait", "20s")
	testutil.Eventually(t, func() bool { u := use(); return u.Wait == 20*time.Second && !u.Mixed && u.Pulling },
		"the cluster's ack wait is not 20s: %+v", use())
	require.Contains(t, third.stderr.String(), "changing the ack wait of the cluster's lane consumers")
}
