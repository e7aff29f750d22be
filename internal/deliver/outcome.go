package deliver

import (
	"net/http"
	"strconv"
	"time"
)

// Class is what an attempt's result means for the message, and is all a lane
// needs to decide between ack, retry, dead-letter and pause. The zero value is
// not a class, so an Outcome that was never filled in cannot pass for one.
type Class int

const (
	// Delivered means the subscriber answered 2xx: ack the message.
	Delivered Class = iota + 1
	// Retryable means the failure may be transient (408, 425, 429, 5xx,
	// timeout, connection failure, a reply that is not HTTP): try again later.
	Retryable
	// Rejected means the subscriber refused this message for good (any other
	// status, including 3xx since redirects are not followed), or the request
	// could not be built: dead-letter it with reason "rejected".
	Rejected
	// Gone means the subscriber answered 410: dead-letter the message with
	// reason "gone" and disable the subscriber.
	Gone
	// Refused means the SSRF guard refused the address that was about to be
	// dialled; nothing was sent. Dead-letter with reason "refused".
	Refused
	// Local means the attempt failed on this side, through no fault of the
	// subscriber: the dial found no file descriptor, socket buffer, memory
	// or local port, or the caller's context was cancelled (the relay
	// stopping) before a reply came. docs/delivery-rules.md makes such a failure neither
	// an attempt nor a breaker failure, so the caller hands the message back
	// without counting it: blaming the subscriber would burn its attempts
	// and open its circuit for a fault of the relay's own.
	Local
)

// String returns the class's name as used in dead-letter reasons, logs and
// metric labels.
func (c Class) String() string {
	switch c {
	case Delivered:
		return "delivered"
	case Retryable:
		return "retryable"
	case Rejected:
		return "rejected"
	case Gone:
		return "gone"
	case Refused:
		return "refused"
	case Local:
		return "local"
	}
	return "Class(" + strconv.Itoa(int(c)) + ")"
}

// Outcome is everything an attempt tells the caller: its class, and the
// details a dead-letter record, a pause or a metric needs.
type Outcome struct {
	// Class says what the attempt means for the message.
	Class Class
	// Status is the HTTP status of the reply, or 0 when there was none.
	Status int
	// RetryAfter is the wait the subscriber asked for with Retry-After,
	// already converted to a duration from the client's clock. It is set
	// only on 429 and 503, the statuses where docs/delivery-rules.md makes it pause the
	// whole subscriber.
	RetryAfter time.Duration
	// RetryAfterSet says whether RetryAfter came from a valid header, since
	// "Retry-After: 0" and no header at all mean different things.
	RetryAfterSet bool
	// Err explains every outcome but Delivered, with the status or the
	// transport error, and wraps one of ErrStatus, ErrTimeout,
	// ErrConnection, ErrRefused, ErrLocal or ErrInvalidRequest. It is nil
	// for Delivered.
	Err error
	// Body is the start of the reply's body (at most 1 KiB), kept for
	// dead-letter records: a subscriber's own words are the best clue to why
	// it rejected a message.
	Body string
	// Duration is how long the attempt took by the client's clock, from
	// sending the request to finishing with the reply.
	Duration time.Duration
	// Header is the reply's headers, for a [Request] with Inspect alone
	// (nil otherwise, and when there was no reply).
	Header http.Header
	// BodyCut says that the reply's body went on past Body, for a
	// [Request] with Inspect alone.
	BodyCut bool

	// QuotaExhausted reports RateLimit-Remaining: 0 (or X-RateLimit-Remaining:
	// 0) with a readable reset, on any response: the subscriber has said it
	// takes no more requests for QuotaReset, success or not.
	QuotaExhausted bool
	// QuotaReset is how long until the subscriber's quota resets.
	QuotaReset time.Duration
}

// classify maps a status code to its class under the delivery rules.
func classify(status int) Class {
	switch {
	case status >= 200 && status <= 299:
		return Delivered
	case status == http.StatusGone:
		return Gone
	case status == http.StatusRequestTimeout,
		status == http.StatusTooEarly,
		status == http.StatusTooManyRequests,
		status >= 500 && status <= 599:
		return Retryable
	}
	return Rejected
}
