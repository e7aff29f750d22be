package testutil_test

import (
	"testing"

	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

func TestStartRelayNATSCreatesTheStreams(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	ctx := testutil.Context(t)
	for _, name := range []string{streams.Events, streams.Deliveries, streams.DLQ} {
		s, err := n.JS.Stream(ctx, name)
		if err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
		want, err := streams.Config(name)
		if err != nil {
			t.Fatal(err)
		}
		got := s.CachedInfo().Config
		if got.Retention != want.Retention || got.Discard != want.Discard || got.MaxMsgSize != want.MaxMsgSize {
			t.Fatalf("stream %s: config %+v, want %+v", name, got, want)
		}
	}
	if _, err := n.JS.KeyValue(ctx, streams.SubscribersBucket); err != nil {
		t.Fatalf("bucket: %v", err)
	}
	// A second Ensure, as a second relay would run it, changes nothing.
	if err := streams.Ensure(ctx, n.JS, streams.Options{}); err != nil {
		t.Fatalf("second ensure: %v", err)
	}
}

func TestStartRelayClusterReplicatesTheStreams(t *testing.T) {
	t.Parallel()
	c := testutil.StartRelayCluster(t)
	_, js := c.ConnectJS(t, 2)
	s, err := js.Stream(testutil.Context(t), streams.Deliveries)
	if err != nil {
		t.Fatal(err)
	}
	if r := s.CachedInfo().Config.Replicas; r != 3 {
		t.Fatalf("DELIVERIES has %d replicas, want 3", r)
	}
}
