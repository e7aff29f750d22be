package retry_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/internal/retry"
	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

// A parked delivery comes back on its subscriber's lane when due, with its
// headers and body, once, and RETRIES is left empty.
func TestParkedDeliveryComesBackOnItsLane(t *testing.T) {
	t.Parallel()
	t.Run("due later", func(t *testing.T) { t.Parallel(); testParkAndMove(t, 300*time.Millisecond) })
	// A retry whose time passed while it was being parked still comes back.
	t.Run("due already", func(t *testing.T) { t.Parallel(); testParkAndMove(t, -time.Second) })
}

func testParkAndMove(t *testing.T, in time.Duration) {
	n := testutil.StartRelayNATS(t)
	ctx := testutil.Context(t)
	store, err := subscribers.Open(ctx, n.JS)
	if err != nil {
		t.Fatal(err)
	}
	sub := subscribers.Subscriber{ID: "s1", URL: "https://example.com/", Secrets: []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}}
	if err := store.Put(ctx, sub); err != nil {
		t.Fatal(err)
	}
	moveCtx, cancel := context.WithCancel(ctx)
	live, err := store.Watch(moveCtx)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- retry.Move(moveCtx, retry.MoverConfig{JS: n.JS, Subscribers: live, SharedLanes: 4}) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})

	lane := subscribers.LaneFor("s1", 4)
	cons, err := n.JS.CreateOrUpdateConsumer(ctx, streams.Deliveries, jetstream.ConsumerConfig{
		Durable: "lane_" + lane, FilterSubject: "deliveries." + lane + ".>", AckPolicy: jetstream.AckExplicitPolicy,
	})
	if err != nil {
		t.Fatal(err)
	}
	h := nats.Header{}
	h.Set(streams.HeaderEventID, "evt_1")
	h.Set(streams.HeaderAttempt, "3")
	h.Set("Nats-Msg-Id", "must-be-dropped")
	at := time.Now().Add(in)
	// Parking twice with one dedupe id (a crash between park and ack) parks once.
	for range 2 {
		if err := retry.Park(ctx, n.JS, "s1", []byte("body"), h, at, "park-42-3"); err != nil {
			t.Fatal(err)
		}
	}
	msgs, err := cons.Fetch(1, jetstream.FetchMaxWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var got []jetstream.Msg
	for m := range msgs.Messages() {
		got = append(got, m)
		// Confirmed, so that DELIVERIES no longer holds it below.
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if len(got) != 1 {
		t.Fatalf("got %d copies back, want 1", len(got))
	}
	m := got[0]
	if time.Now().Before(at) {
		t.Fatalf("came back before it was due")
	}
	if m.Subject() != "deliveries."+lane+".s1" || string(m.Data()) != "body" ||
		m.Headers().Get(streams.HeaderEventID) != "evt_1" || m.Headers().Get(streams.HeaderAttempt) != "3" {
		t.Fatalf("came back as %s %q %v", m.Subject(), m.Data(), m.Headers())
	}
	testutil.Eventually(t, func() bool {
		return streamMsgs(t, n.JS, streams.Retries) == 0
	}, "RETRIES not empty after the move")
	// Nothing else came back: DELIVERIES holds no second copy.
	if got := streamMsgs(t, n.JS, streams.Deliveries); got != 0 {
		t.Fatalf("DELIVERIES holds %d more copies", got)
	}
}

func streamMsgs(t *testing.T, js jetstream.JetStream, name string) uint64 {
	t.Helper()
	s, err := js.Stream(testutil.Context(t), name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(testutil.Context(t))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}
