package main

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/internal/clock"
	"github.com/relay-dev/relay/internal/fanout"
	"github.com/relay-dev/relay/internal/retention"
	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

// TestPermissionsOfTheDocCoverEventsRetention: as the relay user of
// docs/permissions.md, the keeper relay run starts reads the fan-out's ack
// floor, finds the first event to keep and purges EVENTS below it, without
// a refusal (connectAs fails the test on one).
func TestPermissionsOfTheDocCoverEventsRetention(t *testing.T) {
	t.Parallel()
	url := startDocNATS(t, docAccount(t))
	ctx := testutil.Context(t)
	js := connectAs(t, url, "relay")
	if err := streams.Ensure(ctx, js, streams.Options{Logger: slog.New(slog.DiscardHandler)}); err != nil {
		t.Fatal(err)
	}
	pub := connectAs(t, url, "publisher")
	var last *jetstream.PubAck
	for _, id := range []string{"evt_1", "evt_2", "evt_3"} {
		last = publish(t, pub, "order.paid", id, []byte(`{}`))
	}
	// The fan-out's consumer, as relay run makes it, takes and acks them.
	cons, err := js.CreateConsumer(ctx, streams.Events, jetstream.ConsumerConfig{
		Durable: fanout.ConsumerName, AckPolicy: jetstream.AckExplicitPolicy, MaxDeliver: -1,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(3, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for m := range batch.Messages() {
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatal(err)
		}
	}
	s, err := js.Stream(ctx, streams.Events)
	if err != nil {
		t.Fatal(err)
	}
	stored, err := s.GetMsg(ctx, last.Sequence)
	if err != nil {
		t.Fatal(err)
	}

	// A clock a week past the last event: all three are older than the age.
	fake := clock.NewFake(stored.Time.Add(defaultEventsMaxAge + time.Second))
	var log testutil.Buffer
	k, err := retention.New(retention.Config{JS: js, MaxAge: defaultEventsMaxAge, Clock: fake,
		Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		k.Run(runCtx)
	}()
	testutil.Eventually(t, func() bool { return fake.Waiters() == 1 }, "the keeper made no pass")
	cancel()
	<-done
	if strings.Contains(log.String(), "level=WARN") {
		t.Fatalf("the keeper's pass failed:\n%s", log.String())
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 0 || info.State.FirstSeq != last.Sequence+1 {
		t.Fatalf("EVENTS holds %d events from %d after the pass, want none from %d", info.State.Msgs, info.State.FirstSeq, last.Sequence+1)
	}
}
