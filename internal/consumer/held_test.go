package consumer

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/sourcegraph/conc"
	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/testutil"
)

// TestHeldKeepsMessagesUntilAnswered: messages held past several ack waits
// are renewed, not redelivered; each leaves the set as it is answered for,
// an ack settling it and a delayed nak bringing it back though the rounds
// go on.
func TestHeldKeepsMessagesUntilAnswered(t *testing.T) {
	t.Parallel()
	const ackWait = time.Second
	n := testutil.StartNATS(t)
	ctx := testutil.Context(t)
	_, err := n.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}})
	require.NoError(t, err)
	cons, err := n.JS.CreateConsumer(ctx, "S", jetstream.ConsumerConfig{
		Durable: "c", AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait,
	})
	require.NoError(t, err)
	publish(t, n.JS, 0, 2)

	var held Held
	got := make(chan jetstream.Msg, 4)
	runCtx, stop := context.WithCancel(context.Background())
	var wg conc.WaitGroup
	wg.Go(func() {
		_ = Pull(runCtx, n.JS, cons, 16, discard, func(msg jetstream.Msg) {
			held.Add(msg)
			got <- msg
		})
	})
	wg.Go(func() { held.KeepAlive(runCtx, ackWait/4) })
	defer func() {
		stop()
		wg.Wait()
	}()
	first, second := <-got, <-got
	require.Equal(t, 2, held.Len())

	// Three ack waits: the server would have sent both again twice.
	time.Sleep(3 * ackWait)
	info, err := cons.Info(ctx)
	require.NoError(t, err)
	require.Zero(t, info.NumRedelivered, "a held message was redelivered")
	require.Equal(t, 2, info.NumAckPending)

	require.NoError(t, held.Ack(first))
	require.NoError(t, held.NakWithDelay(second, 2*ackWait))
	require.Zero(t, held.Len())
	again := <-got
	require.Equal(t, second.Subject(), again.Subject())
	md, err := again.Metadata()
	require.NoError(t, err)
	require.EqualValues(t, 2, md.NumDelivered)
	require.NoError(t, held.Ack(again))
	testutil.Eventually(t, func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.AckFloor.Stream == 2 && info.NumAckPending == 0
	}, "not every message settled")
}
