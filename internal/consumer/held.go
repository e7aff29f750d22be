package consumer

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Held is the set of messages a reader holds: received from its consumer
// and not yet answered for. [Held.KeepAlive] renews them, so that a message
// that waits on this relay (behind others, for a slow PubAck) is not
// redelivered to another relay meanwhile, while its work here goes on.
//
// A message leaves the set as it is answered for, through [Held.Ack] or
// [Held.NakWithDelay], never after: a renewal sent after a NAK with a delay
// would reset the server's timer and hold the message back for a whole ack
// wait instead of the delay. The set's lock orders the two on the
// connection: a round sends its renewals while holding it, and a message is
// taken out under it before its answer is sent, so every renewal of a
// message goes before its answer.
//
// The zero Held is empty and ready for use.
type Held struct {
	mu   sync.Mutex
	msgs map[jetstream.Msg]struct{}
}

// Add holds msg: it is renewed from the next round on.
func (h *Held) Add(msg jetstream.Msg) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.msgs == nil {
		h.msgs = make(map[jetstream.Msg]struct{})
	}
	h.msgs[msg] = struct{}{}
}

// Len is how many messages are held.
func (h *Held) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.msgs)
}

// Ack lets go of msg and acknowledges it.
func (h *Held) Ack(msg jetstream.Msg) error {
	h.drop(msg)
	return msg.Ack()
}

// NakWithDelay lets go of msg and hands it back, for redelivery after
// delay.
func (h *Held) NakWithDelay(msg jetstream.Msg, delay time.Duration) error {
	h.drop(msg)
	return msg.NakWithDelay(delay)
}

func (h *Held) drop(msg jetstream.Msg) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.msgs, msg)
}

// KeepAlive renews every held message every period until ctx ends: one
// InProgress a message a round, whatever the message waits for.
func (h *Held) KeepAlive(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		h.renew()
	}
}

// renew sends one round of InProgress.
func (h *Held) renew() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for msg := range h.msgs {
		_ = msg.InProgress()
	}
}
