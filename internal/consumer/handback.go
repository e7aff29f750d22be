package consumer

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// handBackDelay is the delay a hand-back asks for: the least the server
// takes as a delay at all, so the message is due again at once.
const handBackDelay = time.Nanosecond

// handBackBody is the NAK a hand-back sends. A plain -NAK only queues the
// message for redelivery in the server's memory: the consumer's stored state
// keeps the time it was delivered, so a server that stops right after (relay
// run's embedded server, stopped with the relay) redelivers it only once its
// whole ack wait has passed since then. A NAK with a delay is written into
// the stored state as a new due time, and a server that starts again
// redelivers it at once.
var handBackBody = `-NAK {"delay": ` + strconv.FormatInt(handBackDelay.Nanoseconds(), 10) + `}`

// handBackTimeout bounds the wait for the server's word on a hand-back whose
// context has no deadline.
const handBackTimeout = 5 * time.Second

// HandBack returns msgs, all of one consumer, to JetStream for redelivery
// at once, in a form that survives the server's stop, and waits until the
// server has taken them (or ctx ends). The server processes one consumer's
// acks in the order one connection sent them, and answers the last of them,
// sent as a request, only once it has processed it: its answer confirms the
// others. Without that a server stopped right after would drop the NAKs it
// had read but not yet processed, and those messages too would wait out
// their ack wait.
//
// A message already acked or handed back is skipped. With ctx already done
// every NAK is sent and none waited for. The error says that the server's
// word did not come: the messages are handed back all the same as far as the
// connection carried them.
func HandBack(ctx context.Context, msgs ...jetstream.Msg) error {
	var errs []error
	note := func(err error) {
		if err != nil && !errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
			errs = append(errs, err)
		}
	}
	var last *message
	for _, msg := range msgs {
		m, ok := msg.(*message)
		switch {
		case !ok:
			// Not one of this package's: it cannot be confirmed.
			note(msg.NakWithDelay(handBackDelay))
		case m.settled():
		default:
			if last != nil {
				note(last.reply(ctx, handBackBody, false))
			}
			last = m
		}
	}
	switch {
	case last == nil:
	case ctx.Err() != nil:
		// No time to wait for the server: the last goes as the others did.
		note(last.reply(ctx, handBackBody, false))
	default:
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, handBackTimeout)
			defer cancel()
		}
		note(last.reply(ctx, handBackBody, true))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("consumer: handing back %d messages: %w", len(msgs), err)
	}
	return nil
}
