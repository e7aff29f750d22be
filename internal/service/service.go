package service

import (
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/relay-dev/relay/streams"
)

var (
	// ErrNoReply means a request names no reply subject: nobody waits for
	// its answer, so relay does not act on it.
	ErrNoReply = errors.New("the request names no reply subject")

	// ErrReservedReply means a request names a reply subject in relay's
	// own namespaces (its streams, its buckets, JetStream's and the
	// system's subjects, relay.*), where an answer would be stored or
	// taken for an event: relay neither acts on it nor answers it.
	ErrReservedReply = errors.New("the request's reply subject is one of relay's own; ask from an inbox")
)

// CheckReply says whether a request whose reply subject is reply may be
// acted on and answered: nil for an inbox, else an error wrapping
// [ErrNoReply] or [ErrReservedReply] that names the subject.
func CheckReply(reply string) error {
	switch {
	case reply == "":
		return ErrNoReply
	case streams.Reserved(reply):
		return fmt.Errorf("%w: %q", ErrReservedReply, reply)
	}
	return nil
}

// Respond sends data on m's reply subject once [CheckReply] allows it, and
// returns its error otherwise, having sent nothing.
func Respond(m *nats.Msg, data []byte) error {
	if err := CheckReply(m.Reply); err != nil {
		return err
	}
	return m.Respond(data)
}
