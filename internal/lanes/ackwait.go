package lanes

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/streams"
)

// The ack-wait account (when this relay received a message, when it was
// kept and renewed, whether it is still this relay's) is kept in real time,
// never in Config.Clock: it follows the server's ack timer, which runs in
// real time whatever a test's clock says, and consumer.ReceivedAt stamps in
// real time. So are the waits for the server's answers (a PubAck, a
// keep-alive's reply), as context deadlines are, and the moment a request
// is sent, which the delivery stages measure against the server's stamps. Everything else the lanes
// decide by the time (deadlines, pauses, due times, sweeps, caches, the
// shutdown timeout) reads Config.Clock.

// ackNow is the present in the ack-wait account (unix nanoseconds).
func ackNow() int64 { return time.Now().UnixNano() }

// ackAge is how long ago at (unix nanoseconds) was in the ack-wait account.
func ackAge(at int64) time.Duration { return time.Duration(ackNow() - at) }

// AckWaitUse is what the lane consumers of a cluster say of the ack wait
// its relays use. Every relay must use the consumers' own: a relay counts
// from it when it renews the messages it holds (every quarter of it) and
// when it judges a message still its own, and one that counts from a
// longer ack wait than the consumer's lets messages run out while it holds
// them, and another relay sends them a second time.
type AckWaitUse struct {
	// Wait is the lane consumers' ack wait (the longest, if they differ);
	// zero when there is no lane consumer yet.
	Wait time.Duration
	// Mixed is true when the lane consumers' ack waits differ (a change
	// made by hand, or cut short).
	Mixed bool
	// Pulling is true when a relay pulls from a lane consumer now: a pull
	// request of it waits there. A running relay always keeps one.
	Pulling bool
}

// AckWaitInUse reads the ack wait of the lane consumers on DELIVERIES: one
// listing of its consumers.
func AckWaitInUse(ctx context.Context, js jetstream.JetStream) (AckWaitUse, error) {
	var use AckWaitUse
	stream, err := js.Stream(ctx, streams.Deliveries)
	if err != nil {
		return use, fmt.Errorf("lanes: looking up %s: %w", streams.Deliveries, err)
	}
	list := stream.ListConsumers(ctx)
	for info := range list.Info() {
		if _, lane := streams.LaneOfConsumer(info.Name); !lane {
			continue
		}
		wait := info.Config.AckWait
		if use.Wait != 0 && wait != use.Wait {
			use.Mixed = true
		}
		use.Wait = max(use.Wait, wait)
		use.Pulling = use.Pulling || info.NumWaiting > 0
	}
	if err := list.Err(); err != nil && !errors.Is(err, jetstream.ErrEndOfData) {
		return use, fmt.Errorf("lanes: listing the consumers of %s: %w", streams.Deliveries, err)
	}
	return use, nil
}
