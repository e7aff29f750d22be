package ratelimit

import (
	"context"
	"errors"
	"time"
)

// Hold says why a request may not go now.
type Hold int

// The reasons a Decision holds a request.
const (
	// Go: a token was taken; send now.
	Go Hold = iota
	// Token: the bucket needs refilling.
	Token
	// Paused: the subscriber asked for a pause (Retry-After).
	Paused
	// CircuitOpen: the breaker is open, or another relay is probing.
	CircuitOpen
)

// String names a Hold for logs.
func (h Hold) String() string {
	switch h {
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
	// Hold is Go when the request may be sent now.
	Hold Hold
	// Wait is how long until asking again can give Go.
	Wait time.Duration
	// Probe marks the one request a half-open breaker lets through; its
	// outcome closes or reopens the breaker.
	Probe bool
}

// Result is what an attempt told about the subscriber.
type Result struct {
	// Success: a 2xx.
	Success bool
	// Failure counts toward the breaker: a connection failure, a timeout,
	// a 5xx.
	Failure bool
	// Throttled: a 429 without a usable Retry-After; the rate in force is
	// halved.
	Throttled bool
	// PauseFor pauses the whole subscriber: a Retry-After on a 429 or 503,
	// or RateLimit-Remaining: 0 with its reset.
	PauseFor time.Duration
	// Probe repeats Decision.Probe of the request.
	Probe bool
}

// Limiter is what the lanes ask before every request and tell after it.
type Limiter interface {
	// Reserve takes one token for the subscriber and returns a Go decision,
	// or says why and how long the request must wait, taking nothing.
	Reserve(ctx context.Context, subscriber string, l Limit) (Decision, error)
	// Observe records the outcome of an attempt.
	Observe(ctx context.Context, subscriber string, l Limit, r Result) error
}

// ErrBucket is returned when the relay_ratelimit bucket cannot be used.
var ErrBucket = errors.New("ratelimit: relay_ratelimit bucket")
