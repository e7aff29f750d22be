package deadletter

import (
	"fmt"
	"strings"

	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/streams"
)

// Reason says why a delivery was dead-lettered. It is the last token of the
// DLQ subject dlq.<subscriber>.<reason>, so that an operator can select, count
// or purge one kind of failure with plain subject filters.
type Reason string

// The reasons of docs/dead-letters.md "Reasons". Each is final: retrying the same
// request could not have succeeded, or the subscriber ran out of attempts or
// time.
const (
	// Gone means the subscriber answered 410 Gone; the lane also disables
	// the subscriber until `relay sub enable`.
	Gone Reason = "gone"
	// Rejected means the subscriber answered any other 4xx, or a 3xx:
	// redirects are not followed, since one could point anywhere.
	Rejected Reason = "rejected"
	// Refused means the SSRF guard refused the address that was about to be
	// dialled; no request was sent.
	Refused Reason = "refused"
	// MaxAttempts means the subscriber's --max-attempts attempts all failed.
	MaxAttempts Reason = "max_attempts"
	// Deadline means the next retry would have landed after the event's
	// Relay-Deadline, so it was not made: nothing is sent late.
	Deadline Reason = "deadline"
	// Expired means the delivery reached its lane after its Relay-Deadline
	// and was never attempted.
	Expired Reason = "expired"
	// Unroutable means the delivery's subscriber is not in the
	// relay_subscribers bucket: it reached a lane in a race with `relay sub
	// rm`, or was published on DELIVERIES for an id that never existed.
	// Nothing leaves the lanes without a trace, so it is kept here.
	Unroutable Reason = "unroutable"
	// Backlog means the fan-out did not queue the copy: its subscriber
	// already had --max-backlog deliveries waiting, or held more than its
	// fair share of a nearly full DELIVERIES. Shedding it keeps one
	// subscriber's outage from taking the stream's room, and with it every
	// other subscriber's fan-out; `relay dlq replay` queues it again.
	Backlog Reason = "backlog"
	// Malformed means the event's Relay-Deliver-At or Relay-Deadline is not
	// an RFC 3339 time, or its Content-Type holds a control character: it
	// cannot be sent as its publisher asked, so no request was made. Its
	// last error names the header and its value.
	Malformed Reason = "malformed"
	// BodyLost means the delivery carried its event's sequence
	// (Relay-Event-Seq) in place of its body, and neither BODIES nor
	// EVENTS could give that body: both answered without it (purged or
	// deleted by hand), or neither answered with it for a minute (see
	// bodies.GiveUp). No request was made. The dead letter has no body,
	// keeps its Relay-Event-Seq, and its last error names what was read
	// and what each stream answered; `relay dlq replay` skips it.
	BodyLost Reason = "body_lost"
)

// reasons lists every valid reason in the order of docs/dead-letters.md, for messages
// and help texts.
var reasons = []Reason{Gone, Rejected, Refused, MaxAttempts, Deadline, Expired, Unroutable, Backlog, Malformed, BodyLost}

// Reasons returns every valid reason, in the order docs/dead-letters.md lists them, so
// that a command can list them in its help and in its errors. The slice is a
// copy the caller may keep.
func Reasons() []Reason {
	return append([]Reason(nil), reasons...)
}

// reasonList is the valid reasons joined with ", ", for error messages.
func reasonList() string {
	s := make([]string, len(reasons))
	for i, r := range reasons {
		s[i] = string(r)
	}
	return strings.Join(s, ", ")
}

// Valid reports whether r is one of the reasons of docs/dead-letters.md. Relay never
// writes any other, so only these may appear in a subject it publishes.
func (r Reason) Valid() bool {
	for _, v := range reasons {
		if r == v {
			return true
		}
	}
	return false
}

// ParseReason turns the value of a --reason flag into a [Reason]. It is exact:
// reasons are subject tokens, and a near miss such as "Gone" would silently
// match nothing. The error wraps [ErrInvalidReason] and lists the valid
// reasons, so that the user can fix the command line without the docs.
func ParseReason(s string) (Reason, error) {
	r := Reason(s)
	if !r.Valid() {
		return "", fmt.Errorf("%w %q: valid reasons are %s", ErrInvalidReason, s, reasonList())
	}
	return r, nil
}

// NoSubscriber stands for the subscriber of a dead letter whose DELIVERIES
// subject names none that can exist (deliveries.<lane>.<id> with an id no
// subscriber may have, or more tokens than that): its DLQ subject is
// dlq.~.unroutable, which no subscriber id can reach.
const NoSubscriber = "~"

// validSubscriber reports whether id can be the subscriber token of a DLQ
// subject: a valid subscriber id, or [NoSubscriber].
func validSubscriber(id string) error {
	if id == NoSubscriber {
		return nil
	}
	return subscribers.ValidateID(id)
}

// Subject returns the DLQ subject of a delivery to subscriber that died for
// reason r: dlq.<subscriber>.<reason>. It does not validate its arguments;
// [Publish] does, before it publishes.
func Subject(subscriber string, r Reason) string {
	return streams.DeadLetterSubject(subscriber, string(r))
}
