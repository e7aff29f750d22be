package ratelimit_test

import (
	"testing"
	"time"

	"github.com/relay-dev/relay/internal/ratelimit"
	"github.com/relay-dev/relay/internal/testutil"
)

// tripped has a open id's circuit with five failures in a row of a thin
// subscriber, and waits until every relay's watch shows it.
func tripped(t *testing.T, n *testutil.NATS, id string, l ratelimit.Limit, a *ratelimit.Shared, relays ...*ratelimit.Shared) ratelimit.State {
	t.Helper()
	for range 5 {
		observe(t, a, id, l, ratelimit.Result{Failure: true})
	}
	st := entry(t, n, id)
	if st.Opens != 1 || st.OpenUntil.IsZero() {
		t.Fatalf("after five failures: %+v, want an open circuit", st)
	}
	watchesShow(t, n, id, append(relays, a)...)
	return st
}

// TestSharedOnlyTheProbeClosesTheCircuit: the requests on the wire when
// the circuit opened still answer, on the relay that opened it and on the
// others; their successes leave it open, so that every relay keeps
// holding and the cool-downs in a row still double.
func TestSharedOnlyTheProbeClosesTheCircuit(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	l := ratelimit.Limit{Rate: 100, Burst: 100, Breaker: ratelimit.Breaker{MinRequests: 1000}}
	id := subID(t)
	fake := newFake()
	opts := ratelimit.Options{FailureThreshold: 5, Cooldown: 5 * time.Second, MaxCooldown: 15 * time.Minute}
	a := newShared(t, n, fake, opts)
	b := newShared(t, n, fake, opts)
	wantGo(t, "a", reserve(t, a, id, l))
	wantGo(t, "b", reserve(t, b, id, l))
	opened := tripped(t, n, id, l, a, b)

	observe(t, b, id, l, ratelimit.Result{Success: true})
	observe(t, a, id, l, ratelimit.Result{Success: true})
	if st := entry(t, n, id); st.Opens != 1 || !st.OpenUntil.Equal(opened.OpenUntil) {
		t.Fatalf("successes of requests sent before the circuit opened changed it: %+v → %+v", opened, st)
	}
	watchesShow(t, n, id, a, b)
	for _, s := range []*ratelimit.Shared{a, b} {
		if d := reserve(t, s, id, l); d.Verdict != ratelimit.CircuitOpen {
			t.Fatalf("during the cool-down, after successes: %+v, want circuit_open", d)
		}
	}

	fake.Advance(5*time.Second + skew(fake))
	prober, probes := probeRound(t, id, l, a, b)
	if probes != 1 {
		t.Fatalf("%d probes after the cool-down, want exactly 1", probes)
	}
	observe(t, prober, id, l, ratelimit.Result{Failure: true, Probe: true})
	if st := entry(t, n, id); st.Opens != 2 {
		t.Fatalf("after a failed probe: %+v, want the second cool-down in a row", st)
	}
	wantVerdict(t, "the prober after its failure", reserve(t, prober, id, l), ratelimit.CircuitOpen, 10*time.Second, time.Millisecond)
}

// TestSharedClosedCircuitEndsTheLocalCoolDown: a relay whose clock runs
// behind still holds the cool-down it stored when another relay's probe
// has closed the circuit; the watch showing it closed lets it send at once.
func TestSharedClosedCircuitEndsTheLocalCoolDown(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	l := ratelimit.Limit{Rate: 100, Burst: 100, Breaker: ratelimit.Breaker{MinRequests: 1000}}
	id := subID(t)
	behind, ahead := newFake(), newFake()
	opts := ratelimit.Options{FailureThreshold: 5, Cooldown: 5 * time.Second, MaxCooldown: 15 * time.Minute}
	a := newShared(t, n, behind, opts)
	b := newShared(t, n, ahead, opts)
	wantGo(t, "a", reserve(t, a, id, l))
	tripped(t, n, id, l, a, b)

	ahead.Advance(5*time.Second + skew(ahead) + skew(behind))
	d := reserve(t, b, id, l)
	if d.Verdict != ratelimit.Go || !d.Probe {
		t.Fatalf("b after the cool-down: %+v, want the probe", d)
	}
	observe(t, b, id, l, ratelimit.Result{Success: true, Probe: true})
	if st := entry(t, n, id); st.Opens != 0 || !st.OpenUntil.IsZero() {
		t.Fatalf("after a successful probe: %+v, want a closed circuit", st)
	}
	watchesShow(t, n, id, a, b)
	wantGo(t, "a once its watch showed the circuit closed", reserve(t, a, id, l))
}

// TestSharedOutcomesOfAnEarlierCircuitAreNotCounted: requests sent before
// the circuit opened that hang against the dead receiver time out after
// the probe has closed it, on the relay that probed and on another; their
// failures say nothing of the receiver since, and do not reopen it.
func TestSharedOutcomesOfAnEarlierCircuitAreNotCounted(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	l := ratelimit.Limit{Rate: 100, Burst: 100, Breaker: ratelimit.Breaker{MinRequests: 1000}}
	id := subID(t)
	fake := newFake()
	opts := ratelimit.Options{FailureThreshold: 5, Cooldown: 5 * time.Second, MaxCooldown: 15 * time.Minute}
	a := newShared(t, n, fake, opts)
	b := newShared(t, n, fake, opts)
	hungA, hungB := reserve(t, a, id, l), reserve(t, b, id, l)
	wantGo(t, "a", hungA)
	wantGo(t, "b", hungB)
	tripped(t, n, id, l, a, b)

	fake.Advance(5*time.Second + skew(fake))
	d := reserve(t, a, id, l)
	if d.Verdict != ratelimit.Go || !d.Probe {
		t.Fatalf("a after the cool-down: %+v, want the probe", d)
	}
	observe(t, a, id, l, ratelimit.Result{Success: true, Probe: true, Gen: d.Gen})
	watchesShow(t, n, id, a, b)
	for _, r := range []struct {
		name string
		s    *ratelimit.Shared
		gen  uint64
	}{{"a", a, hungA.Gen}, {"b", b, hungB.Gen}} {
		for range 5 {
			observe(t, r.s, id, l, ratelimit.Result{Failure: true, Gen: r.gen})
		}
		if st := entry(t, n, id); !st.OpenUntil.IsZero() {
			t.Fatalf("%s: failures of requests sent before the circuit opened reopened it after the probe closed it: %+v", r.name, st)
		}
	}
	now := reserve(t, b, id, l)
	wantGo(t, "b after the probe closed it", now)
	for range 5 {
		observe(t, b, id, l, ratelimit.Result{Failure: true, Gen: now.Gen})
	}
	if st := entry(t, n, id); st.OpenUntil.IsZero() {
		t.Fatalf("five failures of requests sent after the probe left the circuit closed: %+v", st)
	}
}
