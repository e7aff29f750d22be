package ratelimit_test

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/relay-dev/relay/internal/clock"
	"github.com/relay-dev/relay/internal/ratelimit"
	"github.com/relay-dev/relay/internal/testutil"
)

// wantVerdict fails the test unless d holds for want, with a wait within
// tolerance of wait.
func wantVerdict(t *testing.T, who string, d ratelimit.Decision, want ratelimit.Verdict, wait, tolerance time.Duration) {
	t.Helper()
	if d.Verdict != want || !near(d.Wait, wait, tolerance) {
		t.Fatalf("%s: %v for %v, want %v for %v (± %v)", who, d.Verdict, d.Wait, want, wait, tolerance)
	}
}

// wantGo fails the test unless d lets an ordinary request (not a probe) go.
func wantGo(t *testing.T, who string, d ratelimit.Decision) {
	t.Helper()
	if d.Verdict != ratelimit.Go || d.Probe {
		t.Fatalf("%s: %+v, want Go", who, d)
	}
}

// crossRelay is how far two relays' views of the server's time may differ
// on a quiet host: each estimates it from the server timestamps it has seen,
// milliseconds apart. See skew for a test's own bound.
const crossRelay = 100 * time.Millisecond

// fakeStarts holds, for each fake clock of these tests, the real time it was
// made at (see newFake).
var fakeStarts sync.Map

// newFake returns a fake clock standing at the real time now.
func newFake() *clock.Fake {
	now := time.Now()
	fake := clock.NewFake(now)
	fakeStarts.Store(fake, now)
	return fake
}

// skew is how far two relays on fake may see the server's time apart: each
// calibrates against the server's real clock while fake stands still, so
// the real time that passed since fake was made (seconds, on a host busy
// with other work) adds to crossRelay. The bound is what the host gave the
// test, not a guess at it.
func skew(fake *clock.Fake) time.Duration {
	start, ok := fakeStarts.Load(fake)
	if !ok {
		return crossRelay
	}
	return crossRelay + time.Since(start.(time.Time))
}

// TestSharedPauseHoldsEveryRelay proves the Retry-After rule: a pause
// observed on one relay holds that relay at once, holds another relay as
// soon as it re-reads the entry (within LeaseTTL), for the rest of the
// pause, and both go again when it is over.
func TestSharedPauseHoldsEveryRelay(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	l := ratelimit.Limit{Rate: 100, Burst: 100}
	id := subID(t)
	fake := newFake()
	a := newShared(t, n, fake, ratelimit.Options{})
	wantGo(t, "a before the pause", reserve(t, a, id, l))
	b := newShared(t, n, fake, ratelimit.Options{})
	wantGo(t, "b before the pause", reserve(t, b, id, l))

	observe(t, a, id, l, ratelimit.Result{PauseFor: 2 * time.Second})
	wantVerdict(t, "a right after its 429", reserve(t, a, id, l), ratelimit.Paused, 2*time.Second, time.Millisecond)
	if st := entry(t, n, id); st.PausedUntil.IsZero() {
		t.Fatalf("entry %+v: the pause was not shared", st)
	}

	// b spends what is left of the lease it took before the pause, then
	// re-reads the entry.
	fake.Advance(ratelimit.LeaseTTL)
	wantVerdict(t, "b after a lease", reserve(t, b, id, l), ratelimit.Paused, 2*time.Second-ratelimit.LeaseTTL, skew(fake))
	wantVerdict(t, "a after a lease", reserve(t, a, id, l), ratelimit.Paused, 2*time.Second-ratelimit.LeaseTTL, time.Millisecond)

	fake.Advance(time.Second)
	wantVerdict(t, "b a second later", reserve(t, b, id, l), ratelimit.Paused, time.Second-ratelimit.LeaseTTL, skew(fake))

	fake.Advance(time.Second - ratelimit.LeaseTTL + skew(fake))
	wantGo(t, "a after the pause", reserve(t, a, id, l))
	wantGo(t, "b after the pause", reserve(t, b, id, l))
}

