package ratelimit

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/relay-dev/relay/internal/clock"
)

// Limit is a subscriber's token bucket: Burst tokens of capacity, refilled
// at Rate tokens per second. A Rate of zero or less means unlimited.
type Limit struct {
	Rate  float64
	Burst int
}

// Unlimited reports whether the limit lets every request through.
func (l Limit) Unlimited() bool { return l.Rate <= 0 || math.IsInf(l.Rate, 1) }

func (l Limit) capacity() float64 { return math.Max(1, float64(l.Burst)) }

// Limiter decides whether one more request may go to a subscriber now.
type Limiter interface {
	// Reserve takes one token for the subscriber and returns zero, or, when
	// none is available, takes nothing and returns how long until one will
	// be, so the caller can hold the message that long without asking again.
	Reserve(ctx context.Context, subscriber string, l Limit) (time.Duration, error)
}

// Local is an in-process token bucket per subscriber. It is exact for one
// relay; it does not share its budget with other relays.
type Local struct {
	clock   clock.Clock
	mu      sync.Mutex
	buckets map[string]*bucket
}

type bucket struct {
	tokens float64
	last   time.Time
}

// NewLocal returns a Local limiter reading time from c (clock.Real when nil).
func NewLocal(c clock.Clock) *Local {
	if c == nil {
		c = clock.Real
	}
	return &Local{clock: c, buckets: make(map[string]*bucket)}
}

// Reserve implements Limiter. A new bucket starts full, as a subscriber that
// has not been sent to for a while would be.
func (b *Local) Reserve(_ context.Context, subscriber string, l Limit) (time.Duration, error) {
	if l.Unlimited() {
		return 0, nil
	}
	now := b.clock.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	bk, ok := b.buckets[subscriber]
	if !ok {
		bk = &bucket{tokens: l.capacity(), last: now}
		b.buckets[subscriber] = bk
	}
	bk.tokens, bk.last = Refill(bk.tokens, bk.last, now, l)
	if bk.tokens >= 1-epsilon {
		bk.tokens = max(0, bk.tokens-1)
		return 0, nil
	}
	return WaitFor(bk.tokens, l), nil
}

// epsilon absorbs the rounding of many small refills (ten refills of 0.1
// must make a whole token).
const epsilon = 1e-9

// Refill returns the tokens a bucket holds at now, given that it held tokens
// at last, and the refill time to store with them. Time running backwards
// (another host's clock, a corrected wall clock) adds nothing.
func Refill(tokens float64, last, now time.Time, l Limit) (float64, time.Time) {
	if !now.After(last) {
		return math.Min(tokens, l.capacity()), last
	}
	tokens += now.Sub(last).Seconds() * l.Rate
	return math.Min(tokens, l.capacity()), now
}

// WaitFor is how long a bucket holding tokens (< 1) needs to refill one.
func WaitFor(tokens float64, l Limit) time.Duration {
	if l.Unlimited() || tokens >= 1-epsilon {
		return 0
	}
	d := time.Duration(math.Ceil((1 - tokens) / l.Rate * float64(time.Second)))
	return max(d, time.Millisecond)
}
