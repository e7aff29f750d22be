package consumer

import (
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// KeepAlive resets the ack wait of msgs, read on nc, and waits up to wait
// for the server's word that it took them. The last keep-alive goes as a
// request, which the consumer's leader answers once it has processed it,
// and so the others before it on the connection. A message already
// settled (acked, handed back or terminated) is skipped, checked as its
// keep-alive is sent (see [message.progress]); when every message is
// settled, a flush of nc stands in for the answer.
//
// The error says that the server's word did not come within wait: the
// keep-alives were sent all the same, as far as the connection carried
// them.
func KeepAlive(nc *nats.Conn, wait time.Duration, msgs ...jetstream.Msg) error {
	var ours []*message
	for _, msg := range msgs {
		if m, ok := msg.(*message); ok {
			ours = append(ours, m)
			continue
		}
		// Not one of this package's: it cannot be confirmed.
		_ = msg.InProgress()
	}
	for _, m := range ours[:max(0, len(ours)-1)] {
		_ = m.progress("")
	}
	if len(ours) == 0 {
		return nc.FlushTimeout(wait)
	}
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return fmt.Errorf("consumer: keep-alive: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	// The last that is not settled carries the request: from the last
	// back, since any of them may have been settled meanwhile. It follows
	// every keep-alive sent above, whichever it is.
	for i := len(ours) - 1; i >= 0; i-- {
		err := ours[i].progress(inbox)
		switch {
		case errors.Is(err, jetstream.ErrMsgAlreadyAckd):
			continue
		case err != nil:
			return fmt.Errorf("consumer: keep-alive: %w", err)
		}
		if _, err := sub.NextMsg(wait); err != nil {
			return fmt.Errorf("consumer: keep-alive not confirmed: %w", err)
		}
		return nil
	}
	return nc.FlushTimeout(wait)
}
