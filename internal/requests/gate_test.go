package requests

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// testEpoch is a fixed time long past, for a deadline that has already
// passed whatever the clock says.
var testEpoch = time.Unix(1_700_000_000, 0)

// waitUntil yields until cond holds. It is how a test knows that a goroutine
// has reached a state (queued in the gate, say) without sleeping; a cond that
// never holds is caught by the test binary's own timeout.
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	for !cond() {
		if t.Context().Err() != nil {
			t.Fatal("test ended while waiting")
		}
		runtime.Gosched()
	}
}

// grant is one slot handed to a waiter started by startWaiter.
type grant struct {
	key     string
	n       int // the waiter's arrival number within its key
	release func()
}

// waiters starts goroutines that wait in a gate and report their slots, so a
// test can hand slots out one by one and see who gets each.
type waiters struct {
	t      *testing.T
	g      *Gate
	grants chan grant
	errs   chan error
	wg     sync.WaitGroup
	count  map[string]int
}

func newWaiters(t *testing.T, g *Gate) *waiters {
	t.Helper()
	w := &waiters{t: t, g: g, grants: make(chan grant, 1024), errs: make(chan error, 1024), count: map[string]int{}}
	t.Cleanup(w.wg.Wait)
	return w
}

// start queues one waiter for key with ctx and returns once it is queued in
// the gate, so that the order of start calls is the order of arrival. The
// gate must be full.
func (w *waiters) start(ctx context.Context, key string) {
	w.t.Helper()
	n := w.count[key]
	w.count[key]++
	before := w.g.Waiting()
	w.wg.Go(func() {
		release, err := w.g.Acquire(ctx, key)
		if err != nil {
			w.errs <- err
			return
		}
		w.grants <- grant{key: key, n: n, release: release}
	})
	waitUntil(w.t, func() bool { return w.g.Waiting() == before+1 })
}

// requireEmpty checks that the gate's bookkeeping holds nothing for keys
// that no longer wait.
func requireEmpty(t *testing.T, g *Gate) {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	require.Zero(t, g.waiting)
	require.Empty(t, g.keys)
	require.Zero(t, g.turns.Len())
}

// requireSlots checks that exactly want slots can be taken, then gives them
// back: no slot was lost or leaked.
func requireSlots(t *testing.T, g *Gate, want int) {
	t.Helper()
	var releases []func()
	for range want {
		release, ok := g.TryAcquire()
		require.True(t, ok, "slot %d of %d", len(releases)+1, want)
		releases = append(releases, release)
	}
	_, ok := g.TryAcquire()
	require.False(t, ok, "no slot beyond the limit")
	for _, release := range releases {
		release()
	}
	require.Zero(t, g.InFlight())
}

func TestGateRoundRobin(t *testing.T) {
	t.Parallel()

	type arrival struct {
		key string
		n   int
	}
	tests := []struct {
		name     string
		arrivals []arrival
		// requeue lists keys that queue one more waiter each time one of
		// theirs is served, as a subscriber with a steady trickle does.
		requeue []string
		want    []string
	}{
		{
			name:     "one deep key and three keys with one waiter each",
			arrivals: []arrival{{"big", 100}, {"a", 1}, {"b", 1}, {"c", 1}},
			want:     []string{"big", "a", "b", "c", "big", "big", "big"},
		},
		{
			name:     "keys that keep coming back alternate with a deep backlog",
			arrivals: []arrival{{"big", 1000}, {"a", 1}, {"b", 1}},
			requeue:  []string{"a", "b"},
			want:     []string{"big", "a", "b", "big", "a", "b", "big", "a", "b", "big", "a", "b"},
		},
		{
			name:     "a key with one waiter behind a deep key is served second",
			arrivals: []arrival{{"big", 1000}, {"small", 1}},
			requeue:  []string{"small"},
			want:     []string{"big", "small", "big", "small", "big", "small", "big", "small"},
		},
		{
			name:     "two deep keys alternate",
			arrivals: []arrival{{"x", 20}, {"y", 20}},
			want:     []string{"x", "y", "x", "y", "x", "y", "x", "y"},
		},
		{
			name:     "a key's turn is where its first waiter arrived",
			arrivals: []arrival{{"x", 1}, {"y", 1}, {"x", 2}, {"z", 1}},
			want:     []string{"x", "y", "z", "x", "x"},
		},
		{
			name:     "one key alone is first come first served",
			arrivals: []arrival{{"only", 5}},
			want:     []string{"only", "only", "only", "only", "only"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g := NewGate(1)
			hold, ok := g.TryAcquire()
			require.True(t, ok)
			ctx, cancel := context.WithCancel(t.Context())
			w := newWaiters(t, g)
			for _, a := range tt.arrivals {
				for range a.n {
					w.start(ctx, a.key)
				}
			}

			var got []string
			last := map[string]int{}
			for range tt.want {
				hold()
				gr := <-w.grants
				got = append(got, gr.key)
				if prev, seen := last[gr.key]; seen {
					require.Greater(t, gr.n, prev, "a key's waiters are served in arrival order")
				}
				last[gr.key] = gr.n
				for _, key := range tt.requeue {
					if key == gr.key {
						w.start(ctx, key)
					}
				}
				hold = gr.release
			}
			require.Equal(t, tt.want, got)

			// The rest give up; the test still holds the one slot.
			cancel()
			w.wg.Wait()
			require.Equal(t, 1, g.InFlight())
			hold()
			requireEmpty(t, g)
			requireSlots(t, g, 1)
		})
	}
}

