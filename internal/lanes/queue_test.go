package lanes

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// The queue keeps its order through any mix of pushes and pops, and leaves
// nothing behind it in its array for the collector to keep alive.
func TestQueueKeepsOrderThroughPushesAndPops(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	s := &scheduler{}
	var want []uint64
	next := uint64(1)
	for range 100_000 {
		if len(want) == 0 || rng.IntN(100) < 52 {
			s.pushLocked(delivery{seq: next})
			want = append(want, next)
			next++
			continue
		}
		got := s.popFrontLocked()
		require.Equal(t, want[0], got.seq)
		want = want[1:]
	}
	require.Len(t, s.queue, len(want))
	for i, d := range s.queue {
		require.Equal(t, want[i], d.seq)
	}
	whole := s.buf[:cap(s.buf)]
	live := 0
	for _, d := range whole {
		if d.seq != 0 {
			live++
		}
	}
	require.Equal(t, len(want), live, "only the queued deliveries are left in the array")
}

// A steady backlog (as many pushed as popped) reuses the queue's array
// instead of making a new one every few hundred messages.
func TestQueueWithASteadyBacklogAllocatesNothing(t *testing.T) {
	s := &scheduler{}
	for i := range 500 {
		s.pushLocked(delivery{seq: uint64(i + 1)})
	}
	allocs := testing.AllocsPerRun(10, func() {
		for range 10_000 {
			d := s.popFrontLocked()
			s.pushLocked(d)
		}
	})
	require.Zero(t, allocs)
	require.Len(t, s.queue, 500)
}
