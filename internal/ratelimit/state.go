package ratelimit

import (
	"math"
	"time"
)

// Limit is a subscriber's configured rate: Burst tokens of capacity,
// refilled at Rate tokens per second. A Rate of zero or less means
// unlimited (pause and breaker still apply).
type Limit struct {
	Rate  float64
	Burst int
	// Breaker is the subscriber's circuit-breaker rule.
	Breaker Breaker
}

// Unlimited reports whether the limit lets every request through.
func (l Limit) Unlimited() bool { return l.Rate <= 0 || math.IsInf(l.Rate, 1) }

func (l Limit) capacity() float64 { return math.Max(1, float64(l.Burst)) }

// State is one subscriber's shared flow-control state, the JSON value of its
// key in relay_ratelimit. Times are the server's.
type State struct {
	// Tokens left in the bucket at At.
	Tokens float64 `json:"tokens"`
	// At is the server time the tokens were counted up to. It only moves
	// forward, and the next refill starts from the later of it and the
	// entry's own timestamp: a relay whose clock runs ahead of the server's
	// counts some time early, but never twice.
	At time.Time `json:"at,omitzero"`
	// Rate is the adaptive rate in force; 0 means the configured rate.
	Rate float64 `json:"rate,omitempty"`
	// DecreasedAt is the server time of the last decrease of Rate. It is
	// kept in the shared entry, not by each relay, so that a 429 seen by
	// any relay within DecreaseWindow of it lowers the rate no further.
	DecreasedAt time.Time `json:"decreased_at,omitzero"`
	// PausedUntil: no request before this time (Retry-After).
	PausedUntil time.Time `json:"paused_until,omitzero"`
	// Failures is how many failures the window of the relay that opened
	// the circuit held when it did (see [Breaker]), kept until a success
	// closes it, for relay status. The count itself is each relay's own,
	// never written per failure. (An entry of a relay before the rule by
	// share holds the consecutive failures; a success clears it alike.)
	Failures int `json:"failures,omitempty"`
	// OpenUntil is the end of the breaker's cool-down; zero when closed.
	// Past it the breaker is half-open: one probe may go.
	OpenUntil time.Time `json:"open_until,omitzero"`
	// Opens counts the cool-downs in a row, which makes each one longer.
	Opens int `json:"opens,omitempty"`
	// ProbeUntil is when a half-open breaker's probe, claimed by one relay,
	// is given up for lost (that relay died) and another may probe.
	ProbeUntil time.Time `json:"probe_until,omitzero"`
}

// epsilon absorbs the rounding of many small refills (ten refills of 0.1
// must make a whole token).
const epsilon = 1e-9

// Refill returns the tokens a bucket holds at now, given that it held tokens
// at written. Time running backwards adds nothing.
func Refill(tokens float64, written, now time.Time, rate float64, l Limit) float64 {
	if now.After(written) && rate > 0 {
		tokens += now.Sub(written).Seconds() * rate
	}
	return math.Min(tokens, l.capacity())
}

// LeaseWindow is how much of a subscriber's rate one lease holds.
const LeaseWindow = 100 * time.Millisecond

// LeaseTTL is how long a relay may spend a lease before the rest of it is
// forgotten; it also bounds how stale a relay's view of a pause or an open
// circuit can be.
const LeaseTTL = LeaseWindow

// LeaseSize is how many tokens one lease takes: what the subscriber may
// spend in LeaseWindow at rate (rounded down, as docs/delivery-rules.md bounds a lease by
// max(1, rate × 0.1)), at least one, and at most half the bucket.
// A relay waits for a whole lease before it asks; if a lease were the whole
// bucket, every moment between the bucket filling up and the relay's write
// landing would be refill thrown away (measured: 92% of the rate with three
// relays on a 50/s, burst 5 subscriber, 97% with the half-bucket bound).
func LeaseSize(rate float64, l Limit) int {
	n := int(math.Floor(rate*LeaseWindow.Seconds() + epsilon))
	return max(1, min(n, int(l.capacity())/2))
}

