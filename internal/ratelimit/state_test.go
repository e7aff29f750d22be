package ratelimit_test

import (
	"math"
	"testing"
	"time"

	"github.com/relay-dev/relay/internal/ratelimit"
)

// t0 is an arbitrary instant the arithmetic tests count from.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// TestLeaseSize proves the lease rule: a lease holds what the subscriber may
// spend in LeaseWindow (floor(rate × 0.1)), at least one token, never more
// than the bucket holds, and at most half of it, so that a relay waiting for
// a whole lease does not throw refill away while its write is on the way.
func TestLeaseSize(t *testing.T) {
	t.Parallel()
	tests := []struct {
		rate  float64
		burst int
		want  int
	}{
		{0.5, 0, 1},
		{0.5, 1, 1},
		{0.5, 10, 1},
		{1, 1, 1},
		{1, 5, 1},
		{10, 1, 1},
		{10, 2, 1},
		{10, 10, 1},
		{10, 100, 1},
		{15, 15, 1}, // a lease is at most max(1, rate × 0.1): 1.5 rounds down
		{70, 70, 7}, // 70 × 0.1 is 7.000000000000001 in floating point
		{100, 1, 1},
		{100, 3, 1},
		{100, 5, 2},
		{100, 20, 10},
		{100, 100, 10},
		{100, 1000, 10},
		{1000, 1, 1},
		{1000, 50, 25},
		{1000, 150, 75},
		{1000, 1000, 100},
		{1000, 100000, 100},
		{5000, 0, 1},
		{5000, 200, 100},
		{5000, 5000, 500},
		{5000, 50000, 500},
	}
	for _, tt := range tests {
		got := ratelimit.LeaseSize(tt.rate, ratelimit.Limit{Rate: tt.rate, Burst: tt.burst})
		if got != tt.want {
			t.Errorf("LeaseSize(rate %v, burst %d) = %d, want %d", tt.rate, tt.burst, got, tt.want)
		}
		if got < 1 {
			t.Errorf("LeaseSize(rate %v, burst %d) = %d, below one token", tt.rate, tt.burst, got)
		}
		if got > max(1, tt.burst) || (tt.burst >= 2 && got > tt.burst/2) {
			t.Errorf("LeaseSize(rate %v, burst %d) = %d, more than half the bucket", tt.rate, tt.burst, got)
		}
		floor := int(math.Floor(math.Round(tt.rate*1e6) / 1e7)) // rate × 0.1 without float noise
		if got != max(1, min(floor, tt.burst/2)) {
			t.Errorf("LeaseSize(rate %v, burst %d) = %d, want floor(rate × 0.1) = %d within [1, burst/2]", tt.rate, tt.burst, got, floor)
		}
	}
}

// TestLeaseSizeUsesTheRateInForce proves that a lease shrinks with the
// adaptive rate: it is sized on the rate passed, not on the configured one.
func TestLeaseSizeUsesTheRateInForce(t *testing.T) {
	t.Parallel()
	l := ratelimit.Limit{Rate: 1000, Burst: 1000}
	for _, tt := range []struct {
		rate float64
		want int
	}{{1000, 100}, {500, 50}, {250, 25}, {1000.0 / 64, 1}, {5, 1}} {
		if got := ratelimit.LeaseSize(tt.rate, l); got != tt.want {
			t.Errorf("LeaseSize(%v, %+v) = %d, want %d", tt.rate, l, got, tt.want)
		}
	}
}