// heldUntil steps the fake clock through a pause in steps of a quarter
// second and fails the test unless every relay is held as Paused until end
// (counted from now) and lets a request go after it.
func heldUntil(t *testing.T, fake *clock.Fake, id string, l ratelimit.Limit, end time.Duration, relays ...*ratelimit.Shared) {
	t.Helper()
	const step = 250 * time.Millisecond
	at := time.Duration(0)
	tolerance := skew(fake)
	for ; at+step < end-tolerance; at += step {
		for i, s := range relays {
			if d := reserve(t, s, id, l); d.Verdict != ratelimit.Paused || d.Wait <= 0 {
				t.Fatalf("relay %d, %v into a pause of %v: %+v, want paused", i, at, end, d)
			}
		}
		fake.Advance(step)
	}
	fake.Advance(end + tolerance - at)
	for i, s := range relays {
		wantGo(t, fmt.Sprintf("relay %d after the pause", i), reserve(t, s, id, l))
	}
}

// TestSharedLaterPauseWins proves that of two pauses the later end wins,
// whichever relay observes them and in whichever order: a shorter second
// pause never shortens the first, and a longer one extends it, on every
// relay.
func TestSharedLaterPauseWins(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	l := ratelimit.Limit{Rate: 100, Burst: 100}
	for _, tt := range []struct {
		name          string
		first, second time.Duration
	}{
		{"shorter second pause", 5 * time.Second, time.Second},
		{"longer second pause", time.Second, 3 * time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			id := subID(t)
			fake := newFake()
			a := newShared(t, n, fake, ratelimit.Options{})
			b := newShared(t, n, fake, ratelimit.Options{})
			wantGo(t, "a", reserve(t, a, id, l))
			wantGo(t, "b", reserve(t, b, id, l))

			observe(t, a, id, l, ratelimit.Result{PauseFor: tt.first})
			first := entry(t, n, id).PausedUntil
			// b's view of the entry predates a's pause: its write must not
			// replace a later end with its own.
			observe(t, b, id, l, ratelimit.Result{PauseFor: tt.second})
			observe(t, a, id, l, ratelimit.Result{PauseFor: tt.second})
			last := entry(t, n, id).PausedUntil
			if tt.second < tt.first && !last.Equal(first) {
				t.Fatalf("paused until %v after shorter pauses, want %v", last, first)
			}
			if tt.second > tt.first && !last.After(first) {
				t.Fatalf("paused until %v after a longer pause, want past %v", last, first)
			}
			heldUntil(t, fake, id, l, max(tt.first, tt.second), a, b)
		})
	}
}

// TestSharedPauseBoundedByMaxPause proves that a pause is cut to
// Options.MaxPause (--max-pause), on the relay that saw it and in the entry
// the others read.
func TestSharedPauseBoundedByMaxPause(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	l := ratelimit.Limit{Rate: 100, Burst: 100}
	id := subID(t)
	fake := newFake()
	opts := ratelimit.Options{MaxPause: 10 * time.Second}
	a := newShared(t, n, fake, opts)
	wantGo(t, "a", reserve(t, a, id, l))
	b := newShared(t, n, fake, opts)
	wantGo(t, "b", reserve(t, b, id, l))

	observe(t, a, id, l, ratelimit.Result{PauseFor: 24 * time.Hour})
	wantVerdict(t, "a", reserve(t, a, id, l), ratelimit.Paused, 10*time.Second, time.Millisecond)
	fake.Advance(ratelimit.LeaseTTL)
	wantVerdict(t, "b", reserve(t, b, id, l), ratelimit.Paused, 10*time.Second-ratelimit.LeaseTTL, skew(fake))
	fake.Advance(10*time.Second - ratelimit.LeaseTTL + skew(fake))
	wantGo(t, "a after the bounded pause", reserve(t, a, id, l))
	wantGo(t, "b after the bounded pause", reserve(t, b, id, l))
}

