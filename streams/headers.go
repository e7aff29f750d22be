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
// instructions for the new copy), and so is every header a drop func
// names; the rest is copied deeply, so the caller may change it. extra is
// room for the headers the caller will set.
func CopyHeader(h nats.Header, extra int, drop ...func(name string) bool) nats.Header {
	out := make(nats.Header, len(h)+extra)
next:
	for k, v := range h {
		if IsNatsHeader(k) {
			continue
		}
		for _, d := range drop {
			if d(k) {
				continue next
			}
		}
		out[k] = append([]string(nil), v...)
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

// TimeOf reads a business-time header (Relay-Deliver-At, Relay-Deadline):
// zero when absent; malformed, naming the header and its value, when it is
// not RFC 3339. An unreadable time is never taken for none: a deadline
// ignored would send late, a due time ignored would send early.
func TimeOf(h nats.Header, name string) (at time.Time, malformed string) {
	v := HeaderValue(h, name)
	if v == "" {
		return time.Time{}, ""
	}
	at, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, name + " " + strconv.Quote(cut(v, 64)) + " is not an RFC 3339 time (such as 2026-12-04T10:00:00Z)"
	}
	return at, ""
}

// Malformed says why an event's (or a delivery's) headers cannot be
// honoured, "" when they can: a Relay-Deliver-At or Relay-Deadline that is
// not RFC 3339, or a Content-Type that holds a control character (it cannot
// go into an HTTP request). Such an event is dead-lettered as malformed,
// with no request made.
func Malformed(h nats.Header) string {
	for _, name := range []string{HeaderDeliverAt, HeaderDeadline} {
		if _, why := TimeOf(h, name); why != "" {
			return why
		}
	}
	return MalformedContentType(h)
}

// MalformedContentType is the part of [Malformed] about Content-Type.
func MalformedContentType(h nats.Header) string {
	if ct := HeaderValue(h, HeaderContentType); strings.ContainsFunc(ct, isControl) {
		return HeaderContentType + " " + strconv.Quote(cut(ct, 64)) + " holds a control character"
	}
	return ""
}

// isControl reports the runes an HTTP header value cannot hold.
func isControl(r rune) bool { return (r < 0x20 && r != '\t') || r == 0x7f }

// cut shortens s to at most n bytes, for a message.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
