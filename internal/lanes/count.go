package lanes

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/streams"
)

// ErrNoLanes means DELIVERIES has no shared lane consumer: no relay has run
// against this NATS yet.
var ErrNoLanes = errors.New("lanes: no shared lane on DELIVERIES")

// SharedLanes returns the number of shared lanes the relays on this NATS
// use, as their consumers on DELIVERIES show it: one more than the highest
// lane_sNN. A command that writes to a subscriber's lane (relay dlq replay)
// uses it when not told --lanes, since a lane computed for another count
// would be read by no relay, or by the wrong one. When relays once ran with
// more lanes, the old consumers remain (and are still read), so the count
// is then the larger one.
func SharedLanes(ctx context.Context, js jetstream.JetStream) (int, error) {
	stream, err := js.Stream(ctx, streams.Deliveries)
	if err != nil {
		return 0, fmt.Errorf("lanes: opening %s: %w", streams.Deliveries, err)
	}
	names := stream.ConsumerNames(ctx)
	highest := -1
	for name := range names.Name() {
		lane, ok := streams.LaneOfConsumer(name)
		if !ok {
			continue
		}
		if n, ok := subscribers.SharedIndex(lane); ok && n > highest {
			highest = n
		}
	}
	if err := names.Err(); err != nil {
		return 0, fmt.Errorf("lanes: listing the consumers of %s: %w", streams.Deliveries, err)
	}
	if highest < 0 {
		return 0, fmt.Errorf("%w (run relay run once against this NATS)", ErrNoLanes)
	}
	return highest + 1, nil
}
