package streams

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ErrUnanswered is returned by [StoreOnce] when JetStream gave no answer
// before its context ended: the message may be stored, or not.
var ErrUnanswered = errors.New("JetStream did not answer")

// StoreTry bounds the wait for the PubAck of one publish of [StoreOnce]
// before it publishes again: on a loaded host or a slow link a PubAck may
// take seconds, and a publish made again costs one duplicate check.
const StoreTry = 2 * time.Second

// StorePatience bounds how long [StoreOnce] publishes a message again:
// half of the two-minute duplicate window of relay's streams, so that no
// publish made again stores a second copy, even one that lingered on the
// way.
const StorePatience = time.Minute

// storePause is the wait before publishing again after a publish that
// failed at once (no responders while a stream leader is elected, a
// connection reconnecting).
const storePause = 250 * time.Millisecond

// StoreOnce stores m with the Nats-Msg-Id id and returns its PubAck,
// publishing it again with the same id until JetStream answers, ctx ends
// or [StorePatience] has passed. A PubAck lost on the way (a server that stored the message and
// then failed over, a link that dropped the reply) is thus never taken for
// a refusal: the next publish comes back Duplicate, the message stored
// once. An answer that refuses the message (a JetStream API error,
// such as a full stream) is returned as it is; a message the client cannot
// send at all (too big, a bad subject) too; no answer in time is
// [ErrUnanswered]. The stream's duplicate window must be at least twice
// StorePatience.
func StoreOnce(ctx context.Context, js jetstream.JetStream, m *nats.Msg, id string) (*jetstream.PubAck, error) {
	ctx, cancel := context.WithTimeout(ctx, StorePatience)
	defer cancel()
	var last error
	for {
		try, cancel := context.WithTimeout(ctx, StoreTry)
		ack, err := js.PublishMsg(try, m, jetstream.WithMsgID(id))
		cancel()
		if err == nil || answered(err) {
			return ack, err
		}
		last = err
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w: storing %s on %s: %w", ErrUnanswered, id, m.Subject, last)
		}
		if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nats.ErrTimeout) {
			// Failed at once: not a lost reply, a server not there yet.
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("%w: storing %s on %s: %w", ErrUnanswered, id, m.Subject, last)
			case <-time.After(storePause):
			}
		}
	}
}

// answered reports whether a publish error is final: JetStream refused the
// message, or the client could not send it and never will (a closed
// connection does not reopen).
func answered(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) ||
		errors.Is(err, nats.ErrMaxPayload) || errors.Is(err, nats.ErrBadSubject) ||
		errors.Is(err, nats.ErrHeadersNotSupported) || errors.Is(err, nats.ErrInvalidMsg) ||
		errors.Is(err, nats.ErrConnectionClosed)
}
