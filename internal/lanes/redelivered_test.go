package lanes

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/testutil"
)

// A message JetStream hands out again (after a NAK here; a hand-back, a
// failed park or a stopped relay in a lane) is known as redelivered, so
// that its wait since its copy was stored is not taken for one stage of a
// first delivery.
func TestNewDeliveryKnowsARedelivery(t *testing.T) {
	t.Parallel()
	n := testutil.StartNATS(t)
	ctx := testutil.Context(t)
	_, err := n.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "R", Subjects: []string{"r.>"}})
	require.NoError(t, err)
	_, err = n.JS.Publish(ctx, "r.x", []byte("x"))
	require.NoError(t, err)
	cons, err := n.JS.CreateOrUpdateConsumer(ctx, "R", jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy})
	require.NoError(t, err)

	next := func() delivery {
		t.Helper()
		msg, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		require.NoError(t, err)
		return newDelivery(msg)
	}
	first := next()
	require.False(t, first.redelivered, "a first delivery")
	require.NoError(t, first.msg.Nak())
	again := next()
	require.True(t, again.redelivered, "handed out again after a NAK")
	require.Equal(t, first.seq, again.seq)
	require.NoError(t, again.msg.Ack())
}
