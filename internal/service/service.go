package service

import (
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/relay-dev/relay/streams"
)

var (
	// ErrNoReply means a request names no reply subject: nobody waits for
	// its answer, so relay does not act on it.
	ErrNoReply = errors.New("the request names no reply subject")

	// ErrReservedReply means a request names a reply subject outside the
	// inboxes (_INBOX.>, [streams.ReplySubjects]): an answer there could
	// be stored in one of relay's streams or buckets, taken for an event,
	// or land in any other application's subject, so relay neither acts on
	// it nor answers it.
	ErrReservedReply = errors.New("the request's reply subject is not an inbox; ask from an _INBOX. reply subject")
)

// inboxPrefix begins every reply subject relay answers on: the subjects
// the service user may publish to ([streams.ReplySubjects]).
var inboxPrefix = strings.TrimSuffix(streams.ReplySubjects, ">")

// CheckReply says whether a request whose reply subject is reply may be
// acted on and answered: nil for a subject under _INBOX., else an error
// wrapping [ErrNoReply] or [ErrReservedReply] that names the subject. An
// allowlist: any other subject, relay's or not, is refused.
func CheckReply(reply string) error {
	switch {
	case reply == "":
		return ErrNoReply
	case !strings.HasPrefix(reply, inboxPrefix) || len(reply) == len(inboxPrefix):
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
