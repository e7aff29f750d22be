package lanes

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/sourcegraph/conc"
	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/clock"
	"github.com/relay-dev/relay/internal/consumer"
	"github.com/relay-dev/relay/internal/testutil"
)

// TestLetGoRenewedByALateRoundIsHandedBack: a delivery let go while a
// later keep-alive round went out on a connection that held, only its
// answer late, is handed back: it comes again at once, before a delivery
// read earlier and left to its ack wait. (Let go unsent, the server held it
// a whole ack wait from that round, for nobody.)
func TestLetGoRenewedByALateRoundIsHandedBack(t *testing.T) {
	t.Parallel()
	const ackWait = 3 * time.Second
	n := testutil.StartNATS(t)
	ctx := testutil.Context(t)
	_, err := n.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}})
	require.NoError(t, err)
	cons, err := n.JS.CreateConsumer(ctx, "S", jetstream.ConsumerConfig{
		Durable: "c", AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait,
	})
	require.NoError(t, err)
	// s.0 is left to its ack wait; s.1 is let go.
	for _, subj := range []string{"s.0", "s.1"} {
		_, err := n.JS.Publish(ctx, subj, []byte("{}"))
		require.NoError(t, err)
	}

	var (
		mu    sync.Mutex
		order []string
		first = map[string]jetstream.Msg{}
	)
	got := make(chan struct{}, 4)
	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	pullCtx, cancel := context.WithCancel(context.Background())
	var wg conc.WaitGroup
	wg.Go(func() {
		_ = consumer.Pull(pullCtx, n.JS, cons, 16, discard, func(msg jetstream.Msg) {
			mu.Lock()
			defer mu.Unlock()
			if _, ok := first[msg.Subject()]; !ok {
				first[msg.Subject()] = msg
			} else {
				order = append(order, msg.Subject())
				_ = msg.Ack()
			}
			got <- struct{}{}
		})
	})
	defer func() {
		cancel()
		wg.Wait()
	}()
	for range 2 {
		<-got
	}

	cfg := Config{JS: n.JS, AckWait: ackWait, Clock: clock.Real, Logger: discard}
	l := &lane{cfg: cfg, name: "s00", log: discard, env: &engine{cfg: cfg, logged: make(map[string]time.Time)}}
	mu.Lock()
	d := newDelivery(first["s.1"])
	mu.Unlock()
	d.kept = ackNow()
	// A round began after it was held, and its answer did not come in
	// time; the connection held.
	l.unconfirmedReconnects.Store(n.Conn.Stats().Reconnects)
	l.unconfirmedAt.Store(ackNow())
	require.True(t, l.renewedUnconfirmed(d))
	l.letGo(d, "sub")

	// Not after a reconnect, which may have lost the round; not a message
	// held after the round began, which it did not renew; not when the
	// round is older than the share of the ack wait it counts for.
	at := l.unconfirmedAt.Load()
	l.unconfirmedReconnects.Add(1)
	require.False(t, l.renewedUnconfirmed(d), "a reconnect since the round")
	l.unconfirmedReconnects.Add(^uint64(0))
	later := d
	later.kept = at + 1
	require.False(t, l.renewedUnconfirmed(later), "held after the round began")
	l.unconfirmedAt.Store(at - int64(aliveFor(ackWait)))
	older := d
	older.kept = at - int64(aliveFor(ackWait)) - 1
	require.False(t, l.renewedUnconfirmed(older), "the round began three quarters of an ack wait ago")

	for range 2 {
		select {
		case <-got:
		case <-ctx.Done():
			t.Fatal("not delivered again")
		}
	}
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"s.1", "s.0"}, order, "the delivery let go comes again at once, not an ack wait later")
}