func TestGateCancelledWaiterGivesUpItsPlace(t *testing.T) {
	t.Parallel()

	type arrival struct {
		key    string
		cancel bool
	}
	tests := []struct {
		name     string
		arrivals []arrival
		want     []string
	}{
		{
			name:     "the front key",
			arrivals: []arrival{{key: "a", cancel: true}, {key: "b"}, {key: "c"}},
			want:     []string{"b", "c"},
		},
		{
			name:     "a key in the middle",
			arrivals: []arrival{{key: "a"}, {key: "b", cancel: true}, {key: "c"}},
			want:     []string{"a", "c"},
		},
		{
			name:     "the back key",
			arrivals: []arrival{{key: "a"}, {key: "b"}, {key: "c", cancel: true}},
			want:     []string{"a", "b"},
		},
		{
			name:     "one of a key's waiters keeps the key's turn",
			arrivals: []arrival{{key: "a", cancel: true}, {key: "b"}, {key: "a"}},
			want:     []string{"a", "b"},
		},
		{
			name:     "every waiter",
			arrivals: []arrival{{key: "a", cancel: true}, {key: "a", cancel: true}, {key: "b", cancel: true}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g := NewGate(1)
			hold, ok := g.TryAcquire()
			require.True(t, ok)
			stay, stop := context.WithCancel(t.Context())
			defer stop()
			leave, giveUp := context.WithCancel(t.Context())
			defer giveUp()

			w := newWaiters(t, g)
			cancelled := 0
			for _, a := range tt.arrivals {
				ctx := stay
				if a.cancel {
					ctx = leave
					cancelled++
				}
				w.start(ctx, a.key)
			}
			giveUp()
			for range cancelled {
				err := <-w.errs
				require.ErrorIs(t, err, ErrNotAcquired)
				require.ErrorIs(t, err, context.Canceled)
			}
			require.Equal(t, len(tt.want), g.Waiting())
			require.Equal(t, 1, g.InFlight(), "giving up takes no slot")

			var got []string
			for range tt.want {
				hold()
				gr := <-w.grants
				got = append(got, gr.key)
				hold = gr.release
			}
			require.Equal(t, tt.want, got)
			hold()
			requireEmpty(t, g)
			requireSlots(t, g, 1)
		})
	}
}

func TestGateAcquireWithEndedContext(t *testing.T) {
	t.Parallel()

	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	expired, cancelExpired := context.WithDeadline(t.Context(), testEpoch)
	defer cancelExpired()

	tests := []struct {
		name string
		ctx  context.Context
		want error
	}{
		{name: "cancelled", ctx: cancelled, want: context.Canceled},
		{name: "deadline passed", ctx: expired, want: context.DeadlineExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g := NewGate(2)
			release, err := g.Acquire(tt.ctx, "a")
			require.ErrorIs(t, err, ErrNotAcquired)
			require.ErrorIs(t, err, tt.want)
			require.Nil(t, release)
			require.Zero(t, g.InFlight(), "a caller that has given up starts no request, even with a slot free")
			requireSlots(t, g, 2)
		})
	}
}

