package deadletter

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/streams"
)

// MaxLastError is the most bytes of Relay-Last-Error a DLQ copy carries
// (docs/headers.md: Relay-Last-Error, at most 1 KiB). A subscriber's error page can be
// megabytes; the first kilobyte says what went wrong and keeps every DLQ
// copy far below the server's maximum payload.
const MaxLastError = 1024

// ellipsis marks a Relay-Last-Error that [Publish] cut short.
const ellipsis = "…"

// Death is why and when one delivery died: what a lane knows at the moment it
// gives up, and what an operator needs to decide whether to replay.
type Death struct {
	// Subscriber is the id of the subscriber the delivery was for. It becomes
	// a subject token, so it must be a valid subscriber id.
	Subscriber string
	// Reason is why the delivery died; it becomes the last subject token.
	Reason Reason
	// Attempts is how many HTTP requests were started for the delivery:
	// 0 for an expired one, which never reached a request.
	Attempts int
	// LastStatus is the HTTP status of the last attempt, 0 if there was none
	// (no attempt, or an attempt that failed below HTTP).
	LastStatus int
	// LastError is the text of the last error. Publish stores at most
	// [MaxLastError] bytes of it, on one line and as valid UTF-8, because it
	// travels in a header and ends up on a terminal.
	LastError string
	// FirstAttemptAt is when the first attempt started, zero if the delivery
	// was never attempted.
	FirstAttemptAt time.Time
	// DeadAt is when the delivery was given up. Publish uses the current
	// time when it is zero.
	DeadAt time.Time
	// OriginSeq is the DELIVERIES stream sequence of the message that died.
	// It makes the copy's Nats-Msg-Id, so it must not be zero unless ID is
	// set.
	OriginSeq uint64
	// ID, when set, is the copy's Nats-Msg-Id in place of
	// dlq.<OriginSeq>: a copy the fan-out dead-letters (an event due after
	// its deadline) was never stored in DELIVERIES, and its event id and
	// subscriber keep a second fan-out of the event from making a second
	// entry.
	ID string
	// OriginSubject is the DELIVERIES subject of the message that died,
	// deliveries.<lane>.<subscriber>: where a replay by hand, with the nats
	// CLI alone, puts it back. Empty leaves the header out.
	OriginSubject string
}

// validate reports the first field of d that Publish cannot store.
func (d Death) validate() error {
	if err := validSubscriber(d.Subscriber); err != nil {
		return fmt.Errorf("%w: subscriber: %v", ErrInvalidDeath, err)
	}
	if !d.Reason.Valid() {
		return fmt.Errorf("%w: reason %q: valid reasons are %s", ErrInvalidDeath, d.Reason, reasonList())
	}
	if d.OriginSeq == 0 && d.ID == "" {
		return fmt.Errorf("%w: origin sequence is 0; it must be the DELIVERIES sequence of the message", ErrInvalidDeath)
	}
	if d.Attempts < 0 {
		return fmt.Errorf("%w: attempts is %d, must not be negative", ErrInvalidDeath, d.Attempts)
	}
	if d.LastStatus < 0 {
		return fmt.Errorf("%w: last status is %d, must not be negative", ErrInvalidDeath, d.LastStatus)
	}
	return nil
}

// msgID is the Nats-Msg-Id of the DLQ copy of DELIVERIES message seq
// (docs/dead-letters.md: dlq.<DELIVERIES sequence>).
func msgID(seq uint64) string {
	return "dlq." + strconv.FormatUint(seq, 10)
}

// ownHeaders are the headers Publish sets from the [Death]. The original may
// carry older values of them (a retried copy carries the last status and
// error of its last attempt), and NATS headers are case-sensitive, so they
// are removed in any case before the new values are set.
var ownHeaders = []string{
	streams.HeaderReason,
	streams.HeaderAttempts,
	streams.HeaderLastStatus,
	streams.HeaderLastError,
	streams.HeaderDeadAt,
	streams.HeaderFirstAttemptAt,
	streams.HeaderOriginSeq,
	streams.HeaderOriginSubject,
}

func isOwnHeader(name string) bool {
	for _, h := range ownHeaders {
		if strings.EqualFold(name, h) {
			return true
		}
	}
	return false
}

