package lanes_test

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/deadletter"
	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

// TestRemovedDuringItsAttemptIsNoDeadLetter: relay sub rm lands while a
// delivery's attempt is on its way, and the receiver answers 400. A removal
// is never a dead letter: the delivery is dropped as the removal asked,
// counted as removed, with no DLQ copy (nor the alert one would raise).
func TestRemovedDuringItsAttemptIsNoDeadLetter(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sub := b.addSubscriber(t, "p", 0, 0)
	// A view of the bucket of its own, on the relay's server: once it has
	// the removal, the relay's has it as well, or within a moment, long
	// before the attempt's outcome is settled after the answer.
	ctx, cancel := context.WithCancel(context.Background())
	seen, err := b.store.Watch(ctx)
	require.NoError(t, err)
	t.Cleanup(func() {
		cancel()
		<-seen.Done()
	})
	b.arr.answer("p", func(_ int, w http.ResponseWriter) {
		if err := b.store.Delete(testutil.Context(t), "p"); err != nil {
			t.Error(err)
		}
		if err := seen.Sync(testutil.Context(t)); err != nil {
			t.Error(err)
		}
		w.WriteHeader(http.StatusBadRequest)
	})
	b.enqueue(t, sub, 4, 1)
	b.flush(t)
	b.startLanes(t, 4)
	testutil.Eventually(t, func() bool { return b.counter(t, "relay_deliveries_removed_total") == 1 },
		"the delivery of a removed subscriber was not removed")
	b.waitSettled(t)
	dead, err := deadletter.List(testutil.Context(t), b.n.JS, deadletter.Filter{}, 0)
	require.NoError(t, err)
	require.Empty(t, dead)
}

// TestStaleAbsenceNeverDropsALiveSubscriber: relay sub rm p, then sub add p
// again; a copy for p reaches a relay whose view lacks p and whose read of
// the bucket answers from before the add (a replica behind, here a reply
// held on the way). The relay must not settle the delivery on that answer
// (dropped as removed, or dead-lettered as unroutable): its view, brought
// up to date, holds p, and the delivery is sent.
func TestStaleAbsenceNeverDropsALiveSubscriber(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sub := b.addSubscriber(t, "p", 0, 0)
	require.NoError(t, b.store.Delete(testutil.Context(t), "p"))
	gate := testutil.StartGateProxy(t, strings.TrimPrefix(b.n.URL, "nats://"))
	nc := testutil.Connect(t, gate.URL())
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	b.relayJS = []jetstream.JetStream{js}
	b.startLanes(t, 4)

	// Hold what the relay's connection gets about p's key: the replies of
	// its reads, and its view's watch.
	key := []byte(streams.SubscribersBucket + ".p")
	held := make(chan struct{})
	var once sync.Once
	gate.Hold("p", func(frame []byte) bool {
		if !bytes.Contains(frame, key) {
			return false
		}
		once.Do(func() { close(held) })
		return true
	})
	b.enqueue(t, sub, 4, 1)
	b.flush(t)
	select {
	case <-held: // the relay read p's key: the answer is "removed"
	case <-testutil.Context(t).Done():
		t.Fatal("the relay never read the key of a subscriber it lacks")
	}
	b.put(t, subscribers.Subscriber{ID: "p"})
	gate.Release("p")

	testutil.Eventually(t, func() bool { return b.arr.count("p") == 1 }, "the delivery of p was not sent")
	b.waitSettled(t)
	require.Zero(t, b.counter(t, "relay_deliveries_removed_total"))
	dead, err := deadletter.List(testutil.Context(t), b.n.JS, deadletter.Filter{}, 0)
	require.NoError(t, err)
	require.Empty(t, dead)
}
