package consumer

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/sourcegraph/conc"
	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/testutil"
)

// TestKeepAliveNeverFollowsASettle: a keep-alive round that listed a
// message just before it was handed back with a delay does not renew it:
// the message comes back after its delay, before one delivered earlier and
// left to its ack wait. (A keep-alive sent after the NAK made the server
// hold it a whole ack wait from the keep-alive.) The round is still
// confirmed, with nothing of it left to renew.
func TestKeepAliveNeverFollowsASettle(t *testing.T) {
	t.Parallel()
	n := testutil.StartNATS(t)
	ctx := testutil.Context(t)
	_, err := n.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}})
	require.NoError(t, err)
	cons, err := n.JS.CreateConsumer(ctx, "S", jetstream.ConsumerConfig{
		Durable: "c", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 2 * time.Second,
	})
	require.NoError(t, err)
	// s.0 is left to its ack wait; s.1 is handed back with a short delay,
	// then kept alive by a round that listed it before.
	publish(t, n.JS, 0, 2)

	var (
		mu    sync.Mutex
		order []string
		held  = map[string]jetstream.Msg{}
	)
	got := make(chan struct{}, 4)
	pullCtx, cancel := context.WithCancel(context.Background())
	var wg conc.WaitGroup
	wg.Go(func() {
		_ = Pull(pullCtx, n.JS, cons, 16, discard, func(msg jetstream.Msg) {
			mu.Lock()
			defer mu.Unlock()
			if _, ok := held[msg.Subject()]; !ok {
				held[msg.Subject()] = msg
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
	mu.Lock()
	nakked := held["s.1"]
	mu.Unlock()
	require.NoError(t, nakked.NakWithDelay(time.Millisecond))
	require.NoError(t, KeepAlive(n.Conn, 5*time.Second, nakked), "a round with nothing left to renew is confirmed")

	for range 2 {
		select {
		case <-got:
		case <-ctx.Done():
			t.Fatal("not redelivered")
		}
	}
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"s.1", "s.0"}, order, "the message handed back comes after its delay, not after an ack wait from the keep-alive")
}