// Publish stores the DLQ copy of a DELIVERIES message and waits for its
// PubAck, so that the caller may Term the original only once the copy is safe
// (a Term'ed message is deleted at once).
//
// The copy goes to [Subject](d.Subscriber, d.Reason). Its body is exactly
// body. Its headers are header's without any Nats-* header, and with
// Relay-Reason, Relay-Attempts, Relay-Last-Status (omitted when 0),
// Relay-Last-Error (cut by [Publish] to one line of at most [MaxLastError]
// bytes, omitted when empty), Relay-Dead-At (RFC 3339 UTC with nanoseconds),
// Relay-First-Attempt-At (omitted when zero), Relay-Origin-Seq (omitted when 0) and
// Relay-Origin-Subject (omitted when empty) set from d,
// replacing any value the original had. Its Nats-Msg-Id is
// dlq.<d.OriginSeq> (or d.ID), so that a crash between this publish and the Term cannot
// create a second entry: a publish JetStream reports as a duplicate is a
// success; a PubAck that does not come is asked for again with the same id
// (see [streams.StoreOnce]). It returns the copy's DLQ sequence (the first
// copy's, for a duplicate). header is not modified.
//
// An invalid d returns an error wrapping [ErrInvalidDeath] and publishes
// nothing.
func Publish(ctx context.Context, js jetstream.JetStream, body []byte, header nats.Header, d Death) (uint64, error) {
	msg, id, err := copyOf(body, header, d)
	if err != nil {
		return 0, err
	}
	ack, err := streams.StoreOnce(ctx, js, msg, id)
	if err != nil {
		return 0, fmt.Errorf("storing the DLQ copy of DELIVERIES sequence %d on %s: %w", d.OriginSeq, msg.Subject, err)
	}
	return ack.Sequence, nil
}

// PublishAsync is [Publish] without the wait, for the fan-out, which sheds
// copies by the thousand when a subscriber passes its backlog bound and
// waits for their PubAcks together with its copies' ones. The DLQ copy is
// stored once the future says so.
func PublishAsync(js jetstream.JetStream, body []byte, header nats.Header, d Death) (jetstream.PubAckFuture, error) {
	msg, id, err := copyOf(body, header, d)
	if err != nil {
		return nil, err
	}
	f, err := js.PublishMsgAsync(msg, jetstream.WithMsgID(id))
	if err != nil {
		return nil, fmt.Errorf("storing a DLQ copy on %s: %w", msg.Subject, err)
	}
	return f, nil
}

// copyOf builds the DLQ copy [Publish] stores, and its Nats-Msg-Id.
func copyOf(body []byte, header nats.Header, d Death) (*nats.Msg, string, error) {
	if err := d.validate(); err != nil {
		return nil, "", err
	}
	h := streams.CopyHeader(header, len(ownHeaders), isOwnHeader)
	deadAt := d.DeadAt
	if deadAt.IsZero() {
		deadAt = time.Now()
	}
	h.Set(streams.HeaderReason, string(d.Reason))
	h.Set(streams.HeaderAttempts, strconv.Itoa(d.Attempts))
	if d.LastStatus != 0 {
		h.Set(streams.HeaderLastStatus, strconv.Itoa(d.LastStatus))
	}
	if e := CleanError(d.LastError); e != "" {
		h.Set(streams.HeaderLastError, e)
	}
	h.Set(streams.HeaderDeadAt, deadAt.UTC().Format(time.RFC3339Nano))
	if !d.FirstAttemptAt.IsZero() {
		h.Set(streams.HeaderFirstAttemptAt, d.FirstAttemptAt.UTC().Format(time.RFC3339Nano))
	}
	if d.OriginSeq != 0 {
		h.Set(streams.HeaderOriginSeq, strconv.FormatUint(d.OriginSeq, 10))
	}
	if d.OriginSubject != "" {
		h.Set(streams.HeaderOriginSubject, d.OriginSubject)
	}
	// No Nats-Expected-Stream: JetStream would store it on the copy, and
	// docs/headers.md allows a copy no Nats-* header but its Nats-Msg-Id. Only the
	// DLQ stream can hold dlq.> (stream subjects cannot overlap).
	id := d.ID
	if id == "" {
		id = msgID(d.OriginSeq)
	}
	return &nats.Msg{Subject: Subject(d.Subscriber, d.Reason), Header: h, Data: body}, id, nil
}

// CleanError makes an error text fit for a header and a terminal: valid
// UTF-8, every control character (CR and LF included) replaced by a space,
// trimmed, and cut on a character boundary to at most [MaxLastError] bytes,
// the cut marked with an ellipsis.
func CleanError(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' {
			return ' '
		}
		return r
	}, s)
	s = strings.TrimSpace(s)
	if len(s) <= MaxLastError {
		return s
	}
	cut := MaxLastError - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strings.TrimSpace(s[:cut]) + ellipsis
}
