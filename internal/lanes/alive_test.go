package lanes

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A message is this relay's while its ack wait was last reset less than
// three quarters of the ack wait ago: when the client read it, or at the
// start of a confirmed keep-alive round that renewed it. A round renews only
// what was held when it began, and only what was still this relay's then;
// after a NATS outage longer than that a message is let go unsent, since
// JetStream may have given it to another relay.
func TestAlive(t *testing.T) {
	t.Parallel()
	const ackWait = 60 * time.Second
	const never = -time.Hour // not held: kept is zero
	now := time.Now()
	tests := []struct {
		name                      string
		received, kept, confirmed time.Duration // ago
		gap                       time.Duration // ago; 0: none
		want                      bool
	}{
		{"just received", 0, 0, time.Hour, 0, true},
		{"held, kept alive lately", 10 * time.Minute, 10 * time.Minute, 10 * time.Second, 0, true},
		{"held before the last confirmed round", time.Minute, time.Minute, 20 * time.Second, 0, true},
		{"no confirmed keep-alive for an ack wait", 10 * time.Minute, 10 * time.Minute, ackWait, 0, false},
		{"received long ago, never confirmed since", 50 * time.Second, 50 * time.Second, time.Hour, 0, false},
		{"waited in the client before it was held", 50 * time.Second, 10 * time.Second, 20 * time.Second, 0, false},
		{"held after the round began", 50 * time.Second, 20 * time.Second, 30 * time.Second, 0, false},
		{"not held: a round does not renew it", 50 * time.Second, never, 5 * time.Second, 0, false},
		{"run out before an outage ended", 2 * time.Minute, 2 * time.Minute, 5 * time.Second, 5 * time.Second, false},
		{"still alive as an outage ended", 70 * time.Second, 70 * time.Second, 5 * time.Second, 30 * time.Second, true},
		{"held after the outage", 50 * time.Second, 40 * time.Second, 5 * time.Second, 45 * time.Second, true},
	}
	for _, tt := range tests {
		l := &lane{cfg: Config{AckWait: ackWait}}
		l.confirmed.Store(now.Add(-tt.confirmed).UnixNano())
		if tt.gap != 0 {
			l.gapAt.Store(now.Add(-tt.gap).UnixNano())
		}
		d := delivery{received: now.Add(-tt.received).UnixNano()}
		if tt.kept != never {
			d.kept = now.Add(-tt.kept).UnixNano()
		}
		require.Equal(t, tt.want, l.alive(d), tt.name)
	}
}

// A keep-alive round waits for its answer a quarter of the ack wait, or
// longer while what it renews leaves room: an answer later than three
// quarters of an ack wait after the last confirmed round's start, or after
// the receipt of a message stamped since (one that waited in the client
// before it was held), would renew what may have run out on the server and
// gone to another relay.
func TestConfirmWait(t *testing.T) {
	t.Parallel()
	const ackWait = 60 * time.Second
	every := keepAliveEvery(ackWait)
	now := time.Now().UnixNano()
	l := &lane{cfg: Config{AckWait: ackWait}}
	l.confirmed.Store(now)
	l.oldestSinceConfirmed, l.oldestSinceRound = noStamp, noStamp
	start := now + int64(every)
	require.Equal(t, 30*time.Second, l.confirmWait(start, noStamp, every), "45 s from the last confirmed start")

	// A message read 20 s before the last confirmed round began, stamped
	// after it: the round's answer must come within 45 s of its receipt.
	d := delivery{received: now - int64(20*time.Second)}
	l.stamp(&d)
	require.Equal(t, every, l.confirmWait(start, l.oldestSinceConfirmed, every), "no room: a quarter, as ever")

	// Its round confirmed, the next rounds count from that round's start.
	l.oldestSinceConfirmed = l.oldestSinceRound // what the loop does on an answer
	l.oldestSinceRound = noStamp
	l.oldestSinceConfirmed = noStamp // nothing stamped since that round began
	require.Equal(t, 30*time.Second, l.confirmWait(start, l.oldestSinceConfirmed, every))
}
