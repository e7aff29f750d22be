package retry

import (
	"math/rand/v2"
	"time"

	"github.com/relay-dev/relay/internal/deliver"
)

// DefaultMaxPause bounds a subscriber's Retry-After (--max-pause): a
// receiver answering "Retry-After: 31536000" must not park an event for a
// year.
const DefaultMaxPause = time.Hour

// Policy decides how long after a failed attempt the next one may start.
// attempt counts the attempts made so far, from 1.
type Policy interface {
	NextRetry(attempt int, out deliver.Outcome) time.Duration
}

// Exponential is the default Policy: min(Max, Base × 2^(attempt−1)) ×
// U(0.5, 1.0). The jitter spreads the retries of a burst that failed
// together, so a recovering subscriber is not hit by all of them at once;
// keeping at least half the delay keeps the schedule's total, and so the
// time a subscriber has to recover (about two hours with 5 s, 1 h and 12
// attempts), predictable.
//
// A Retry-After on the outcome can only lengthen that delay: the next
// attempt waits max(back-off, Retry-After), the Retry-After bounded by
// MaxPause. The subscriber said when it can take the message, so retrying
// sooner is pointless; but a Retry-After shorter than the back-off must not
// shorten it either, or a receiver that answers every request with
// "429, Retry-After: 1" would spend all of a message's attempts within
// seconds instead of the hours the back-off gives it to recover.
type Exponential struct {
	// Base is the delay before the first retry. Defaults to 5s.
	Base time.Duration
	// Max caps the computed delay. Defaults to 1h.
	Max time.Duration
	// MaxPause caps a Retry-After, not the back-off, which Max caps.
	// Defaults to DefaultMaxPause.
	MaxPause time.Duration
	// Jitter returns a number in [0, 1). Defaults to rand.Float64.
	Jitter func() float64
}

// NextRetry implements Policy.
func (e Exponential) NextRetry(attempt int, out deliver.Outcome) time.Duration {
	base, ceiling := cmpOr(e.Base, 5*time.Second), cmpOr(e.Max, time.Hour)
	d := ceiling
	// base × 2^(attempt−1), stopping before it overflows or passes the cap.
	if shift := attempt - 1; shift >= 0 && shift < 62 && base <= ceiling>>shift {
		d = base << shift
	}
	jitter := rand.Float64
	if e.Jitter != nil {
		jitter = e.Jitter
	}
	d = time.Duration(float64(d) * (0.5 + 0.5*jitter()))
	// Only a valid header counts. A Retry-After of 0, or a date already
	// past, asks for no wait, so it leaves the back-off as it is.
	if out.RetryAfterSet && out.RetryAfter > 0 {
		d = max(d, min(out.RetryAfter, cmpOr(e.MaxPause, DefaultMaxPause)))
	}
	return d
}

func cmpOr(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}