func TestGateUnlimited(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name string
		gate *Gate
	}{
		{name: "zero", gate: NewGate(0)},
		{name: "negative", gate: NewGate(-5)},
		{name: "zero value", gate: &Gate{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g := tt.gate
			require.Zero(t, g.Limit())
			const n = 10_000
			releases := make([]func(), 0, n+1)
			for i := range n {
				release, err := g.Acquire(t.Context(), "k"+strconv.Itoa(i%10))
				require.NoError(t, err)
				releases = append(releases, release)
			}
			release, ok := g.TryAcquire()
			require.True(t, ok)
			releases = append(releases, release)
			require.Equal(t, n+1, g.InFlight())
			require.Zero(t, g.Waiting())
			for _, release := range releases {
				release()
			}
			require.Zero(t, g.InFlight())
			requireEmpty(t, g)
		})
	}
}

func TestGateReleaseIsIdempotent(t *testing.T) {
	t.Parallel()

	t.Run("free slot", func(t *testing.T) {
		t.Parallel()
		g := NewGate(2)
		release, err := g.Acquire(t.Context(), "a")
		require.NoError(t, err)
		release()
		release()
		require.Zero(t, g.InFlight())
		requireSlots(t, g, 2)
	})

	t.Run("slot handed to a waiter", func(t *testing.T) {
		t.Parallel()
		g := NewGate(1)
		release, ok := g.TryAcquire()
		require.True(t, ok)
		w := newWaiters(t, g)
		w.start(t.Context(), "b")
		release()
		gr := <-w.grants
		release() // must not free the slot b now holds
		require.Equal(t, 1, g.InFlight())
		_, ok = g.TryAcquire()
		require.False(t, ok)
		gr.release()
		requireSlots(t, g, 1)
	})
}

func TestGateTryAcquire(t *testing.T) {
	t.Parallel()

	g := NewGate(2)
	require.Equal(t, 2, g.Limit())
	r1, ok := g.TryAcquire()
	require.True(t, ok)
	r2, ok := g.TryAcquire()
	require.True(t, ok)
	_, ok = g.TryAcquire()
	require.False(t, ok)

	w := newWaiters(t, g)
	w.start(t.Context(), "a")
	r1()
	gr := <-w.grants
	_, ok = g.TryAcquire()
	require.False(t, ok, "a released slot goes to the waiter, not to whoever asks next")
	r2()
	gr.release()
	requireEmpty(t, g)
	requireSlots(t, g, 2)
}

// TestGateSlotHandedToAWaiterGivingUpIsPassedOn covers the race where a
// slot is handed to a waiter just as its context ends and the waiter sees the
// end first: the slot must go on to the next waiter, not vanish. The test
// cancels the waiter and hands it the slot while holding the gate's lock, so
// that both are ready when it wakes, and repeats until the waiter has taken
// the cancellation side at least once (each round has even odds or better).
func TestGateSlotHandedToAWaiterGivingUpIsPassedOn(t *testing.T) {
	t.Parallel()

	g := NewGate(1)
	passedOn := 0
	for round := 0; passedOn == 0; round++ {
		require.Less(t, round, 1000, "the waiter never saw its cancellation first")
		_, ok := g.TryAcquire()
		require.True(t, ok)
		leave, giveUp := context.WithCancel(t.Context())
		w := newWaiters(t, g)
		w.start(leave, "a")
		w.start(t.Context(), "b")

		g.mu.Lock()
		giveUp()
		runtime.Gosched()
		// Give the held slot back by hand, as its release func would but
		// under the lock already held: it goes to a.
		g.releaseLocked()
		g.mu.Unlock()

		// a either gets the slot and gives it back, or gives up and passes
		// it on; b gets it next either way.
		var aDone, bDone bool
		for !aDone || !bDone {
			select {
			case err := <-w.errs:
				require.ErrorIs(t, err, context.Canceled)
				aDone = true
				passedOn++
			case gr := <-w.grants:
				gr.release()
				if gr.key == "a" {
					aDone = true
				} else {
					bDone = true
				}
			}
		}
		w.wg.Wait()
		requireEmpty(t, g)
		requireSlots(t, g, 1)
	}
}

