package fanout

import (
	"context"
	"testing"

	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/internal/testutil"
)

// TestChangeSignal: on a single server the fan-out learns of a change of
// the subscriber bucket from its subscription, and of nothing else; on a
// cluster there is no signal, and the fan-out syncs before each batch.
func TestChangeSignal(t *testing.T) {
	t.Parallel()
	t.Run("single server", func(t *testing.T) {
		t.Parallel()
		n := testutil.StartRelayNATS(t)
		// Without a deadline, as relay run's context is: the signal's flush
		// must bring its own.
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		sig := newChangeSignal(ctx, n.JS)
		if sig == nil {
			t.Fatal("no change signal on a single server")
		}
		t.Cleanup(sig.close)
		if sig.changed() {
			t.Fatal("changed before anything was written")
		}
		store, err := subscribers.Open(testutil.Context(t), n.JS)
		if err != nil {
			t.Fatal(err)
		}
		if err := store.Put(testutil.Context(t), subscribers.Subscriber{
			ID: "signalled", URL: "https://signalled.example/hook", Secrets: []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"},
		}); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, sig.changed, "a stored subscriber was not signalled")
		if sig.changed() {
			t.Fatal("still changed after the signal was drained")
		}
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		c := testutil.StartRelayCluster(t)
		_, js := c.ConnectJS(t, 0)
		if sig := newChangeSignal(testutil.Context(t), js); sig != nil {
			sig.close()
			t.Fatal("a change signal on a cluster, where messages of different servers are in no order")
		}
	})
}
