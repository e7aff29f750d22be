package main

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/fanout"
	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

// TestFullStorageRefusesPublishersAndRecoversByItself fills a server's
// JetStream storage (max_file_store 32 MiB) with events: the publisher gets
// JetStream's error once there is no room (nothing is acknowledged that is
// not stored; EVENTS, bounded within the store, refuses first), relay
// delivers every event it had copied, and any it could not copy yet wait
// in EVENTS; once relay's own purge of EVENTS makes room (the events the
// fan-out copied having passed --events-max-age) relay copies and delivers
// them, and the next events, by itself: no restart, no step on relay's
// side.
// smallStoreRelay starts a server with a max_file_store of size, a relay
// on it, and a subscriber "demo" of the events of type x delivered to the
// receiver it returns, with a context of ten minutes: filling 32 MiB event
// by event, then draining it, took 128 s of a host running several
// race-detector suites, more than the two minutes of testutil.Context. Each
// wait of the tests is bounded by itself.
func smallStoreRelay(t *testing.T, size int64) (jetstream.JetStream, *webhookSink, context.Context) {
	t.Helper()
	url := startSmallStore(t, size)
	r := startRelay(t, url, "--allow-private-targets")
	waitRunning(t, r)
	rcv := newReceiver(t)
	mustRelay(t, "sub", "add", "demo", "--nats", url, "--url", rcv.URL, "--secret", testSecret, "--events", "x")
	js, err := jetstream.New(testutil.Connect(t, url))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	return js, rcv, ctx
}

func TestFullStorageRefusesPublishersAndRecoversByItself(t *testing.T) {
	t.Parallel()
	js, rcv, ctx := smallStoreRelay(t, 32<<20)

	body := bytes.Repeat([]byte("x"), 16<<10)
	acked, refused := 0, 0
	var firstRefusal error
	for i := 0; i < 4000 && refused < 20; i++ {
		m := &nats.Msg{Subject: fanout.SubjectPrefix + "x", Data: body, Header: nats.Header{}}
		m.Header.Set(nats.MsgIdHdr, fmt.Sprintf("fill-%05d", i))
		pctx, cancel := context.WithTimeout(ctx, 5e9)
		_, err := js.PublishMsg(pctx, m)
		cancel()
		if err != nil {
			refused++
			if firstRefusal == nil {
				firstRefusal = err
			}
			continue
		}
		acked++
	}
	t.Logf("32 MiB store: %d events of 16 KiB acknowledged, then refused: %v", acked, firstRefusal)
	require.Equal(t, 20, refused, "the store never filled")
	require.True(t, streams.NoRoom(firstRefusal), "a publisher to a full store gets JetStream's refusal, got %v", firstRefusal)
	fan, err := js.Consumer(ctx, streams.Events, fanout.ConsumerName)
	require.NoError(t, err)
	var floor uint64
	testutil.Eventually(t, func() bool {
		info, err := fan.Info(ctx)
		if err != nil {
			return false
		}
		floor = info.AckFloor.Stream
		return floor > 0 && distinctIDs(rcv) >= int(floor)
	}, "relay delivered %d of the %d events it copied while the store filled", distinctIDs(rcv), floor)
	t.Logf("while full: %d copied and delivered, %d waiting in EVENTS", floor, acked-int(floor))

	// relay's own purge makes room without losing what waits: a keeper
	// whose clock stands --events-max-age past the last event stored purges
	// EVENTS of what the fan-out copied, and of nothing else. The rest, and
	// the next events, go through.
	events, err := js.Stream(ctx, streams.Events)
	require.NoError(t, err)
	state, err := events.Info(ctx)
	require.NoError(t, err)
	last, err := events.GetMsg(ctx, state.State.LastSeq)
	require.NoError(t, err)
	log := keeperPass(t, js, last.Time.Add(defaultEventsMaxAge+time.Second))
	require.NotContains(t, log, "not purged", "the keeper's pass failed")
	state, err = events.Info(ctx)
	require.NoError(t, err)
	require.Greater(t, state.State.FirstSeq, floor, "the keeper purged nothing the fan-out had copied:\n%s", log)
	t.Logf("relay's purge: EVENTS from sequence %d, %d events left", state.State.FirstSeq, state.State.Msgs)
	for i := range 10 {
		publish(t, js, "x", fmt.Sprintf("after-%d", i), []byte(`{}`))
	}
	testutil.Eventually(t, func() bool { return distinctIDs(rcv) >= acked+10 },
		"after the purge: %d of %d delivered", distinctIDs(rcv), acked+10)
	_, dup := uniqueIDs(rcv)
	t.Logf("%d delivered twice", dup)
}

