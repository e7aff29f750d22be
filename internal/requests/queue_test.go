package requests

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestGateQueueHandsTheSlotToItsGrant: Queue takes a free slot at once; on
// a full gate it queues with no goroutine waiting, takes its key's turn
// among Acquire's waiters, and hands the freed slot to its grant; a request
// withdrawn before its turn leaves no trace, and one withdrawn after it
// says so. No slot is lost or leaked.
func TestGateQueueHandsTheSlotToItsGrant(t *testing.T) {
	t.Parallel()
	g := NewGate(1)
	grants := make(chan func(), 4)
	grant := func(release func()) { grants <- release }

	first, cancel := g.Queue("a", grant)
	require.NotNil(t, first, "a free slot is taken at once")
	require.False(t, cancel(), "nothing queued to withdraw")

	// Full: "b" queues behind an Acquire waiter of "c", and "d" withdraws.
	w := newWaiters(t, g)
	w.start(context.Background(), "c")
	none, cancelB := g.Queue("b", grant)
	require.Nil(t, none)
	none, cancelD := g.Queue("d", grant)
	require.Nil(t, none)
	require.Equal(t, 3, g.Waiting())
	require.True(t, cancelD(), "withdrawn before its turn")
	require.False(t, cancelD(), "withdrawn once")
	require.Equal(t, 2, g.Waiting())

	first()
	c := <-w.grants
	require.Equal(t, "c", c.key, "the Acquire waiter came first")
	require.Empty(t, grants, "b's turn is next")
	c.release()
	b := <-grants
	require.False(t, cancelB(), "the slot was given already")
	require.Equal(t, 1, g.InFlight())
	b()
	require.Empty(t, grants, "d withdrew: no grant")
	requireEmpty(t, g)
	requireSlots(t, g, 1)
}
