package lanes

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/streams"
)

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
