package fanout

import (
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/internal/deadletter"
	"github.com/relay-dev/relay/streams"
)

// SubjectPrefix is what EVENTS subjects start with; the event type is the
// rest of the subject.
const SubjectPrefix = "events."

// EventID returns the id of an event as docs/headers.md defines it: the
// Nats-Msg-Id header, else EVENTS-<stream sequence>. The body is opaque
// bytes and never parsed: a body's own "id" is often an entity's, shared
// by many events ({"id":"ord_1","status":"paid"}, then "shipped"), and
// taking it would make the second a duplicate of the first. An id a
// webhook-id cannot carry as it is (a dot, a space) is made into one by
// deliver.WebhookID, the same way on every relay: the same event published
// again keeps its id.
//
// An id a copy's headers cannot carry byte for byte falls back to the
// sequence: longer than [MaxEventID] (a copy holds it twice, and a
// header block over 64 KiB is refused), or with a control character or
// leading or trailing spaces (NATS header values are trimmed, and a line
// break becomes a space, so two events would share one copy id).
func EventID(h nats.Header, seq uint64) string {
	if id := h.Get(jetstream.MsgIDHeader); headerStable(id) {
		return id
	}
	return "EVENTS-" + strconv.FormatUint(seq, 10)
}

// MaxEventID bounds an event id taken from Nats-Msg-Id, in bytes.
const MaxEventID = 1024

// StableID reports whether id, given as an event's Nats-Msg-Id, is the
// event's id ([EventID] keeps it): the HTTP API refuses an
// Idempotency-Key that would not be.
func StableID(id string) bool { return headerStable(id) }

// headerStable reports whether id is carried as it is by a NATS header.
func headerStable(id string) bool {
	if id == "" || len(id) > MaxEventID || id[0] == ' ' || id[len(id)-1] == ' ' {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c < ' ' || c == 0x7f {
			return false
		}
	}
	return true
}

// EventType is the subject after "events.".
func EventType(subject string) string { return strings.TrimPrefix(subject, SubjectPrefix) }

// CopyHeader returns the headers of a copy of an event: the original's,
// less every Nats-* header (the copy's own dedupe id is set by the caller),
// plus relay's identity headers.
func CopyHeader(orig nats.Header, id, eventType string, published time.Time) nats.Header {
	h := streams.CopyHeader(orig, 3, ownedByRelay)
	h.Set(streams.HeaderEventID, id)
	h.Set(streams.HeaderEventType, eventType)
	h.Set(streams.HeaderPublishedAt, published.UTC().Format(time.RFC3339Nano))
	return h
}

// ownedByRelay reports a header that only relay may set: a publisher's
// Relay-Attempt would otherwise make a fresh event look as if it had failed
// a dozen times. Relay-Deadline is the publisher's to set, and other
// Relay-* names are not relay's.
func ownedByRelay(name string) bool {
	for _, own := range relayOwned {
		if strings.EqualFold(name, own) {
			return true
		}
	}
	return false
}

var relayOwned = []string{
	streams.HeaderEventSeq, streams.HeaderEventID, streams.HeaderEventType, streams.HeaderPublishedAt,
	streams.HeaderAttempt, streams.HeaderFirstAttemptAt, streams.HeaderReason,
	streams.HeaderAttempts, streams.HeaderLastStatus, streams.HeaderLastError,
	streams.HeaderDeadAt, streams.HeaderOriginSeq, streams.HeaderOriginSubject, streams.HeaderOverflowSeq,
}

// times is what an event's headers say of when it may and must be sent.
type times struct {
	// deliverAt is its valid Relay-Deliver-At, zero when none.
	deliverAt time.Time
	// deadline is its valid Relay-Deadline, zero when none.
	deadline time.Time
	// due is when it may be sent: deliverAt, else its publication.
	due time.Time
	// tooLate, when not empty, says why the event can never be sent: due
	// at or after its deadline, or further past its publication than the
	// horizon (EVENTS' max age; 0: none), where it would outlive its own
	// record.
	tooLate string
	// malformed, when not empty, names a header that cannot be honoured
	// (see [streams.Malformed]): the event is dead-lettered as malformed.
	malformed string
}

// unsendable says why none of the event's copies can be sent, and under
// which reason it is dead-lettered; "" when they can.
func (t times) unsendable() (string, deadletter.Reason) {
	switch {
	case t.malformed != "":
		return t.malformed, deadletter.Malformed
	case t.tooLate != "":
		return t.tooLate, deadletter.Expired
	}
	return "", ""
}

// timesOf reads an event's Relay-Deliver-At and Relay-Deadline. A value
// that is not RFC 3339 is never taken for none: the event is malformed.
func timesOf(h nats.Header, published time.Time, horizon time.Duration) times {
	t := times{due: published}
	if at, _ := streams.TimeOf(h, streams.HeaderDeliverAt); !at.IsZero() {
		t.deliverAt, t.due = at, at
	}
	t.deadline, _ = streams.TimeOf(h, streams.HeaderDeadline)
	t.malformed = streams.Malformed(h)
	switch {
	case t.deliverAt.IsZero():
	case !t.deadline.IsZero() && !t.deliverAt.Before(t.deadline):
		t.tooLate = "due at " + t.deliverAt.UTC().Format(time.RFC3339) + ", not before its deadline " + t.deadline.UTC().Format(time.RFC3339)
	case horizon > 0 && t.deliverAt.After(published.Add(horizon)):
		t.tooLate = "due at " + t.deliverAt.UTC().Format(time.RFC3339) + ", more than EVENTS' max age (" + horizon.String() + ") after its publication"
	}
	return t
}
