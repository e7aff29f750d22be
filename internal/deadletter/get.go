package deadletter

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/streams"
)

// Message is one DLQ entry with everything the DLQ stores of it, for
// `relay dlq show` and for a replay, which needs the body and every header.
type Message struct {
	Entry
	// Subject is the DLQ subject, dlq.<subscriber>.<reason>.
	Subject string
	// Header is every header of the stored copy.
	Header nats.Header
	// Body is the delivery's body, exactly as it was published.
	Body []byte
	// Stored is when the DLQ stream stored the copy.
	Stored time.Time
}

// Bodiless reports whether the dead letter has no body to send: its
// delivery carried its event's sequence (Relay-Event-Seq) in place of a
// body, and that body was lost before it could be read ([BodyLost]; or it
// died of another reason meanwhile). A replay would send an empty body, so
// none is made.
func (m Message) Bodiless() bool {
	return m.Header.Get(streams.HeaderEventSeq) != "" && len(m.Body) == 0
}

// Get reads DLQ entry seq with its headers and body. It returns an error
// wrapping [ErrNotFound] when the DLQ holds no message at seq (never
// written, replayed, purged or aged out), and one wrapping
// [ErrMalformedEntry] when the message there is not a DLQ copy relay could
// have written.
func Get(ctx context.Context, js jetstream.JetStream, seq uint64) (Message, error) {
	stream, err := js.Stream(ctx, streams.DLQ)
	if err != nil {
		return Message{}, fmt.Errorf("opening stream %s (relay run creates it): %w", streams.DLQ, err)
	}
	return get(ctx, stream, seq)
}

func get(ctx context.Context, stream jetstream.Stream, seq uint64) (Message, error) {
	if seq == 0 {
		return Message{}, fmt.Errorf("%w: DLQ sequences start at 1", ErrNotFound)
	}
	raw, err := stream.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return Message{}, fmt.Errorf("%w: DLQ sequence %d", ErrNotFound, seq)
	}
	if err != nil {
		return Message{}, fmt.Errorf("reading DLQ sequence %d: %w", seq, err)
	}
	e, err := EntryFromMsg(raw.Subject, raw.Header, raw.Data, raw.Sequence)
	if err != nil {
		return Message{}, err
	}
	if e.DeadAt.IsZero() {
		e.DeadAt = raw.Time.UTC()
	}
	return Message{Entry: e, Subject: raw.Subject, Header: raw.Header, Body: raw.Data, Stored: raw.Time.UTC()}, nil
}

// remove deletes DLQ entry seq, and is content when it is gone already
// (another replay or purge removed it first). The server reports a
// missing message on delete only in its error text, as code 10057 "no
// message found" or, when another delete of it is under way, code 10043
// "sequence N not found"; nats.go wraps either in ErrMsgDeleteUnsuccessful.
func remove(ctx context.Context, stream jetstream.Stream, seq uint64) error {
	err := stream.DeleteMsg(ctx, seq)
	if err == nil || errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil
	}
	if msg := err.Error(); errors.Is(err, jetstream.ErrMsgDeleteUnsuccessful) &&
		(strings.Contains(msg, "no message found") || strings.Contains(msg, "err_code=10043")) {
		return nil
	}
	return err
}
