package streams_test

import (
	"strings"
	"testing"

	"github.com/relay-dev/relay/streams"
)

// TestRelayIDsHoldNoDot: relay's own Nats-Msg-Ids never hold a dot, which
// every fan-out copy id <event id>.<subscriber> holds.
func TestRelayIDsHoldNoDot(t *testing.T) {
	for _, id := range []string{streams.ReplayID(42), streams.ParkID(42, 3), streams.HoldID(42)} {
		if strings.Contains(id, ".") {
			t.Errorf("relay id %q holds a dot: a copy of an event could have it", id)
		}
	}
}
