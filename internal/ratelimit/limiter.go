package ratelimit

import (
	"context"
	"errors"
	"time"
)

// Verdict says whether a request may go now, and if not, why.
type Verdict int

// The verdicts of a Decision.
const (
	// Go: a token was taken; send now.
	Go Verdict = iota
	// Token: the bucket needs refilling.
	Token
	// Paused: the subscriber asked for a pause (Retry-After).
	Paused
	// CircuitOpen: the breaker is open, or another relay is probing.
	CircuitOpen
)

// String names a Verdict for logs.
func (v Verdict) String() string {
	switch v {
	case Go:
		return "go"
	case Token:
		return "token"
	case Paused:
		return "paused"
	case CircuitOpen:
		return "circuit_open"
	}
	return "unknown"
}

// Decision is the answer to Reserve.
type Decision struct {
	// Verdict is Go when the request may be sent now.
	Verdict Verdict
	// Wait is how long until asking again can give Go.
	Wait time.Duration
	// Probe marks the one request a half-open breaker lets through; its
	// outcome closes or reopens the breaker.
	Probe bool
	// Gen is the generation of the circuit the request was let through
	// in; Result.Gen repeats it.
	Gen uint64
}

// Result is what an attempt told about the subscriber.
type Result struct {
	// Success: a 2xx.
	Success bool
	// Failure counts toward the breaker: a connection failure, a timeout,
	// a 5xx.
	Failure bool
	// Throttled: the subscriber answered 429, with or without a
	// Retry-After. Every 429 says the rate in force is too high, whether or
	// not the subscriber also said how long to wait, so it halves that rate
	// (down to MinRateFraction of the configured one), at most once per
	// DecreaseWindow for the subscriber over all relays: the other 429s of
	// the same window answer requests sent before the decrease.
	Throttled bool
	// PauseFor pauses the whole subscriber: a Retry-After on a 429 or 503,
	// or RateLimit-Remaining: 0 with its reset. It is independent of
	// Throttled: a 429 with a Retry-After sets both, and the pause and the
	// decrease both apply, since a pause alone would let the same rate
	// overshoot again the moment it ends.
	PauseFor time.Duration
	// Probe repeats Decision.Probe of the request.
	Probe bool
	// Gen repeats Decision.Gen of the request: the breaker does not count
	// the outcome of a request sent before the circuit last opened or
	// closed. Zero is always counted.
	Gen uint64
	// Status is the HTTP status of the answer, 0 without one; told to
	// Options.Notify.
	Status int
}

// Notifier is told of the changes of a subscriber's flow control that this
// relay's writes made, each by the one relay whose compare-and-set made it
// (relay run announces them as operational events), whatever delivery's
// answer made it: a pause or a circuit is the subscriber's, and an end not
// told would leave the start told without it. Its methods must not block:
// they are called on the request's path.
type Notifier interface {
	// Paused: a pause until until was stored, or moved later, after an
	// answer of status.
	Paused(subscriber string, until time.Time, status int)
	// CircuitOpened: the circuit opened until until, its opens-th time in
	// a row, after an answer of status (0: no answer).
	CircuitOpened(subscriber string, until time.Time, opens int, status int)
	// CircuitClosed: a success closed the circuit that was open until
	// openUntil.
	CircuitClosed(subscriber string, openUntil time.Time)
}

// Limiter is what the lanes ask before every request and tell after it.
type Limiter interface {
	// Reserve takes one token for the subscriber and returns a Go decision,
	// or says why and how long the request must wait, taking nothing.
	Reserve(ctx context.Context, subscriber string, l Limit) (Decision, error)
	// Observe records the outcome of an attempt.
	Observe(ctx context.Context, subscriber string, l Limit, r Result) error
	// InFlight is how many requests to the subscriber may be in flight
	// at once from this relay, of most (its --max-in-flight): fewer while
	// its failures degrade it (see DegradeFrom).
	InFlight(subscriber string, most int) int
}

// ErrBucket is returned when the relay_ratelimit bucket cannot be used.
var ErrBucket = errors.New("relay_ratelimit bucket")