// TestRefill proves the lazy refill: rate × elapsed is added, the bucket
// never holds more than its burst, time running backwards adds nothing, and
// a rate of zero adds nothing.
func TestRefill(t *testing.T) {
	t.Parallel()
	l := ratelimit.Limit{Rate: 10, Burst: 20}
	tests := []struct {
		name    string
		tokens  float64
		elapsed time.Duration
		rate    float64
		l       ratelimit.Limit
		want    float64
	}{
		{"no time passed", 3, 0, 10, l, 3},
		{"one second at 10/s", 3, time.Second, 10, l, 13},
		{"a tenth of a token", 0, 10 * time.Millisecond, 10, l, 0.1},
		{"half a second at the adaptive rate", 0, 500 * time.Millisecond, 5, l, 2.5},
		{"capped at burst", 3, 10 * time.Second, 10, l, 20},
		{"exactly full", 0, 2 * time.Second, 10, l, 20},
		{"a day later still burst", 0, 24 * time.Hour, 10, l, 20},
		{"full bucket stays full", 20, time.Second, 10, l, 20},
		{"time backwards adds nothing", 3, -time.Second, 10, l, 3},
		{"time far backwards adds nothing", 0, -time.Hour, 10, l, 0},
		{"rate zero adds nothing", 3, time.Hour, 0, l, 3},
		{"negative rate adds nothing", 3, time.Hour, -5, l, 3},
		{"burst zero holds one token", 0, time.Hour, 10, ratelimit.Limit{Rate: 10}, 1},
		{"over-full is cut to burst", 50, 0, 10, l, 20},
	}
	for _, tt := range tests {
		got := ratelimit.Refill(tt.tokens, t0, t0.Add(tt.elapsed), tt.rate, tt.l)
		if math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("%s: Refill(%v, +%v, rate %v, %+v) = %v, want %v", tt.name, tt.tokens, tt.elapsed, tt.rate, tt.l, got, tt.want)
		}
	}
}

// TestRefillSmallStepsMakeWholeTokens proves that many small refills add up
// to whole tokens: ten refills of a tenth of a token let a lease of one go.
func TestRefillSmallStepsMakeWholeTokens(t *testing.T) {
	t.Parallel()
	l := ratelimit.Limit{Rate: 10, Burst: 10}
	tokens, at := 0.0, t0
	for range 10 {
		next := at.Add(10 * time.Millisecond)
		tokens = ratelimit.Refill(tokens, at, next, 10, l)
		at = next
	}
	if w := ratelimit.WaitFor(tokens, 1, 10); w != 0 {
		t.Errorf("after ten refills of 0.1: %v tokens, WaitFor = %v, want 0", tokens, w)
	}
}

// TestWaitFor proves the wait arithmetic: (want − tokens) / rate, rounded up,
// at least a millisecond when anything is missing, zero when the bucket
// holds enough or there is no rate to wait for.
func TestWaitFor(t *testing.T) {
	t.Parallel()
	tests := []struct {
		tokens float64
		want   int
		rate   float64
		wait   time.Duration
	}{
		{0, 1, 10, 100 * time.Millisecond},
		{0.5, 1, 10, 50 * time.Millisecond},
		{0, 10, 100, 100 * time.Millisecond},
		{5, 10, 100, 50 * time.Millisecond},
		{0, 1, 1, time.Second},
		{0, 1, 0.5, 2 * time.Second},
		{0, 1, 0.01, 100 * time.Second},
		{0, 100, 1000, 100 * time.Millisecond},
		{1, 1, 10, 0},
		{3, 1, 10, 0},
		{1 - 1e-12, 1, 10, 0}, // rounding noise is not a missing token
		{0.99999, 1, 1e6, time.Millisecond},
		{0.999, 1, 10, time.Millisecond}, // 100 µs is raised to the floor
		{0, 1, 0, 0},
		{0, 1, -1, 0},
		{0, 0, 10, 0},
	}
	for _, tt := range tests {
		got := ratelimit.WaitFor(tt.tokens, tt.want, tt.rate)
		if got != tt.wait {
			t.Errorf("WaitFor(%v, %d, %v) = %v, want %v", tt.tokens, tt.want, tt.rate, got, tt.wait)
		}
	}
}

// TestWaitForThenRefillIsEnough proves that waiting what WaitFor says always
// refills the bucket to what was wanted (the wait is rounded up, not down).
func TestWaitForThenRefillIsEnough(t *testing.T) {
	t.Parallel()
	for _, rate := range []float64{0.3, 1, 3, 7, 10, 33, 100, 999, 5000} {
		l := ratelimit.Limit{Rate: rate, Burst: int(math.Ceil(rate)) + 10}
		n := ratelimit.LeaseSize(rate, l)
		for _, tokens := range []float64{0, 0.1, 0.33, float64(n) / 3, float64(n) - 0.001} {
			w := ratelimit.WaitFor(tokens, n, rate)
			got := ratelimit.Refill(tokens, t0, t0.Add(w), rate, l)
			if ratelimit.WaitFor(got, n, rate) != 0 {
				t.Errorf("rate %v: %v tokens, waited %v, got %v, still short of %d", rate, tokens, w, got, n)
			}
		}
	}
}