// TestSharedPauseOnSuccessHoldsEveryRelay proves the pause rule for a pause
// that comes with a 2xx (RateLimit-Remaining: 0 with its reset, which the
// lanes report as Result{Success: true, PauseFor: reset}): like any other
// pause it must reach the entry, so that every relay holds.
func TestSharedPauseOnSuccessHoldsEveryRelay(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	l := ratelimit.Limit{Rate: 100, Burst: 100}
	id := subID(t)
	fake := newFake()
	a := newShared(t, n, fake, ratelimit.Options{})
	wantGo(t, "a", reserve(t, a, id, l))
	b := newShared(t, n, fake, ratelimit.Options{})
	wantGo(t, "b", reserve(t, b, id, l))

	observe(t, a, id, l, ratelimit.Result{Success: true, PauseFor: 2 * time.Second})
	wantVerdict(t, "a", reserve(t, a, id, l), ratelimit.Paused, 2*time.Second, time.Millisecond)
	if st := entry(t, n, id); st.PausedUntil.IsZero() {
		t.Errorf("entry %+v: the pause was not shared", st)
	}
	fake.Advance(ratelimit.LeaseTTL)
	wantVerdict(t, "b after a lease", reserve(t, b, id, l), ratelimit.Paused, 2*time.Second-ratelimit.LeaseTTL, skew(fake))
}

// TestSharedAdaptiveRate proves AIMD as the entry records it: each 429 of
// a new lease window halves the rate in force, down to rate/64; each window
// of successes (as many as the rate in force allows in a second) raises it
// by a tenth of the configured rate, back to the configured rate and never
// above; and leases shrink with it.
func TestSharedAdaptiveRate(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	l := ratelimit.Limit{Rate: 100, Burst: 100}
	id := subID(t)
	fake := newFake()
	s := newShared(t, n, fake, ratelimit.Options{})
	rateInForce := func() float64 { return ratelimit.EffectiveRate(entry(t, n, id), l) }

	wantGo(t, "first request", reserve(t, s, id, l)) // a lease of 10
	observe(t, s, id, l, ratelimit.Result{Throttled: true})
	if got := rateInForce(); got != 50 {
		t.Fatalf("after a 429: rate %v, want 50", got)
	}
	// The lease taken at 100/s is dropped; the next one is sized at 50/s.
	tokens := entry(t, n, id).Tokens
	wantGo(t, "after the 429", reserve(t, s, id, l))
	if got := entry(t, n, id).Tokens; got != tokens-5 {
		t.Errorf("a lease at 50/s took %v tokens, want 5", tokens-got)
	}

	for _, want := range []float64{25, 12.5, 6.25, 3.125, 1.5625, 1.5625, 1.5625} {
		// At most one decrease per lease window: each 429 here is in the
		// next one.
		fake.Advance(ratelimit.DecreaseWindow)
		observe(t, s, id, l, ratelimit.Result{Throttled: true})
		if got := rateInForce(); got != want {
			t.Fatalf("after another 429: rate %v, want %v", got, want)
		}
	}

	rate, writes, successes, windows := rateInForce(), s.Stats().Writes, 0, 0
	for rate < l.Rate {
		observe(t, s, id, l, ratelimit.Result{Success: true})
		successes++
		if w := s.Stats().Writes; w != writes {
			writes = w
			got := rateInForce()
			if want := ratelimit.Increase(rate, l); math.Abs(got-want) > 1e-9 {
				t.Fatalf("window %d: rate %v → %v, want %v", windows+1, rate, got, want)
			}
			if successes != ratelimit.SuccessWindow(rate) {
				t.Fatalf("rate %v raised after %d successes, want %d", rate, successes, ratelimit.SuccessWindow(rate))
			}
			rate, successes = got, 0
			windows++
		}
		if successes > 1000 {
			t.Fatalf("rate stuck at %v after %d successes", rate, successes)
		}
	}
	if windows != 10 {
		t.Errorf("back from rate/64 in %d windows, want 10", windows)
	}
	if st := entry(t, n, id); st.Rate != 0 {
		t.Errorf("entry rate %v at the configured rate, want 0 (configured)", st.Rate)
	}
	for range 500 {
		observe(t, s, id, l, ratelimit.Result{Success: true})
	}
	if w := s.Stats().Writes; w != writes {
		t.Errorf("%d writes for successes at the configured rate, want none", w-writes)
	}
	if got := rateInForce(); got != l.Rate {
		t.Errorf("rate %v after more successes, want the configured %v", got, l.Rate)
	}
}

