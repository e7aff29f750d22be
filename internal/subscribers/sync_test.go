package subscribers_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/internal/testutil"
)

// TestSyncSeesEveryChangeStoredBeforeIt proves that after Sync returns, the
// view holds every subscriber whose Put returned before Sync was called,
// even one written a moment earlier through another connection, which the
// watch may not have delivered yet. On a cluster the bucket has three
// replicas, the writer and the view are connected to different nodes, and
// Sync asks the stream's leader.
func TestSyncSeesEveryChangeStoredBeforeIt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		start func(t *testing.T) (view, writer jetstream.JetStream)
	}{
		{"one server", func(t *testing.T) (jetstream.JetStream, jetstream.JetStream) {
			n := testutil.StartRelayNATS(t)
			js, err := jetstream.New(testutil.Connect(t, n.URL))
			require.NoError(t, err)
			return n.JS, js
		}},
		{"three-node cluster, R3 bucket", func(t *testing.T) (jetstream.JetStream, jetstream.JetStream) {
			c := testutil.StartRelayCluster(t)
			_, view := c.ConnectJS(t, 0)
			_, writer := c.ConnectJS(t, 2)
			return view, writer
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			viewJS, writerJS := tc.start(t)
			ctx := testutil.Context(t)
			viewStore, err := subscribers.Open(ctx, viewJS)
			require.NoError(t, err)
			watchCtx, cancel := context.WithCancel(ctx)
			live, err := viewStore.Watch(watchCtx)
			require.NoError(t, err)
			t.Cleanup(func() { cancel(); <-live.Done() })

			writer, err := subscribers.Open(ctx, writerJS)
			require.NoError(t, err)
			missedWithoutSync := 0
			for i := range 100 {
				id := fmt.Sprintf("s%03d", i)
				require.NoError(t, writer.Put(ctx, subscribers.Subscriber{ID: id, URL: "https://example.com/", Secrets: []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}}))
				if _, ok := live.Get(id); !ok {
					missedWithoutSync++
				}
				require.NoError(t, live.Sync(ctx))
				_, ok := live.Get(id)
				require.True(t, ok, "%s not in the view after Sync", id)
			}
			t.Logf("the view lagged behind a Put %d times in 100; Sync caught up every time", missedWithoutSync)
		})
	}
}
