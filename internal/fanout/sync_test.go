package fanout_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/fanout"
	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
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

// TestStoppingFanoutHandsBackWhatItCannotConfirm: as a relay stops, its view
// stops following the bucket while the fan-out's last pull request still
// brings events. An event published after a subscriber was stored must not
// be copied with that stale view and acked: it is handed back, and the next
// fan-out copies it to the new subscriber too.
func TestStoppingFanoutHandsBackWhatItCannotConfirm(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	ctx := testutil.Context(t)
	store, err := subscribers.Open(ctx, n.JS)
	require.NoError(t, err)
	require.NoError(t, store.Put(ctx, sub("warm", "t.>")))
	watchCtx, stopWatch := context.WithCancel(ctx)
	live, err := store.Watch(watchCtx)
	require.NoError(t, err)
	e := &env{n: n, store: store, live: live}
	r := e.start(t)
	waitFannedOut(t, n.JS, publish(t, n.JS, "t.a", []byte(`{}`), msgID("first")))

	// The relay stops: its watch and its fan-out at once (one context in
	// relay run). A subscriber is stored, then an event is published, while
	// the fan-out's last pull request is still out.
	stopWatch()
	<-live.Done()
	r.cancel()
	require.NoError(t, store.Put(ctx, sub("late", "t.>")))
	after := publish(t, n.JS, "t.a", []byte(`{}`), msgID("after"))
	require.NoError(t, r.stop(t))
	_, stale := byMsgID(t, copies(t, n.JS))["after.warm"]
	require.False(t, stale, "the stopping fan-out copied an event with a view it could not confirm")

	// The next fan-out, with a view of its own, copies it to both.
	e.live = liveView(t, store)
	e.start(t, func(c *fanout.Config) { c.AckWait = time.Second })
	waitFannedOut(t, n.JS, after)
	got := byMsgID(t, copies(t, n.JS))
	require.Contains(t, got, "after.warm")
	require.Contains(t, got, "after.late", "the subscriber stored before the event missed it")
}

// liveView opens a view of store that stops when the test ends.
func liveView(t *testing.T, store *subscribers.Store) *subscribers.Live {
	t.Helper()
	ctx, cancel := context.WithCancel(testutil.Context(t))
	live, err := store.Watch(ctx)
	require.NoError(t, err)
	t.Cleanup(func() {
		cancel()
		<-live.Done()
	})
	return live
}

// TestNoEventCopiedWithAViewBehind: the view's watch stops delivering (its
// messages held back on their way, as on a starved host or after a slow
// consumer's drop) while a subscriber is added and an event for it
// published. The fan-out cannot confirm its view: it hands the event back
// rather than copy it with the view it has, which lacks the new subscriber
// and would lose its copy for good. Once the watch delivers again the event
// is copied to both subscribers.
func TestNoEventCopiedWithAViewBehind(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	ctx := testutil.Context(t)
	store, err := subscribers.Open(ctx, n.JS)
	require.NoError(t, err)
	require.NoError(t, store.Put(ctx, sub("warm", "t.>")))
	// The view reads the bucket through a proxy that can hold back what its
	// watch is sent (the messages of the bucket's consumers) while the
	// replies to its Sync pass.
	gate := testutil.StartGateProxy(t, strings.TrimPrefix(n.URL, "nats://"))
	viewStore, err := subscribers.Open(ctx, jsFor(t, testutil.Connect(t, gate.URL())))
	require.NoError(t, err)
	e := &env{n: n, store: store, live: liveView(t, viewStore)}
	r := e.start(t)
	waitFannedOut(t, n.JS, publish(t, n.JS, "t.a", []byte(`{}`), msgID("first")))

	gate.Hold("watch", func(frame []byte) bool {
		return bytes.Contains(frame, []byte("$JS.ACK.KV_"+streams.SubscribersBucket+"."))
	})
	require.NoError(t, store.Put(ctx, sub("late", "t.>")))
	after := publish(t, n.JS, "t.a", []byte(`{}`), msgID("after"))
	// Handed back, or (what this forbids) copied with the stale view.
	testutil.Eventually(t, func() bool {
		_, copied := byMsgID(t, copies(t, n.JS))["after.warm"]
		return copied || strings.Contains(r.log.String(), "events handed back")
	}, "the fan-out neither copied nor handed back the event")
	_, stale := byMsgID(t, copies(t, n.JS))["after.warm"]
	require.False(t, stale, "the fan-out copied an event with a view behind the bucket")
	require.NotZero(t, e.live.Behind(), "the view does not know it is behind")

	gate.Release("watch")
	waitFannedOut(t, n.JS, after)
	got := byMsgID(t, copies(t, n.JS))
	require.Contains(t, got, "after.warm")
	require.Contains(t, got, "after.late", "the subscriber stored before the event missed it")
	require.Zero(t, e.live.Behind())
}
