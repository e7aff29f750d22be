package lanes_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/deadletter"
	"github.com/relay-dev/relay/internal/testutil"
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
