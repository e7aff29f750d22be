package streams_test

import (
	"strings"
	"testing"

	"github.com/relay-dev/relay/streams"
)

// TestRelayIDsHoldNoDot: relay's own Nats-Msg-Ids never hold a dot, which
// every fan-out copy id <event id>.<subscriber> holds.
func TestRelayIDsHoldNoDot(t *testing.T) {
	for _, id := range []string{streams.ReplayID(42), streams.ParkID(42, 3), streams.ScheduleID(42)} {
		if strings.Contains(id, ".") {
			t.Errorf("relay id %q holds a dot: a copy of an event could have it", id)
		}
	}
}

// A copy's Nats-Msg-Id is <event id>.<subscriber>; the ids of the other
// ways onto DELIVERIES (a retry moved back, a replay, one by hand) are not,
// even when they share a part of it.
func TestIsCopyID(t *testing.T) {
	t.Parallel()
	tests := []struct {
		msgID, event, sub string
		want              bool
	}{
		{streams.CopyID("evt_1", "crm"), "evt_1", "crm", true},
		{"evt.1.crm.eu", "evt.1", "crm.eu", true},
		{"evt_1.crm", "evt_1", "cr", false},
		{"evt_1.crm", "evt_", "1.crm", false},
		{"evt_1xcrm", "evt_1", "crm", false},
		{"retry-Ab12Cd", "evt_1", "crm", false},
		{"replay.42", "replay", "43", false},
		{"", "evt_1", "crm", false},
		{"evt_1.crm", "DELIVERIES-7", "crm", false},
	}
	for _, tt := range tests {
		if got := streams.IsCopyID(tt.msgID, tt.event, tt.sub); got != tt.want {
			t.Errorf("IsCopyID(%q, %q, %q) = %v, want %v", tt.msgID, tt.event, tt.sub, got, tt.want)
		}
	}
}