func TestGateNeverExceedsLimit(t *testing.T) {
	t.Parallel()

	tests := []struct {
		limit, keys, goroutines, rounds int
	}{
		{limit: 1, keys: 8, goroutines: 64, rounds: 50},
		{limit: 4, keys: 40, goroutines: 200, rounds: 50},
		{limit: 32, keys: 100, goroutines: 400, rounds: 25},
	}
	for _, tt := range tests {
		t.Run("limit "+strconv.Itoa(tt.limit), func(t *testing.T) {
			t.Parallel()
			g := NewGate(tt.limit)
			var inFlight, most atomic.Int64
			var wg sync.WaitGroup
			for i := range tt.goroutines {
				// Key i%keys has a share of the goroutines that differs
				// from key to key, from one to many.
				key := "sub-" + strconv.Itoa(i*i%tt.keys)
				wg.Go(func() {
					for range tt.rounds {
						release, err := g.Acquire(t.Context(), key)
						if err != nil {
							t.Error(err)
							return
						}
						n := inFlight.Add(1)
						for {
							m := most.Load()
							if n <= m || most.CompareAndSwap(m, n) {
								break
							}
						}
						runtime.Gosched()
						inFlight.Add(-1)
						release()
					}
				})
			}
			wg.Wait()
			require.LessOrEqual(t, most.Load(), int64(tt.limit))
			require.Positive(t, most.Load())
			require.Zero(t, g.InFlight())
			requireEmpty(t, g)
			requireSlots(t, g, tt.limit)
		})
	}
}

// TestGateCancellationLeavesNoTrace races cancellations against grants and
// releases from many goroutines (run it with -race): whatever the
// interleaving, no slot is lost or leaked and the queues end empty.
func TestGateCancellationLeavesNoTrace(t *testing.T) {
	t.Parallel()

	const (
		limit      = 4
		goroutines = 300
		rounds     = 40
		keys       = 25
	)
	g := NewGate(limit)
	var inFlight, over, got, gaveUp atomic.Int64

	// Cancellers end contexts at whatever moment they get to them: before
	// the waiter queues, while it waits, as its slot is handed over, or
	// after it holds one.
	cancels := make(chan context.CancelFunc, goroutines)
	var cancellers sync.WaitGroup
	for range 8 {
		cancellers.Go(func() {
			for cancel := range cancels {
				cancel()
			}
		})
	}

	var wg sync.WaitGroup
	for i := range goroutines {
		key := "sub-" + strconv.Itoa(i%keys)
		wg.Go(func() {
			for r := range rounds {
				ctx, cancel := context.WithCancel(t.Context())
				if (i+r)%3 != 0 {
					cancels <- cancel
				}
				release, err := g.Acquire(ctx, key)
				if err != nil {
					if !assertNotAcquired(t, err) {
						cancel()
						return
					}
					gaveUp.Add(1)
					cancel()
					continue
				}
				got.Add(1)
				if inFlight.Add(1) > limit {
					over.Add(1)
				}
				runtime.Gosched()
				inFlight.Add(-1)
				release()
				if r%2 == 0 {
					release()
				}
				cancel()
			}
		})
	}
	wg.Wait()
	close(cancels)
	cancellers.Wait()

	t.Logf("acquired %d, gave up %d", got.Load(), gaveUp.Load())
	require.Equal(t, int64(goroutines*rounds), got.Load()+gaveUp.Load())
	require.Zero(t, over.Load(), "never more than the limit in flight")
	require.Zero(t, g.InFlight())
	requireEmpty(t, g)
	requireSlots(t, g, limit)
}

// assertNotAcquired reports a failed Acquire whose error is not a
// cancellation; it may be called from any goroutine.
func assertNotAcquired(t *testing.T, err error) bool {
	t.Helper()
	ok := errors.Is(err, ErrNotAcquired) && errors.Is(err, context.Canceled)
	if !ok {
		t.Errorf("Acquire: %v", err)
	}
	return ok
}

func BenchmarkGate(b *testing.B) {
	b.Run("free slot", func(b *testing.B) {
		g := NewGate(1 << 30)
		b.ReportAllocs()
		for b.Loop() {
			release, err := g.Acquire(b.Context(), "a")
			if err != nil {
				b.Fatal(err)
			}
			release()
		}
	})

	b.Run("unlimited", func(b *testing.B) {
		g := NewGate(0)
		b.ReportAllocs()
		for b.Loop() {
			release, err := g.Acquire(b.Context(), "a")
			if err != nil {
				b.Fatal(err)
			}
			release()
		}
	})

	// Contended: far more goroutines than slots, over many keys, so that
	// most Acquires queue and most releases hand a slot over.
	for _, limit := range []int{8, 256} {
		b.Run("contended limit "+strconv.Itoa(limit), func(b *testing.B) {
			g := NewGate(limit)
			var next atomic.Int64
			b.ReportAllocs()
			b.SetParallelism(64)
			b.RunParallel(func(pb *testing.PB) {
				key := "sub-" + strconv.FormatInt(next.Add(1)%1000, 10)
				for pb.Next() {
					release, err := g.Acquire(context.Background(), key)
					if err != nil {
						b.Error(err)
						return
					}
					release()
				}
			})
		})
	}
}
