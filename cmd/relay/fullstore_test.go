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
// not stored), relay delivers every event it had copied, and the events it
// could not copy yet wait in EVENTS; once relay's own purge of EVENTS makes
// room (the events the fan-out copied having passed --events-max-age) relay
// copies and delivers them by itself: no restart, no step on relay's side.
func TestFullStorageRefusesPublishersAndRecoversByItself(t *testing.T) {
	t.Parallel()
	url := startSmallStore(t, 32<<20)
	r := startRelay(t, url, "--allow-private-targets")
	waitRunning(t, r)
	rcv := newReceiver(t)
	mustRelay(t, "sub", "add", "demo", "--nats", url, "--url", rcv.URL, "--secret", testSecret, "--events", "x")
	js, err := jetstream.New(testutil.Connect(t, url))
	require.NoError(t, err)
	// Filling 32 MiB event by event, then draining it, took 128 s of a
	// host running several race-detector suites: more than the two
	// minutes of testutil.Context. Each wait below is bounded by itself.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)

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
