package fanout_test

import (
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/testutil"
)

// TestSubscriberAddedBeforeAnEventGetsIt checks end to end that an event
// published right after a subscriber was stored reaches it: the fan-out
// brings its view up to the event before it copies it. Each round adds a
// subscriber and publishes its event at once, from another connection.
// (subscribers.TestSyncSeesEveryChangeStoredBeforeIt shows the lag this
// closes: without Sync the view misses most such subscribers for a moment.)
func TestSubscriberAddedBeforeAnEventGetsIt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(t)
	other := testutil.Connect(t, e.n.URL)
	js := jsFor(t, other)
	const rounds = 40
	var last uint64
	for i := range rounds {
		require.NoError(t, e.store.Put(testutil.Context(t), sub(fmt.Sprintf("late%02d", i), fmt.Sprintf("t.%02d", i))))
		last = publish(t, js, fmt.Sprintf("t.%02d", i), []byte(`{}`), nats.Header{"Nats-Msg-Id": []string{fmt.Sprintf("e%02d", i)}})
	}
	waitFannedOut(t, e.n.JS, last)
	got := byMsgID(t, copies(t, e.n.JS))
	for i := range rounds {
		id := fmt.Sprintf("e%02d.late%02d", i, i)
		if _, ok := got[id]; !ok {
			t.Errorf("no copy %s: the subscriber added just before its event missed it", id)
		}
	}
}

func jsFor(t *testing.T, nc *nats.Conn) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return js
}
