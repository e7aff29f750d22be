package lanes

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A held message is this relay's while its ack wait was last reset, on
// delivery or by a confirmed keep-alive, less than three quarters of the ack
// wait ago; after a NATS outage longer than that it is let go unsent, since
// JetStream may have given it to another relay.
func TestAlive(t *testing.T) {
	t.Parallel()
	const ackWait = 60 * time.Second
	now := time.Now()
	tests := []struct {
		name                string
		received, confirmed time.Duration // ago
		want                bool
	}{
		{"just received", 0, time.Hour, true},
		{"kept alive lately", 10 * time.Minute, 10 * time.Second, true},
		{"received before the last confirmed round", time.Minute, 20 * time.Second, true},
		{"no confirmed keep-alive for an ack wait", 10 * time.Minute, ackWait, false},
		{"received long ago, never confirmed since", 50 * time.Second, time.Hour, false},
	}
	for _, tt := range tests {
		l := &lane{cfg: Config{AckWait: ackWait}}
		l.confirmed.Store(now.Add(-tt.confirmed).UnixNano())
		d := delivery{received: now.Add(-tt.received).UnixNano()}
		require.Equal(t, tt.want, l.alive(d), tt.name)
	}
}