// publishUntilRefused publishes events of body to events.x, each with a
// PubAck, until the server has refused refusals of them (or most were
// tried), and returns how many it acknowledged and its first refusal.
func publishUntilRefused(ctx context.Context, t *testing.T, js jetstream.JetStream, prefix string, body []byte, refusals, most int) (acked int, first error) {
	t.Helper()
	// In windows of PubAcks asked at once: one publish at a time on a
	// loaded host is slower than relay's purge of a bounded EVENTS (every
	// 5 s), and the publisher would go on for minutes before it was
	// refused refusals times.
	const window = 256
	refused := 0
	for i := 0; i < most && refused < refusals; {
		var futures []jetstream.PubAckFuture
		for ; i < most && len(futures) < window; i++ {
			m := &nats.Msg{Subject: fanout.SubjectPrefix + "x", Data: body, Header: nats.Header{}}
			m.Header.Set(nats.MsgIdHdr, fmt.Sprintf("%s-%05d", prefix, i))
			f, err := js.PublishMsgAsync(m)
			require.NoError(t, err)
			futures = append(futures, f)
		}
		for _, f := range futures {
			select {
			case <-f.Ok():
				acked++
			case err := <-f.Err():
				refused++
				if first == nil {
					first = err
				}
			case <-ctx.Done():
				t.Fatal("PubAcks did not come")
			}
		}
	}
	require.GreaterOrEqual(t, refused, refusals, "%d events acknowledged and never refused", acked)
	return acked, first
}

// TestFullStoreRefusesThePublisherAndDeliversEveryEventItAccepted: on a
// server with a 96 MiB max_file_store, 4 KiB events published with PubAcks
// until the server has refused 2,000 of them: a publisher that keeps asking
// takes any room a delivery frees. relay created EVENTS bounded, discard
// new, within what DELIVERIES and ATTEMPTS leave, so the refusal comes from
// EVENTS while the store still has room for the copies of what EVENTS
// holds: every acknowledged event is delivered to the receiver, and the
// fan-out has nothing left pending. Before, EVENTS took the room the copies
// needed: 23,099 of 23,156 acknowledged events were delivered, the rest
// waited in EVENTS, "insufficient resources" every 10 s, for ever.
func TestFullStoreRefusesThePublisherAndDeliversEveryEventItAccepted(t *testing.T) {
	t.Parallel()
	js, rcv, ctx := smallStoreRelay(t, 96<<20)
	events, err := js.Stream(ctx, streams.Events)
	require.NoError(t, err)
	cfg := events.CachedInfo().Config
	require.Equal(t, jetstream.DiscardNew, cfg.Discard, "EVENTS does not discard new")
	require.Positive(t, cfg.MaxBytes, "EVENTS is unbounded on a 96 MiB store")

	acked, refusal := publishUntilRefused(ctx, t, js, "fill", bytes.Repeat([]byte("x"), 4<<10), 2000, 60000)
	t.Logf("96 MiB store, EVENTS max_bytes %s: %d events of 4 KiB acknowledged, then refused: %v", streams.FormatBytes(cfg.MaxBytes), acked, refusal)
	require.True(t, streams.NoRoom(refusal), "a publisher to a full EVENTS gets JetStream's refusal, got %v", refusal)
	testutil.Progress(t, func() int { return distinctIDs(rcv) }, acked, 30*time.Second,
		"relay stopped delivering the events it acknowledged")
	require.True(t, fannedOut(ctx, js), "the fan-out has events pending after every acknowledged one was delivered")
	_, dup := uniqueIDs(rcv)
	t.Logf("all %d delivered, %d twice", acked, dup)
}

// TestEventsLimitSetWhileTheFanOutIsStoppedDeletesNothing: an operator
// bounds EVENTS (1 MiB) while no relay runs; events published past it are
// refused, not made room for by deleting the oldest, which the fan-out has
// not copied; the next relay run delivers every one acknowledged.
func TestEventsLimitSetWhileTheFanOutIsStoppedDeletesNothing(t *testing.T) {
	t.Parallel()
	n := testutil.StartNATS(t)
	first := startRelay(t, n.URL, "--allow-private-targets")
	waitRunning(t, first)
	rcv := newReceiver(t)
	mustRelay(t, "sub", "add", "demo", "--nats", n.URL, "--url", rcv.URL, "--secret", testSecret, "--events", "x")
	require.Equal(t, 0, first.stop(), "relay run did not stop cleanly")

	ctx := testutil.Context(t)
	events, err := n.JS.Stream(ctx, streams.Events)
	require.NoError(t, err)
	cfg := events.CachedInfo().Config
	cfg.MaxBytes = 1 << 20 // nats stream edit EVENTS --max-bytes 1MiB
	_, err = n.JS.UpdateStream(ctx, cfg)
	require.NoError(t, err)
	acked, refusal := publishUntilRefused(ctx, t, n.JS, "held", bytes.Repeat([]byte("x"), 4<<10), 5, 1000)
	require.True(t, streams.NoRoom(refusal), "a publisher past EVENTS' max_bytes gets JetStream's refusal, got %v", refusal)
	info, err := events.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(1), info.State.FirstSeq, "events the fan-out had not copied were deleted")
	require.Equal(t, uint64(acked), info.State.Msgs, "EVENTS holds fewer events than were acknowledged")
	t.Logf("fan-out stopped, EVENTS max_bytes 1 MiB: %d events of 4 KiB acknowledged, then refused: %v", acked, refusal)

	r := startRelay(t, n.URL, "--allow-private-targets")
	waitRunning(t, r)
	testutil.Progress(t, func() int { return distinctIDs(rcv) }, acked, 30*time.Second,
		"the next relay run did not deliver the events EVENTS kept")
}
