package streams

import (
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// Headers relay sets on the copies it keeps in DELIVERIES and DLQ
// (docs/headers.md). The fan-out writes them and the lanes and dead-letter
// tools read them, so they live beside the streams they describe.
const (
	HeaderEventID     = "Relay-Event-Id"
	HeaderEventType   = "Relay-Event-Type"
	HeaderPublishedAt = "Relay-Published-At"
	HeaderDeadline    = "Relay-Deadline"
	// HeaderDeliverAt is an event's due time, set by its publisher: no
	// request for it before then. The fan-out holds a copy that is not due
	// in RETRIES (on retries.at.<subscriber>.<id>) until it is.
	HeaderDeliverAt      = "Relay-Deliver-At"
	HeaderAttempt        = "Relay-Attempt"
	HeaderFirstAttemptAt = "Relay-First-Attempt-At"
	HeaderReason         = "Relay-Reason"
	HeaderAttempts       = "Relay-Attempts"
	HeaderLastStatus     = "Relay-Last-Status"
	HeaderLastError      = "Relay-Last-Error"
	HeaderDeadAt         = "Relay-Dead-At"
	HeaderOriginSeq      = "Relay-Origin-Seq"
	// HeaderOriginSubject is the DELIVERIES subject a dead letter came
	// from, deliveries.<lane>.<subscriber>, for a replay by hand.
	HeaderOriginSubject = "Relay-Origin-Subject"
	// HeaderOverflowSeq marks a delivery brought back from its subscriber's
	// overflow: the DELIVERIES sequence it waited at. A lane takes such a
	// message into its subscriber's queue whatever the queue holds, since
	// it was brought back only because there was room for it.
	HeaderOverflowSeq = "Relay-Overflow-Seq"
	// HeaderEventSeq marks a delivery that carries no body: its body is the
	// event's at this EVENTS sequence, stored once in BODIES (and in
	// EVENTS) for all the event's deliveries. Whatever writes the delivery
	// anew (a retry, a move to overflow, a dead letter) writes the body
	// into it and drops this header.
	HeaderEventSeq         = "Relay-Event-Seq"
	HeaderContentType      = "Content-Type"
	headerNatsPrefixLength = len("nats-")
)

// HeaderValue returns the first value of a header whatever the case of its
// name: NATS headers are case-sensitive, but publishers write Content-Type
// and content-type alike.
func HeaderValue(h nats.Header, name string) string {
	if v := h.Get(name); v != "" {
		return v
	}
	for k, v := range h {
		if len(v) > 0 && strings.EqualFold(k, name) {
			return v[0]
		}
	}
	return ""
}

// IsNatsHeader reports whether a header is one of JetStream's own (Nats-*),
// which are stripped when relay copies a message.
func IsNatsHeader(name string) bool {
	return len(name) >= headerNatsPrefixLength && strings.EqualFold(name[:headerNatsPrefixLength], "nats-")
}

// CopyHeader returns a copy of h for a message relay publishes anew: every
// Nats-* header of the original is dropped (JetStream would take them as
// instructions for the new copy) and the rest is copied deeply, so the
// caller may change it. extra is room for the headers the caller will set.
func CopyHeader(h nats.Header, extra int) nats.Header {
	out := make(nats.Header, len(h)+extra)
	for k, v := range h {
		if !IsNatsHeader(k) {
			out[k] = append([]string(nil), v...)
		}
	}
	return out
}

// AttemptsOf reads the attempts a delivery has had and when the first
// started, from the Relay-Attempt and Relay-First-Attempt-At it rides with:
// 0 and the zero time for a fresh one, or for values relay did not write (a
// negative or unreadable count).
func AttemptsOf(h nats.Header) (attempts int, firstAt time.Time) {
	// Most deliveries carry neither header: a parse of "" would build an
	// error for each of them.
	if v := h.Get(HeaderAttempt); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n > 0 {
			attempts = n
		}
	}
	if v := h.Get(HeaderFirstAttemptAt); v != "" {
		firstAt, _ = time.Parse(time.RFC3339Nano, v)
	}
	return attempts, firstAt
}