// TestEffectiveRate proves the adaptive-rate reading: a stored 0 means the
// configured rate, a stored rate above the configured one is cut to it, and
// an unlimited subscriber has no rate at all.
func TestEffectiveRate(t *testing.T) {
	t.Parallel()
	l := ratelimit.Limit{Rate: 100, Burst: 100}
	tests := []struct {
		name   string
		stored float64
		l      ratelimit.Limit
		want   float64
	}{
		{"zero means configured", 0, l, 100},
		{"negative means configured", -3, l, 100},
		{"below configured is in force", 50, l, 50},
		{"floor is in force", 100.0 / 64, l, 100.0 / 64},
		{"equal to configured", 100, l, 100},
		{"above configured is cut", 250, l, 100},
		{"configured lowered since", 80, ratelimit.Limit{Rate: 40, Burst: 40}, 40},
		{"unlimited rate 0", 50, ratelimit.Limit{Rate: 0}, 0},
		{"unlimited negative", 50, ratelimit.Limit{Rate: -1, Burst: 10}, 0},
		{"unlimited infinite", 50, ratelimit.Limit{Rate: math.Inf(1)}, 0},
	}
	for _, tt := range tests {
		if got := ratelimit.EffectiveRate(ratelimit.State{Rate: tt.stored}, tt.l); got != tt.want {
			t.Errorf("%s: EffectiveRate(stored %v, %+v) = %v, want %v", tt.name, tt.stored, tt.l, got, tt.want)
		}
	}
}

// TestLimitUnlimited proves which limits let every request through: a rate
// of zero, below zero or infinite.
func TestLimitUnlimited(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		l    ratelimit.Limit
		want bool
	}{
		{ratelimit.Limit{}, true},
		{ratelimit.Limit{Rate: -1}, true},
		{ratelimit.Limit{Rate: math.Inf(1)}, true},
		{ratelimit.Limit{Rate: 0.01}, false},
		{ratelimit.Limit{Rate: 50, Burst: 50}, false},
	} {
		if got := tt.l.Unlimited(); got != tt.want {
			t.Errorf("%+v.Unlimited() = %v, want %v", tt.l, got, tt.want)
		}
	}
}

// TestDecrease proves the multiplicative decrease: a 429 halves the rate in
// force, never below rate/64.
func TestDecrease(t *testing.T) {
	t.Parallel()
	l := ratelimit.Limit{Rate: 64, Burst: 64}
	tests := []struct {
		current, want float64
	}{
		{64, 32},
		{32, 16},
		{3, 1.5},
		{2, 1},
		{1.5, 1},
		{1, 1},
		{0.5, 1},
	}
	for _, tt := range tests {
		if got := ratelimit.Decrease(tt.current, l); got != tt.want {
			t.Errorf("Decrease(%v, %+v) = %v, want %v", tt.current, l, got, tt.want)
		}
	}
	// Halving over and over settles on the floor.
	l = ratelimit.Limit{Rate: 100, Burst: 100}
	r := l.Rate
	var steps []float64
	for range 10 {
		r = ratelimit.Decrease(r, l)
		steps = append(steps, r)
	}
	want := []float64{50, 25, 12.5, 6.25, 3.125, 1.5625, 1.5625, 1.5625, 1.5625, 1.5625}
	for i := range want {
		if steps[i] != want[i] {
			t.Fatalf("halving 100 ten times: %v, want %v", steps, want)
		}
	}
	if floor := l.Rate * ratelimit.MinRateFraction; r != floor {
		t.Errorf("floor = %v, want rate/64 = %v", r, floor)
	}
}

