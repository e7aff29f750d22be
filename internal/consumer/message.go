package consumer

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// message is a JetStream message received on a pull loop's inbox. It
// answers the server as the jetstream package's own messages do (that
// package builds them only for the inboxes it owns): an ack, a nak or a term
// is sent once, a keep-alive as often as asked.
type message struct {
	msg *nats.Msg
	nc  *nats.Conn
	// received is when the client read it from the connection (see
	// [ReceivedAt]).
	received time.Time

	mu    sync.Mutex
	acked bool
	// md is the reply subject's metadata once parsed (mdErr the reason it
	// would not parse): the fan-out reads it twice for every event and the
	// lanes once for every copy. Apart from mu, which a DoubleAck holds for
	// a round trip.
	parse sync.Once
	md    jetstream.MsgMetadata
	mdErr error
}

var _ jetstream.Msg = (*message)(nil)

// ReceivedAt returns when this process read msg from its connection, for a
// message of a pull loop ([Pull], [Run]); ok is false for any other. The
// ack wait JetStream gives a message starts as the server sends it, a
// network's transit before this time: a caller that counts the message's
// time in its hands counts from here, not from when its handler got it,
// which may be much later behind a burst.
func ReceivedAt(msg jetstream.Msg) (at time.Time, ok bool) {
	m, ok := msg.(*message)
	if !ok || m.received.IsZero() {
		return time.Time{}, false
	}
	return m.received, true
}

// Metadata parses the message's reply subject, once. The metadata returned
// is the message's own: the caller reads it and does not change it.
func (m *message) Metadata() (*jetstream.MsgMetadata, error) {
	m.parse.Do(func() {
		md, err := m.msg.Metadata()
		if err != nil {
			m.mdErr = err
			return
		}
		m.md = jetstream.MsgMetadata{
			Sequence:     jetstream.SequencePair{Consumer: md.Sequence.Consumer, Stream: md.Sequence.Stream},
			NumDelivered: md.NumDelivered,
			NumPending:   md.NumPending,
			Timestamp:    md.Timestamp,
			Stream:       md.Stream,
			Consumer:     md.Consumer,
			Domain:       md.Domain,
		}
	})
	if m.mdErr != nil {
		return nil, m.mdErr
	}
	return &m.md, nil
}

// Data is the message's body.
func (m *message) Data() []byte { return m.msg.Data }

// Headers are the message's headers.
func (m *message) Headers() nats.Header { return m.msg.Header }

// Subject is the subject the message was stored on.
func (m *message) Subject() string { return m.msg.Subject }

// Reply is the subject its acks go to.
func (m *message) Reply() string { return m.msg.Reply }

// Ack acknowledges the message, without waiting for the server.
func (m *message) Ack() error { return m.reply(context.Background(), "+ACK", false) }

// DoubleAck acknowledges the message and waits for the server to confirm.
func (m *message) DoubleAck(ctx context.Context) error { return m.reply(ctx, "+ACK", true) }

// Nak hands the message back for redelivery now.
func (m *message) Nak() error { return m.reply(context.Background(), "-NAK", false) }

// NakWithDelay hands the message back for redelivery after delay.
func (m *message) NakWithDelay(delay time.Duration) error {
	if delay <= 0 {
		return m.Nak()
	}
	return m.reply(context.Background(), `-NAK {"delay": `+strconv.FormatInt(delay.Nanoseconds(), 10)+`}`, false)
}

// InProgress resets the message's ack wait; it may be sent any number of
// times until the message is settled (acked, handed back or terminated).
func (m *message) InProgress() error { return m.progress("") }

// progressBody is a keep-alive's answer.
var progressBody = []byte("+WPI")

// progress sends a keep-alive, as a request answered on confirm when
// confirm is not empty, unless the message is settled. It checks under the
// lock the final answer takes and sends before it lets go, so that no
// keep-alive follows a settle on the wire: the server takes one that comes
// after a NAK with a delay as a renewal, and holds the message a whole ack
// wait instead of the delay.
func (m *message) progress(confirm string) error {
	if m.msg.Reply == "" {
		return jetstream.ErrMsgNoReply
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.acked {
		return jetstream.ErrMsgAlreadyAckd
	}
	if confirm != "" {
		return m.nc.PublishRequest(m.msg.Reply, confirm, progressBody)
	}
	return m.msg.Respond(progressBody)
}

// Term tells the server never to redeliver the message.
func (m *message) Term() error { return m.reply(context.Background(), "+TERM", false) }

// TermWithReason is Term with a reason for the server's advisory.
func (m *message) TermWithReason(reason string) error {
	if reason == "" {
		return m.Term()
	}
	return m.reply(context.Background(), "+TERM "+reason, false)
}

// settled reports whether the message's final answer has been sent.
func (m *message) settled() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.acked
}

// reply sends one final answer about the message; a second is refused, as
// the server would ignore it.
func (m *message) reply(ctx context.Context, body string, sync bool) error {
	if m.msg.Reply == "" {
		return jetstream.ErrMsgNoReply
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.acked {
		return jetstream.ErrMsgAlreadyAckd
	}
	var err error
	if sync {
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, syncAckTimeout)
			defer cancel()
		}
		_, err = m.nc.RequestWithContext(ctx, m.msg.Reply, []byte(body))
	} else {
		err = m.msg.Respond([]byte(body))
	}
	if err != nil {
		return err
	}
	m.acked = true
	return nil
}

// syncAckTimeout bounds a DoubleAck whose context has no deadline, as the
// jetstream package's default timeout does.
const syncAckTimeout = 5 * time.Second
