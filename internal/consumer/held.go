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
	mu sync.Mutex
	// msgs are the held messages, each with when it was received or last
	// renewed.
	msgs map[jetstream.Msg]time.Time
}

// Add holds msg: it is renewed from the next round on.
func (h *Held) Add(msg jetstream.Msg) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.msgs == nil {
		h.msgs = make(map[jetstream.Msg]time.Time)
	}
	h.msgs[msg] = time.Now()
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

// KeepAlive renews the held messages every period until ctx ends: one
// InProgress for each received or renewed at least half a period ago, so
// that a message answered soon after it came costs no renewal, and one held
// long one a period; none goes unrenewed for more than a period and a half.
func (h *Held) KeepAlive(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		h.renew(every)
	}
}

// renew sends one round of InProgress, to the messages received or
// renewed at least half of every ago.
func (h *Held) renew(every time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	for msg, at := range h.msgs {
		if now.Sub(at) >= every/2 {
			_ = msg.InProgress()
			h.msgs[msg] = now
		}
	}
}
