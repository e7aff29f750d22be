package deadletter

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/relay-dev/relay/streams"
)

// Entry is one DLQ message as `relay dlq ls` and `relay dlq show` print it.
// The JSON field names are part of the contract (`relay dlq ls --json`,
// docs/cli.md): scripts read them, so they never change.
type Entry struct {
	// Subscriber is the subscriber the delivery was for, from the subject.
	Subscriber string `json:"subscriber"`
	// EventID is the event's id (Relay-Event-Id), from which the
	// webhook-id the subscriber saw on every attempt was made
	// (deliver.WebhookID: the same, unless it held other bytes than
	// letters, digits, '_', '-' and ':').
	EventID string `json:"event_id"`
	// EventType is the event's type (Relay-Event-Type).
	EventType string `json:"event_type"`
	// Reason is why the delivery died, from the subject.
	Reason Reason `json:"reason"`
	// Attempts is how many HTTP requests were started for the delivery.
	Attempts int `json:"attempts"`
	// LastStatus is the HTTP status of the last attempt, 0 if none.
	LastStatus int `json:"last_status"`
	// LastError is the last error text, one line of at most [MaxLastError]
	// bytes, empty if none.
	LastError string `json:"last_error"`
	// FirstAttemptAt is when the first attempt started; null when the
	// delivery was never attempted.
	FirstAttemptAt *time.Time `json:"first_attempt_at"`
	// DeadAt is when the delivery was given up.
	DeadAt time.Time `json:"dead_at"`
	// PublishedAt is when the event was published on EVENTS, when known.
	PublishedAt *time.Time `json:"published_at,omitempty"`
	// Deadline is the event's Relay-Deadline, when it had a valid one.
	Deadline *time.Time `json:"deadline,omitempty"`
	// DueAt is the event's Relay-Deliver-At, its due time, when it had a
	// valid one.
	DueAt *time.Time `json:"due_at,omitempty"`
	// DLQSeq is the entry's sequence in the DLQ stream, the handle that
	// `relay dlq show` and `relay dlq replay` take.
	DLQSeq uint64 `json:"dlq_seq"`
	// Size is the number of body bytes.
	Size int `json:"size"`
}

// EntryFromMsg decodes a DLQ message, given its subject, headers, body and
// DLQ stream sequence, into an [Entry]. Subscriber and reason come from the
// subject; the rest from relay's headers. Times are returned in UTC.
//
// Headers that are absent leave their field at its zero value (and
// FirstAttemptAt and PublishedAt nil), so that a copy written by an older or
// newer relay still lists. A reason relay does not know is kept as is, for the
// same reason. Size is len(body), except for a message fetched headers-only
// (empty body and a Nats-Msg-Size header), where it is that header's value.
//
// A subject that is not dlq.<subscriber>.<reason>, or a header of relay's
// that is present but does not parse, returns an error wrapping
// [ErrMalformedEntry] that names seq.
func EntryFromMsg(subject string, header nats.Header, body []byte, seq uint64) (Entry, error) {
	e := Entry{DLQSeq: seq, Size: len(body)}
	bad := func(format string, args ...any) (Entry, error) {
		return Entry{}, fmt.Errorf("%w at DLQ sequence %d: %s", ErrMalformedEntry, seq, fmt.Sprintf(format, args...))
	}
	tokens := strings.Split(subject, ".")
	if len(tokens) != 3 || tokens[0] != "dlq" || tokens[1] == "" || tokens[2] == "" {
		return bad("subject %q is not dlq.<subscriber>.<reason>", subject)
	}
	e.Subscriber, e.Reason = tokens[1], Reason(tokens[2])
	e.EventID = streams.HeaderValue(header, streams.HeaderEventID)
	e.EventType = streams.HeaderValue(header, streams.HeaderEventType)
	e.LastError = streams.HeaderValue(header, streams.HeaderLastError)

	ints := []struct {
		name string
		dst  *int
	}{
		{streams.HeaderAttempts, &e.Attempts},
		{streams.HeaderLastStatus, &e.LastStatus},
	}
	for _, f := range ints {
		v := streams.HeaderValue(header, f.name)
		if v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return bad("header %s: %q is not a count", f.name, v)
		}
		*f.dst = n
	}
	if len(body) == 0 {
		if v := streams.HeaderValue(header, nats.MsgSize); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return bad("header %s: %q is not a size", nats.MsgSize, v)
			}
			e.Size = n
		}
	}

	times := []struct {
		name string
		dst  **time.Time
	}{
		{streams.HeaderFirstAttemptAt, &e.FirstAttemptAt},
		{streams.HeaderPublishedAt, &e.PublishedAt},
	}
	for _, f := range times {
		t, ok, err := headerTime(header, f.name)
		if err != nil {
			return bad("%v", err)
		}
		if ok {
			*f.dst = &t
		}
	}
	// The publisher sets Relay-Deadline: one that does not parse (the entry
	// of a malformed event) is left out here, not a sign of a foreign
	// message.
	if t, ok, err := headerTime(header, streams.HeaderDeadline); ok && err == nil {
		e.Deadline = &t
	}
	if t, ok, err := headerTime(header, streams.HeaderDeliverAt); ok && err == nil {
		e.DueAt = &t
	}
	deadAt, _, err := headerTime(header, streams.HeaderDeadAt)
	if err != nil {
		return bad("%v", err)
	}
	e.DeadAt = deadAt
	return e, nil
}

// headerTime parses an RFC 3339 header into UTC, reporting whether it was
// present at all. A time whose UTC year is outside 0–9999 (such as
// "9999-12-31T23:59:59-01:00") is refused as well: RFC 3339 cannot write it,
// so an entry holding it could not be printed by `relay dlq ls --json`.
func headerTime(h nats.Header, name string) (time.Time, bool, error) {
	v := streams.HeaderValue(h, name)
	if v == "" {
		return time.Time{}, false, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("header %s: %q is not an RFC 3339 time", name, v)
	}
	t = t.UTC()
	if y := t.Year(); y < 0 || y > 9999 {
		return time.Time{}, false, fmt.Errorf("header %s: %q is not an RFC 3339 time in UTC (year %d)", name, v, y)
	}
	return t, true, nil
}