// TestDecreaseDue proves the window of the decrease: a 429 lowers the rate
// when no decrease was recorded, or the last one is at least DecreaseWindow
// old, and never within that window of it.
func TestDecreaseDue(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		decreasedAt time.Time
		now         time.Time
		want        bool
	}{
		{"never decreased", time.Time{}, t0, true},
		{"just decreased", t0, t0, false},
		{"within the window", t0, t0.Add(ratelimit.DecreaseWindow - time.Nanosecond), false},
		{"the window is over", t0, t0.Add(ratelimit.DecreaseWindow), true},
		{"long after", t0, t0.Add(time.Hour), true},
		{"a clock behind the decrease", t0, t0.Add(-time.Second), false},
	}
	for _, tt := range tests {
		st := ratelimit.State{DecreasedAt: tt.decreasedAt}
		if got := st.DecreaseDue(tt.now); got != tt.want {
			t.Errorf("%s: DecreaseDue = %v, want %v", tt.name, got, tt.want)
		}
	}
	if ratelimit.DecreaseWindow != ratelimit.LeaseTTL {
		t.Errorf("DecreaseWindow %v, want one lease (%v)", ratelimit.DecreaseWindow, ratelimit.LeaseTTL)
	}
}

// TestIncrease proves the additive increase: each window of successes adds
// a tenth of the configured rate, never going above it.
func TestIncrease(t *testing.T) {
	t.Parallel()
	l := ratelimit.Limit{Rate: 100, Burst: 100}
	tests := []struct {
		current, want float64
	}{
		{1.5625, 11.5625},
		{50, 60},
		{89.9, 99.9},
		{90, 100},
		{95, 100},
		{100, 100},
		{150, 100},
	}
	for _, tt := range tests {
		if got := ratelimit.Increase(tt.current, l); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("Increase(%v, %+v) = %v, want %v", tt.current, l, got, tt.want)
		}
	}
	// From the floor back to the configured rate takes ten windows.
	r, windows := l.Rate*ratelimit.MinRateFraction, 0
	for r < l.Rate {
		next := ratelimit.Increase(r, l)
		if next <= r || next > l.Rate {
			t.Fatalf("Increase(%v) = %v: not a step up within the configured rate", r, next)
		}
		r = next
		windows++
	}
	if windows != 10 {
		t.Errorf("floor back to configured in %d windows, want 10", windows)
	}
}

// TestSuccessWindow proves how many successes in a row raise the rate: as
// many as the rate in force allows in a second, at least one.
func TestSuccessWindow(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		rate float64
		want int
	}{
		{0, 1},
		{-1, 1},
		{0.5, 1},
		{1, 1},
		{1.5625, 2},
		{2.5, 3},
		{10, 10},
		{50, 50},
		{100, 100},
		{5000, 5000},
	} {
		if got := ratelimit.SuccessWindow(tt.rate); got != tt.want {
			t.Errorf("SuccessWindow(%v) = %d, want %d", tt.rate, got, tt.want)
		}
	}
}

// TestCooldown proves the breaker's cool-down: base × 2^opens, capped at the
// ceiling, without overflowing for a huge number of opens, and a negative
// count read as the first cool-down.
func TestCooldown(t *testing.T) {
	t.Parallel()
	const (
		base    = 5 * time.Second
		ceiling = 15 * time.Minute
	)
	tests := []struct {
		opens int
		want  time.Duration
	}{
		{0, 5 * time.Second},
		{1, 10 * time.Second},
		{2, 20 * time.Second},
		{3, 40 * time.Second},
		{4, 80 * time.Second},
		{5, 160 * time.Second},
		{6, 320 * time.Second},
		{7, 640 * time.Second},
		{8, ceiling},
		{9, ceiling},
		{30, ceiling},
		{61, ceiling},
		{62, ceiling},
		{63, ceiling},
		{64, ceiling},
		{1000, ceiling},
		{math.MaxInt, ceiling},
		{-1, base},
		{math.MinInt, base},
	}
	for _, tt := range tests {
		got := ratelimit.Cooldown(tt.opens, base, ceiling)
		if got != tt.want {
			t.Errorf("Cooldown(%d, %v, %v) = %v, want %v", tt.opens, base, ceiling, got, tt.want)
		}
		if got <= 0 || got > ceiling {
			t.Errorf("Cooldown(%d) = %v, outside (0, %v]", tt.opens, got, ceiling)
		}
	}
	// Every count doubles until the ceiling and never comes back down.
	prev := time.Duration(0)
	for opens := range 200 {
		got := ratelimit.Cooldown(opens, base, ceiling)
		if got < prev || got > ceiling || (got != ceiling && got != 2*prev && opens > 0) {
			t.Fatalf("Cooldown(%d) = %v after %v", opens, got, prev)
		}
		prev = got
	}
	// A base above the ceiling is cut to it; a ceiling near the largest
	// duration does not overflow.
	if got := ratelimit.Cooldown(0, time.Hour, ceiling); got != ceiling {
		t.Errorf("Cooldown(0, 1h, 15m) = %v, want %v", got, ceiling)
	}
	huge := time.Duration(math.MaxInt64)
	for _, opens := range []int{0, 1, 40, 61, 62, 63, 100} {
		if got := ratelimit.Cooldown(opens, time.Second, huge); got <= 0 || got > huge {
			t.Errorf("Cooldown(%d, 1s, max) = %v: overflowed", opens, got)
		}
	}
}