// TokensAt is what the bucket of an entry written at written holds at now,
// refilled at the rate in force from the later of written and At.
func (s State) TokensAt(written, now time.Time, l Limit) float64 {
	return Refill(s.Tokens, refillFrom(s, written), now, EffectiveRate(s, l), l)
}

// refillFrom is where the next refill of an entry starts.
func refillFrom(s State, written time.Time) time.Time {
	if s.At.After(written) {
		return s.At
	}
	return written
}

// maxWait bounds WaitFor: a caller asks again after it at the latest, and
// the arithmetic of a tiny rate stays within a time.Duration.
const maxWait = time.Hour

// WaitFor is how long a bucket holding tokens needs to hold want, at most
// maxWait.
func WaitFor(tokens float64, want int, rate float64) time.Duration {
	missing := float64(want) - tokens
	if missing <= epsilon || rate <= 0 {
		return 0
	}
	secs := missing / rate
	if secs >= maxWait.Seconds() {
		return maxWait
	}
	d := time.Duration(math.Ceil(secs * float64(time.Second)))
	return max(d, time.Millisecond)
}

// AIMD tuning: a 429 halves the rate in force, at most once per
// DecreaseWindow, down to MinRateFraction of the configured one; each window
// of successes (as many as the rate in force allows in AIMDWindow) raises it
// by AIMDStep of the configured rate.
const (
	MinRateFraction = 1.0 / 64
	AIMDStep        = 0.1
	AIMDWindow      = time.Second
)

// DecreaseWindow is how long after a decrease further 429s lower the rate no
// more. It is one lease: requests granted before the decrease are spent
// within LeaseTTL of it, at the old rate, so the 429s they draw say nothing
// the first one did not. Counting each of them would halve the rate once
// per request in flight (sixteen concurrent 429s would divide it by 2^16,
// down to the floor) for a single overshoot.
const DecreaseWindow = LeaseTTL

// DecreaseDue reports whether a 429 at server time now may lower the rate
// in force: no decrease was recorded within DecreaseWindow before it.
func (s State) DecreaseDue(now time.Time) bool {
	return s.DecreasedAt.IsZero() || !now.Before(s.DecreasedAt.Add(DecreaseWindow))
}

// EffectiveRate is the rate in force for a state and a configured limit.
func EffectiveRate(s State, l Limit) float64 {
	if l.Unlimited() {
		return 0
	}
	if s.Rate <= 0 || s.Rate > l.Rate {
		return l.Rate
	}
	return s.Rate
}

// Decrease is the rate in force after a 429 that DecreaseDue lets count:
// half the current one, never below MinRateFraction of the configured rate.
func Decrease(current float64, l Limit) float64 {
	return math.Max(current/2, l.Rate*MinRateFraction)
}

// Increase is the rate in force after a window of successes.
func Increase(current float64, l Limit) float64 {
	return math.Min(l.Rate, current+l.Rate*AIMDStep)
}

// SuccessWindow is how many successes in a row raise the rate in force.
func SuccessWindow(current float64) int {
	return max(1, int(math.Ceil(current*AIMDWindow.Seconds())))
}

// Breaker tuning. Defaults of Options; the rule that opens the circuit is
// the subscriber's [Breaker].
const (
	DefaultCooldown    = 5 * time.Second
	DefaultMaxCooldown = 15 * time.Minute
)

// Cooldown is the length of the opens-th cool-down in a row (from 0):
// base × 2^opens, at most ceiling. With 5 s and 15 min, an endpoint down
// for an hour is probed about eleven times.
func Cooldown(opens int, base, ceiling time.Duration) time.Duration {
	if opens < 0 {
		opens = 0
	}
	if opens >= 62 || base > ceiling>>opens {
		return ceiling
	}
	return base << opens
}

// Circuit is a breaker state, as `relay status` shows it.
type Circuit string

// The breaker states.
const (
	Closed   Circuit = "closed"
	Open     Circuit = "open"
	HalfOpen Circuit = "half-open"
)

// CircuitAt is the breaker state at now.
func (s State) CircuitAt(now time.Time) Circuit {
	switch {
	case s.OpenUntil.IsZero():
		return Closed
	case now.Before(s.OpenUntil):
		return Open
	default:
		return HalfOpen
	}
}