// TestSharedHealthySuccessCostsNothing proves that the outcome of a request
// to a healthy subscriber costs no KV operation.
func TestSharedHealthySuccessCostsNothing(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	for name, l := range map[string]ratelimit.Limit{
		"limited":   {Rate: 100, Burst: 100},
		"unlimited": {},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			id := subID(t)
			s := newShared(t, n, clock.NewFake(time.Now()), ratelimit.Options{})
			wantGo(t, "request", reserve(t, s, id, l))
			before := s.Stats()
			for range 500 {
				observe(t, s, id, l, ratelimit.Result{Success: true})
				observe(t, s, id, l, ratelimit.Result{})
			}
			if after := s.Stats(); after.Reads != before.Reads || after.Writes != before.Writes || after.Conflicts != before.Conflicts {
				t.Errorf("successes cost KV operations: %+v → %+v", before, after)
			}
		})
	}
}

// probeRound has the relays ask at once, three times each, and returns the
// relay that got a Go and how many Go decisions there were, all probes.
func probeRound(t *testing.T, id string, l ratelimit.Limit, relays ...*ratelimit.Shared) (prober *ratelimit.Shared, probes int) {
	t.Helper()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, s := range relays {
		wg.Go(func() {
			for range 3 {
				d, err := s.Reserve(testutil.Context(t), id, l)
				mu.Lock()
				switch {
				case err != nil:
					t.Errorf("Reserve: %v", err)
				case d.Verdict == ratelimit.Go && !d.Probe:
					t.Errorf("a half-open breaker let an ordinary request go: %+v", d)
				case d.Verdict == ratelimit.Go:
					probes++
					prober = s
				case d.Verdict != ratelimit.CircuitOpen:
					t.Errorf("a half-open breaker held for %v, want circuit_open", d.Verdict)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return prober, probes
}

// watchesShow waits until every relay's watch of the bucket holds id's
// breaker as stored: a relay learns of another's change from its watch, a
// moment later, and the fake clock must not move on before.
func watchesShow(t *testing.T, n *testutil.NATS, id string, relays ...*ratelimit.Shared) {
	t.Helper()
	want := entry(t, n, id)
	testutil.Eventually(t, func() bool {
		for _, s := range relays {
			seen, _, ok := s.Watched()
			st, found := seen[id]
			if ok && (!found || st.Opens != want.Opens || st.Failures != want.Failures ||
				!st.OpenUntil.Equal(want.OpenUntil) || !st.ProbeUntil.Equal(want.ProbeUntil)) {
				return false
			}
		}
		return true
	}, "the relays' watches never showed %s's breaker as stored: %+v", id, want)
}

// TestSharedBreaker proves the breaker: failures below the threshold leave
// it closed and cost no write, the threshold-th opens it for the cool-down on every relay,
// then exactly one request across the relays is a probe; a failed probe
// reopens it for twice as long, a successful one closes it.
func TestSharedBreaker(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	// Thin: at the fake clock's standstill, five failures in one bucket
	// would make the default's 50 a window, a busy subscriber's pace.
	l := ratelimit.Limit{Rate: 100, Burst: 100, Breaker: ratelimit.Breaker{MinRequests: 1000}}
	id := subID(t)
	fake := newFake()
	opts := ratelimit.Options{FailureThreshold: 5, Cooldown: 5 * time.Second, MaxCooldown: 15 * time.Minute}
	a := newShared(t, n, fake, opts)
	wantGo(t, "a", reserve(t, a, id, l))
	b := newShared(t, n, fake, opts)
	wantGo(t, "b", reserve(t, b, id, l))

	writes := a.Stats().Writes
	for range 4 {
		observe(t, a, id, l, ratelimit.Result{Failure: true})
	}
	// The failures are counted by the relay, in memory: none is written.
	if st := entry(t, n, id); st.Failures != 0 || !st.OpenUntil.IsZero() || a.Stats().Writes != writes {
		t.Fatalf("after four failures: %+v and %d writes, want the entry untouched and a closed breaker", st, a.Stats().Writes-writes)
	}
	wantGo(t, "a after four failures", reserve(t, a, id, l))

	observe(t, a, id, l, ratelimit.Result{Failure: true})
	if st := entry(t, n, id); st.Failures != 5 || st.OpenUntil.IsZero() || st.Opens != 1 {
		t.Fatalf("after five failures: %+v, want an open breaker", st)
	}
	wantVerdict(t, "a after the fifth failure", reserve(t, a, id, l), ratelimit.CircuitOpen, 5*time.Second, time.Millisecond)
	watchesShow(t, n, id, a, b)
	fake.Advance(ratelimit.LeaseTTL)
	wantVerdict(t, "b after a lease", reserve(t, b, id, l), ratelimit.CircuitOpen, 5*time.Second-ratelimit.LeaseTTL, skew(fake))
	// A failure of a request that was already on the wire does not extend
	// the cool-down.
	opened := entry(t, n, id)
	observe(t, b, id, l, ratelimit.Result{Failure: true})
	if st := entry(t, n, id); !st.OpenUntil.Equal(opened.OpenUntil) || st.Opens != 1 {
		t.Fatalf("a failure during the cool-down changed it: %+v → %+v", opened, st)
	}
	wantVerdict(t, "a during the cool-down", reserve(t, a, id, l), ratelimit.CircuitOpen, 5*time.Second-ratelimit.LeaseTTL, time.Millisecond)

	fake.Advance(5*time.Second - ratelimit.LeaseTTL + skew(fake))
	prober, probes := probeRound(t, id, l, a, b)
	if probes != 1 {
		t.Fatalf("%d probes after the cool-down, want exactly 1", probes)
	}
	observe(t, prober, id, l, ratelimit.Result{Failure: true, Probe: true})
	if st := entry(t, n, id); st.Opens != 2 || st.OpenUntil.IsZero() || !st.ProbeUntil.IsZero() {
		t.Fatalf("after a failed probe: %+v, want the second cool-down", st)
	}
	wantVerdict(t, "the prober after its failure", reserve(t, prober, id, l), ratelimit.CircuitOpen, 10*time.Second, time.Millisecond)
	watchesShow(t, n, id, a, b)
	fake.Advance(5 * time.Second)
	for _, s := range []*ratelimit.Shared{a, b} {
		wantVerdict(t, "half-way through the doubled cool-down", reserve(t, s, id, l), ratelimit.CircuitOpen, 5*time.Second, skew(fake))
	}

	fake.Advance(5*time.Second + skew(fake))
	prober, probes = probeRound(t, id, l, a, b)
	if probes != 1 {
		t.Fatalf("%d probes after the second cool-down, want exactly 1", probes)
	}
	observe(t, prober, id, l, ratelimit.Result{Success: true, Probe: true})
	if st := entry(t, n, id); st.Failures != 0 || st.Opens != 0 || !st.OpenUntil.IsZero() || !st.ProbeUntil.IsZero() {
		t.Fatalf("after a successful probe: %+v, want a closed breaker", st)
	}
	watchesShow(t, n, id, a, b)
	wantGo(t, "a after the breaker closed", reserve(t, a, id, l))
	wantGo(t, "b after the breaker closed", reserve(t, b, id, l))
}

// TestSharedProbeOfADeadRelayIsRetaken proves that a probe whose relay died
// holds the breaker only for ProbeTimeout: then another relay probes.
func TestSharedProbeOfADeadRelayIsRetaken(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	l := ratelimit.Limit{Rate: 100, Burst: 100}
	id := subID(t)
	fake := newFake()
	opts := ratelimit.Options{FailureThreshold: 1, Cooldown: 5 * time.Second, ProbeTimeout: 10 * time.Second}
	dead := newShared(t, n, fake, opts)
	b := newShared(t, n, fake, opts)
	wantGo(t, "dead", reserve(t, dead, id, l))
	observe(t, dead, id, l, ratelimit.Result{Failure: true})
	fake.Advance(5*time.Second + skew(fake))
	if d := reserve(t, dead, id, l); d.Verdict != ratelimit.Go || !d.Probe {
		t.Fatalf("after the cool-down: %+v, want the probe", d)
	}
	// dead is killed with its probe on the wire.
	if d := reserve(t, b, id, l); d.Verdict != ratelimit.CircuitOpen {
		t.Fatalf("b while the probe is out: %+v, want circuit_open", d)
	}
	fake.Advance(opts.ProbeTimeout)
	d := reserve(t, b, id, l)
	if d.Verdict != ratelimit.Go || !d.Probe {
		t.Fatalf("b after ProbeTimeout: %+v, want the probe", d)
	}
	observe(t, b, id, l, ratelimit.Result{Success: true, Probe: true})
	wantGo(t, "b after its probe succeeded", reserve(t, b, id, l))
}

// TestSharedUnusedProbeIsReleased proves that a probe handed back unused
// (Observe with only Probe set, as a lane does when its queue emptied) lets
// the next request probe at once instead of holding the breaker until
// ProbeTimeout.
func TestSharedUnusedProbeIsReleased(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	l := ratelimit.Limit{Rate: 100, Burst: 100}
	id := subID(t)
	fake := newFake()
	opts := ratelimit.Options{FailureThreshold: 1, Cooldown: 5 * time.Second}
	a := newShared(t, n, fake, opts)
	wantGo(t, "a", reserve(t, a, id, l))
	observe(t, a, id, l, ratelimit.Result{Failure: true})
	fake.Advance(5*time.Second + skew(fake))
	if d := reserve(t, a, id, l); d.Verdict != ratelimit.Go || !d.Probe {
		t.Fatalf("after the cool-down: %+v, want the probe", d)
	}
	observe(t, a, id, l, ratelimit.Result{Probe: true})
	if d := reserve(t, a, id, l); d.Verdict != ratelimit.Go || !d.Probe {
		t.Fatalf("after the probe was handed back: %+v, want another probe", d)
	}
}

// TestSharedLongOutage proves that a subscriber failing every request for a
// fake hour is sent few requests (the breaker's threshold, then one probe per
// cool-down of 5 s doubling up to 15 min), so that a long outage does not
// turn a queue into dead letters.
func TestSharedLongOutage(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	l := ratelimit.Limit{Rate: 50, Burst: 50}
	id := subID(t)
	fake := newFake()
	s := newShared(t, n, fake, ratelimit.Options{})
	var sent []time.Duration
	for elapsed := time.Duration(0); elapsed < time.Hour; elapsed += time.Second {
		d := reserve(t, s, id, l)
		if d.Verdict == ratelimit.Go {
			sent = append(sent, elapsed)
			observe(t, s, id, l, ratelimit.Result{Failure: true, Probe: d.Probe})
		}
		fake.Advance(time.Second)
	}
	t.Logf("an hour of failures: %d requests let through, at %v", len(sent), sent)
	if limit := 12 + ratelimit.DefaultConsecutive; len(sent) > limit {
		t.Errorf("%d requests in an hour of failures, want at most %d", len(sent), limit)
	}
	if len(sent) < ratelimit.DefaultConsecutive+1 {
		t.Errorf("%d requests: the breaker never probed", len(sent))
	}
}

// TestSharedLongOutageKeepsProbing proves the other half of the breaker's
// promise over a long outage: it keeps probing at least once per
// MaxCooldown, so that a subscriber that comes back is noticed within
// 15 minutes.
func TestSharedLongOutageKeepsProbing(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	l := ratelimit.Limit{Rate: 50, Burst: 50}
	id := subID(t)
	fake := newFake()
	s := newShared(t, n, fake, ratelimit.Options{})
	last := time.Duration(0)
	for elapsed := time.Duration(0); elapsed < time.Hour; elapsed += time.Second {
		d := reserve(t, s, id, l)
		if d.Verdict == ratelimit.Go {
			last = elapsed
			observe(t, s, id, l, ratelimit.Result{Failure: true, Probe: d.Probe})
		}
		if gap := elapsed - last; gap > ratelimit.DefaultMaxCooldown+time.Second {
			t.Fatalf("no probe for %v at %v into the outage", gap, elapsed)
		}
		fake.Advance(time.Second)
	}
}

// TestSharedUnlimited proves that an unlimited subscriber (rate 0, or
// infinite) is never held for tokens and costs no KV operation while the
// limiter follows the bucket, yet is held by a pause, on every relay: the
// other relay learns of it from its watch, before its lease ends. (Its
// checks that the watch is fresh are requests of the bucket's stream, not
// KV operations.)
func TestSharedUnlimited(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	for name, l := range map[string]ratelimit.Limit{
		"rate 0":              {},
		"rate 0 with a burst": {Burst: 5},
		"rate +Inf":           {Rate: math.Inf(1), Burst: 1},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			id := subID(t)
			fake := newFake()
			a := newShared(t, n, fake, ratelimit.Options{})
			b := newShared(t, n, fake, ratelimit.Options{})
			for i := range 5000 {
				if d := reserve(t, a, id, l); d.Verdict != ratelimit.Go {
					t.Fatalf("request %d at a standstill: %+v", i, d)
				}
			}
			for i := range 1000 {
				for range 5 {
					if d := reserve(t, a, id, l); d.Verdict != ratelimit.Go {
						t.Fatalf("at %v: %+v", time.Duration(i)*time.Millisecond, d)
					}
				}
				// The hand-driven clock runs far faster than the real one:
				// give the checks that keep the watch known fresh the real
				// time they take.
				testutil.Eventually(t, func() bool { return ratelimit.FreshAge(a) < ratelimit.FreshFor/2 },
					"the watch was not known fresh")
				fake.Advance(time.Millisecond)
			}
			if st := a.Stats(); st.Writes != 0 || st.Reads != 0 {
				t.Errorf("10000 requests over a second: %+v, want no KV operation", st)
			}

			wantGo(t, "b", reserve(t, b, id, l))
			observe(t, a, id, l, ratelimit.Result{PauseFor: time.Second})
			wantVerdict(t, "a", reserve(t, a, id, l), ratelimit.Paused, time.Second, time.Millisecond)
			testutil.Eventually(t, func() bool { return reserve(t, b, id, l).Verdict == ratelimit.Paused },
				"b, within its lease, never learnt of a's pause")
			wantVerdict(t, "b", reserve(t, b, id, l), ratelimit.Paused, time.Second, skew(fake))
			if st := b.Stats(); st.Writes != 0 || st.Reads != 0 {
				t.Errorf("b: %+v, want no KV operation", st)
			}
			fake.Advance(time.Second + skew(fake))
			// Idle for a second, each relay first proves its watch fresh
			// (see ratelimit.FreshFor): a wait of a round trip, or of its
			// watch catching up with another subscriber's write.
			for name, s := range map[string]*ratelimit.Shared{"a": a, "b": b} {
				testutil.Eventually(t, func() bool { return reserve(t, s, id, l).Verdict == ratelimit.Go },
					"%s after the pause: never Go", name)
			}
		})
	}
}

// TestSharedWithoutItsWatchReadsEntries: a limiter whose watch is not
// running (not started yet, or down) reads a subscriber's entry when its
// lease runs out, and so still learns of another relay's pause within a
// lease.
func TestSharedWithoutItsWatchReadsEntries(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	id := subID(t)
	l := ratelimit.Limit{}
	fake := newFake()
	a := newShared(t, n, fake, ratelimit.Options{})
	b, err := ratelimit.NewShared(testutil.Context(t), n.JS, ratelimit.Options{Clock: fake, CalibrateEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	wantGo(t, "b", reserve(t, b, id, l))
	observe(t, a, id, l, ratelimit.Result{PauseFor: time.Second})
	fake.Advance(ratelimit.LeaseTTL)
	wantVerdict(t, "b after a lease", reserve(t, b, id, l), ratelimit.Paused, time.Second-ratelimit.LeaseTTL, skew(fake))
	if st := b.Stats(); st.Reads != 2 {
		t.Errorf("b: %+v, want a read per lease", st)
	}
}

// notices records what a Notifier is told.
type notices struct {
	mu  sync.Mutex
	got []string
}

func (n *notices) add(s string) { n.mu.Lock(); n.got = append(n.got, s); n.mu.Unlock() }
func (n *notices) all() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.got...)
}
func (n *notices) Paused(id string, _ time.Time, status int) {
	n.add(fmt.Sprintf("paused %s %d", id, status))
}
func (n *notices) CircuitOpened(id string, _ time.Time, opens, status int) {
	n.add(fmt.Sprintf("opened %s %d %d", id, opens, status))
}
func (n *notices) CircuitClosed(id string, _ time.Time) { n.add("closed " + id) }

// TestNotifierIsToldEachChangeOnce: of two relays observing the same
// failures, pause and recovery, the Notifier of the one whose write made
// each change is told of it, once: a pause (not the failure that repeats
// it), the circuit's opening at the threshold (not a failure during the
// cool-down), its closing by the probe's success.
func TestNotifierIsToldEachChangeOnce(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	l := ratelimit.Limit{Rate: 100, Burst: 100}
	id := subID(t)
	fake := newFake()
	na, nb := &notices{}, &notices{}
	opts := ratelimit.Options{FailureThreshold: 3, Cooldown: 5 * time.Second, MaxCooldown: time.Minute}
	optsA, optsB := opts, opts
	optsA.Notify, optsB.Notify = na, nb
	a, b := newShared(t, n, fake, optsA), newShared(t, n, fake, optsB)
	wantGo(t, "a", reserve(t, a, id, l))
	wantGo(t, "b", reserve(t, b, id, l))

	observe(t, a, id, l, ratelimit.Result{Throttled: true, PauseFor: time.Minute, Status: 429})
	observe(t, b, id, l, ratelimit.Result{Throttled: true, PauseFor: 30 * time.Second, Status: 429}) // earlier: nothing stored
	for range 3 {
		observe(t, b, id, l, ratelimit.Result{Failure: true, Status: 503})
	}
	observe(t, a, id, l, ratelimit.Result{Failure: true, Status: 503}) // during the cool-down
	observe(t, b, id, l, ratelimit.Result{Success: true, Status: 200}) // sent before: closes nothing
	fake.Advance(time.Minute + skew(fake))
	d := reserve(t, b, id, l)
	if d.Verdict != ratelimit.Go || !d.Probe {
		t.Fatalf("b after the pause and the cool-down: %+v, want the probe", d)
	}
	observe(t, b, id, l, ratelimit.Result{Success: true, Probe: true, Status: 200})
	got := append(na.all(), nb.all()...)
	want := []string{"closed " + id, "opened " + id + " 1 503", "paused " + id + " 429"}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("told %q, want %q", got, want)
	}
}