// TestCooldownScheduleOverAnHour proves the arithmetic behind "an endpoint
// down for an hour is probed about eleven times": with the defaults, the
// threshold failures plus the failed probes of one hour stay at most
// 12 + threshold.
func TestCooldownScheduleOverAnHour(t *testing.T) {
	t.Parallel()
	// Failures one second apart open the breaker at the threshold-th one;
	// from then on each failed probe reopens it for the next cool-down.
	at := time.Duration(ratelimit.DefaultConsecutive-1) * time.Second
	requests := ratelimit.DefaultConsecutive
	for opens := 0; ; opens++ {
		at += ratelimit.Cooldown(opens, ratelimit.DefaultCooldown, ratelimit.DefaultMaxCooldown)
		if at >= time.Hour {
			break
		}
		requests++
	}
	t.Logf("an hour of failures lets %d requests through (threshold %d)", requests, ratelimit.DefaultConsecutive)
	if requests > 12+ratelimit.DefaultConsecutive {
		t.Errorf("%d requests in an hour, want at most %d", requests, 12+ratelimit.DefaultConsecutive)
	}
}

// TestCircuitAt proves the breaker states: closed without an OpenUntil,
// open before it, half-open from it on (whatever the failure count says).
func TestCircuitAt(t *testing.T) {
	t.Parallel()
	open := t0.Add(5 * time.Second)
	tests := []struct {
		name  string
		state ratelimit.State
		now   time.Time
		want  ratelimit.Circuit
	}{
		{"fresh", ratelimit.State{}, t0, ratelimit.Closed},
		{"failures below the threshold", ratelimit.State{Failures: 4}, t0, ratelimit.Closed},
		{"failures but never opened", ratelimit.State{Failures: 100}, t0.Add(time.Hour), ratelimit.Closed},
		{"during the cool-down", ratelimit.State{OpenUntil: open, Opens: 1}, t0, ratelimit.Open},
		{"a nanosecond before its end", ratelimit.State{OpenUntil: open}, open.Add(-1), ratelimit.Open},
		{"at its end", ratelimit.State{OpenUntil: open}, open, ratelimit.HalfOpen},
		{"after its end", ratelimit.State{OpenUntil: open}, open.Add(time.Hour), ratelimit.HalfOpen},
		{"probe claimed", ratelimit.State{OpenUntil: open, ProbeUntil: open.Add(time.Minute)}, open.Add(time.Second), ratelimit.HalfOpen},
	}
	for _, tt := range tests {
		if got := tt.state.CircuitAt(tt.now); got != tt.want {
			t.Errorf("%s: CircuitAt = %q, want %q", tt.name, got, tt.want)
		}
	}
}

// TestVerdictString proves the names a Verdict is logged and shown under.
func TestVerdictString(t *testing.T) {
	t.Parallel()
	for h, want := range map[ratelimit.Verdict]string{
		ratelimit.Go:          "go",
		ratelimit.Token:       "token",
		ratelimit.Paused:      "paused",
		ratelimit.CircuitOpen: "circuit_open",
		ratelimit.Verdict(42): "unknown",
	} {
		if got := h.String(); got != want {
			t.Errorf("Verdict(%d).String() = %q, want %q", int(h), got, want)
		}
	}
}
