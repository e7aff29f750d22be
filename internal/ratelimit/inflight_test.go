package ratelimit

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/relay-dev/relay/internal/clock"
	"github.com/relay-dev/relay/internal/testutil"
)

// TestInFlightTakesNoSubscriberLock: the lanes ask InFlight under their
// scheduler's lock, so it must not wait for the subscriber's, which
// Observe holds across its compare-and-set (a KV round trip, retried). With
// the subscriber's lock held, as by an Observe on its way to the bucket,
// InFlight still answers, and with the share the window degraded to.
func TestInFlightTakesNoSubscriberLock(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	s, err := NewShared(testutil.Context(t), n.JS, Options{Clock: clock.NewFake(time.Now()), CalibrateEvery: -1})
	if err != nil {
		t.Fatalf("NewShared: %v", err)
	}
	const id = "in-flight"
	sub := s.subscriber(id)
	sub.mu.Lock()
	defer sub.mu.Unlock()
	// 45 % failures at 1,000/s for 10 s: degraded to DegradeFloor (see
	// TestWindowDegradesAndRecovers), without opening the circuit.
	rng := rand.New(rand.NewPCG(55, 2))
	for i := range 10_000 {
		s.count(sub, Limit{}, outcome(rng.Float64() < 0.45), s.epoch.Add(time.Duration(i)*time.Millisecond))
	}
	got := make(chan int, 1)
	go func() { got <- s.InFlight(id, 16) }()
	select {
	case n := <-got:
		if n != 4 {
			t.Fatalf("InFlight: %d of 16, want DegradeFloor's 4", n)
		}
	case <-testutil.Context(t).Done():
		t.Fatal("InFlight waited for the subscriber's lock")
	}
}

// outcome is a failure when failed, else a success.
func outcome(failed bool) Result { return Result{Failure: failed, Success: !failed} }

// TestInFlightRecoversWithoutTraffic: a subscriber degraded by failures
// that is then sent nothing (its requests held elsewhere, its circuit
// open) recovers by time alone: InFlight reads it a whole window and ten
// buckets after its last outcome as all of --max-in-flight.
func TestInFlightRecoversWithoutTraffic(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	fake := clock.NewFake(time.Now())
	s, err := NewShared(testutil.Context(t), n.JS, Options{Clock: fake, CalibrateEvery: -1})
	if err != nil {
		t.Fatalf("NewShared: %v", err)
	}
	const id = "quiet"
	sub := s.subscriber(id)
	rng := rand.New(rand.NewPCG(55, 2))
	sub.mu.Lock()
	for i := range 10_000 {
		s.count(sub, Limit{}, outcome(rng.Float64() < 0.45), s.epoch.Add(time.Duration(i)*time.Millisecond))
	}
	sub.mu.Unlock()
	fake.Advance(10 * time.Second)
	if got := s.InFlight(id, 16); got != 4 {
		t.Fatalf("degraded: %d of 16 in flight, want DegradeFloor's 4", got)
	}
	fake.Advance(2 * DefaultWindow)
	if got := s.InFlight(id, 16); got != 16 {
		t.Fatalf("%v without an outcome: %d of 16 in flight, want all", 2*DefaultWindow, got)
	}
}
