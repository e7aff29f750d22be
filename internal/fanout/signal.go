package fanout

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/streams"
)

// changeSignal tells the fan-out, without a request, that no subscriber
// changed since its view was last confirmed current.
//
// It is a plain subscription to the subscriber bucket's subjects, on the
// connection the fan-out pulls its events on. On a single server that
// stores both EVENTS and the bucket, a write to the bucket reaches this
// subscription when the server takes it in, before it is stored, and so
// before `relay sub add` gets its answer and before any event its caller
// publishes next can be stored; the server sends a connection's messages in
// order, and the client queues them in order. So when an event arrives and
// nothing is queued here, every subscriber change stored before that event
// was published is in a view that was confirmed current after this
// subscription was last drained, and the event needs no sync at all. A
// queued message (a write, or one the bucket refused) only says that a sync
// is due.
//
// On a cluster, messages from different servers come over different
// routes, in no order between them, so the signal is not used there (nor
// when the subscription is not allowed): newChangeSignal returns nil and the
// fan-out asks the bucket's stream before each batch.
type changeSignal struct {
	nc         *nats.Conn
	sub        *nats.Subscription
	reconnects uint64
	dropped    int
}

// signalFlushWait bounds the wait for the server to take the signal's
// subscription; past it the fan-out goes without the signal.
const signalFlushWait = 5 * time.Second

// newChangeSignal subscribes on nc when the relay is connected to the one
// server that stores EVENTS and the subscriber bucket; else it returns nil.
func newChangeSignal(ctx context.Context, js jetstream.JetStream) *changeSignal {
	nc := js.Conn()
	if nc.ConnectedClusterName() != "" {
		return nil
	}
	server := nc.ConnectedServerName()
	for _, name := range []string{streams.Events, "KV_" + streams.SubscribersBucket} {
		s, err := js.Stream(ctx, name)
		if err != nil {
			return nil
		}
		info := s.CachedInfo()
		if info.Cluster == nil || info.Cluster.Leader != server || len(info.Cluster.Replicas) > 0 {
			return nil
		}
	}
	sub, err := nc.SubscribeSync("$KV." + streams.SubscribersBucket + ".>")
	if err != nil {
		return nil
	}
	// The flush makes the server take the subscription (or refuse it)
	// before the first sync, which every later event relies on. It needs a
	// deadline of its own: the fan-out's context has none.
	flushCtx, cancel := context.WithTimeout(ctx, signalFlushWait)
	defer cancel()
	if err := nc.FlushWithContext(flushCtx); err != nil {
		_ = sub.Unsubscribe()
		return nil
	}
	if _, err := sub.NextMsg(time.Microsecond); errors.Is(err, nats.ErrPermissionViolation) {
		_ = sub.Unsubscribe()
		return nil
	}
	return &changeSignal{nc: nc, sub: sub, reconnects: nc.Stats().Reconnects}
}

// changed drains what the subscription holds and reports whether anything
// may have changed since the last call: a message, a message dropped, a
// reconnection (messages sent meanwhile were lost) or a subscription that
// stopped working.
func (c *changeSignal) changed() bool {
	changed := false
	if r := c.nc.Stats().Reconnects; r != c.reconnects {
		c.reconnects, changed = r, true
	}
	if d, err := c.sub.Dropped(); err != nil || d != c.dropped {
		c.dropped, changed = d, true
	}
	for {
		n, _, err := c.sub.Pending()
		if err != nil {
			return true
		}
		if n == 0 {
			break
		}
		if _, err := c.sub.NextMsg(time.Millisecond); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return true
		}
		changed = true
	}
	return changed || !c.sub.IsValid()
}

// close ends the subscription.
func (c *changeSignal) close() {
	if c != nil {
		_ = c.sub.Unsubscribe()
	}
}
