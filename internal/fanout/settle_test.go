package fanout_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/fanout"
	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

// pubAcksOf matches the server's PubAcks of stream name.
func pubAcksOf(name string) func(frame []byte) bool {
	mark := []byte(`{"stream":"` + name + `"`)
	return func(frame []byte) bool { return bytes.Contains(frame, mark) }
}

// throughGate connects a JetStream context to e's server through a proxy
// that can hold back the server's messages.
func (e *env) throughGate(t *testing.T) (*testutil.LatencyProxy, *nats.Conn) {
	t.Helper()
	gate := testutil.StartGateProxy(t, strings.TrimPrefix(e.n.URL, "nats://"))
	nc, err := nats.Connect(gate.URL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return gate, nc
}

// TestRunAcksAnEventWithoutWaitingForTheOnesBefore: an event whose copy's
// PubAck is late (held back on its way) holds back its own ack only: the
// event after it, whose copy is stored and answered, is acked meanwhile,
// and the first is acked once its PubAck comes, never handed back.
func TestRunAcksAnEventWithoutWaitingForTheOnesBefore(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sub("a"))
	gate, nc := e.throughGate(t)
	// The first event is due in an hour: its copy goes to RETRIES, whose
	// PubAcks are held back; the second's goes to DELIVERIES.
	gate.Hold("retries", pubAcksOf(streams.Retries))
	later := msgID("later")
	later.Set(streams.HeaderDeliverAt, time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano))
	publish(t, e.n.JS, "x.y", []byte(`{}`), later)
	last := publish(t, e.n.JS, "x.y", []byte(`{}`), msgID("now"))
	var log testutil.Buffer
	e.start(t, func(c *fanout.Config) {
		c.JS, c.Logger = jsFor(t, nc), slog.New(slog.NewTextHandler(&log, nil))
	})

	testutil.Eventually(t, func() bool {
		info := maybeConsumerInfo(t, e.n.JS)
		return info != nil && info.NumPending == 0 && info.NumAckPending == 1 && streamState(t, e.n.JS, streams.Retries).Msgs == 1
	}, "the second event was not acked")
	// Acked while the first still waited: not once the first's PubAck
	// timed out and it was handed back.
	require.NotContains(t, log.String(), "will retry", "the second event waited for the first")
	require.Contains(t, byMsgID(t, copies(t, e.n.JS)), "now.a")
	gate.Release("retries")
	waitFannedOut(t, e.n.JS, last)
	require.NotContains(t, log.String(), "will retry", "an event was handed back")
}

// TestRunRenewsTheEventsItHolds: an event whose copy's PubAck is held back
// for several of the fan-out's ack waits is renewed meanwhile, not
// redelivered, and acked once its PubAck comes.
func TestRunRenewsTheEventsItHolds(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sub("a"))
	gate, nc := e.throughGate(t)
	gate.Hold("deliveries", pubAcksOf(streams.Deliveries))
	const ackWait = 2 * time.Second
	last := publish(t, e.n.JS, "x.y", []byte(`{}`), msgID("slow"))
	e.start(t, func(c *fanout.Config) { c.JS, c.AckWait = jsFor(t, nc), ackWait })
	testutil.Eventually(t, func() bool { return streamState(t, e.n.JS, streams.Deliveries).Msgs == 1 },
		"the copy was not stored")
	// Long enough for the server to redeliver the event twice over were
	// it not renewed (the PubAck times out after 10 s).
	time.Sleep(3 * ackWait)
	info := consumerInfo(t, e.n.JS)
	require.Zero(t, info.NumRedelivered, "the event was redelivered while its PubAck was on its way")
	require.Equal(t, 1, info.NumAckPending)
	gate.Release("deliveries")
	waitFannedOut(t, e.n.JS, last)
	require.Zero(t, consumerInfo(t, e.n.JS).NumRedelivered)
}

// TestRunCopiesOnWhileAnEventIsTriedAgain: an event none of whose copies
// could be made (its dead letter refused: the DLQ takes nothing) is tried
// again while the events after it are fanned out and acked; it is acked
// once the DLQ takes its dead letter.
func TestRunCopiesOnWhileAnEventIsTriedAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sub("a"))
	ctx := testutil.Context(t)
	dlq, err := e.n.JS.Stream(ctx, streams.DLQ)
	require.NoError(t, err)
	cfg := dlq.CachedInfo().Config
	refusing := cfg
	refusing.MaxMsgSize = 1
	_, err = e.n.JS.UpdateStream(ctx, refusing)
	require.NoError(t, err)
	// Due beyond the horizon: its only copy is dead-lettered at once.
	far := msgID("far")
	far.Set(streams.HeaderDeliverAt, time.Now().Add(30*24*time.Hour).UTC().Format(time.RFC3339Nano))
	publish(t, e.n.JS, "x.y", []byte(`{}`), far)
	r := e.start(t, func(c *fanout.Config) { c.Horizon = 7 * 24 * time.Hour })
	testutil.Eventually(t, r.triedAgain, "the event whose dead letter was refused was not tried again")
	last := publish(t, e.n.JS, "x.y", []byte(`{}`), msgID("next"))
	testutil.Eventually(t, func() bool {
		info := maybeConsumerInfo(t, e.n.JS)
		return info != nil && info.NumPending == 0 && info.NumAckPending == 1
	}, "the event after it was not acked")
	require.Contains(t, byMsgID(t, copies(t, e.n.JS)), "next.a")

	_, err = e.n.JS.UpdateStream(ctx, cfg)
	require.NoError(t, err)
	waitFannedOut(t, e.n.JS, last)
	require.Contains(t, stored(t, e.n.JS, streams.DLQ), "dlq.fanout.far.a")
}
