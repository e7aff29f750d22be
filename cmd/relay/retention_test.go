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
	if log := keeperPass(t, js, stored.Time.Add(defaultEventsMaxAge+time.Second)); strings.Contains(log, "level=WARN") {
		t.Fatalf("the keeper's pass failed:\n%s", log)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 0 || info.State.FirstSeq != last.Sequence+1 {
		t.Fatalf("EVENTS holds %d events from %d after the pass, want none from %d", info.State.Msgs, info.State.FirstSeq, last.Sequence+1)
	}
}

// keeperPass runs, as relay run does, a keeper of the default age whose
// clock stands at now, until it has made its first pass, and returns its
// log.
func keeperPass(t *testing.T, js jetstream.JetStream, now time.Time) string {
	t.Helper()
	fake := clock.NewFake(now)
	var log testutil.Buffer
	k, err := retention.New(retention.Config{JS: js, MaxAge: defaultEventsMaxAge, Clock: fake,
		Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(testutil.Context(t))
	done := make(chan struct{})
	go func() {
		defer close(done)
		k.Run(ctx)
	}()
	testutil.Eventually(t, func() bool { return fake.Waiters() == 1 }, "the keeper made no pass")
	cancel()
	<-done
	return log.String()
}

// TestRunTakesOverEventsOldDefaultAge: relay run on a cluster whose EVENTS
// still has relay's old 7-day max_age sets it to none and says so once; an
// operator's other max_age is kept, with a warning.
func TestRunTakesOverEventsOldDefaultAge(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		have, want time.Duration
		log        string
	}{
		{7 * 24 * time.Hour, 0, `level=INFO msg="streams: EVENTS max_age 168h0m0s was relay's old default: set to none`},
		{30 * 24 * time.Hour, 30 * 24 * time.Hour, `level=WARN msg="streams: EVENTS has max_age 720h0m0s, under the unlimited relay advises: JetStream may delete events the fan-out has not copied yet`},
	} {
		n := testutil.StartRelayNATS(t)
		ctx := testutil.Context(t)
		s, err := n.JS.Stream(ctx, streams.Events)
		if err != nil {
			t.Fatal(err)
		}
		cfg := s.CachedInfo().Config
		cfg.MaxAge = c.have
		if _, err := n.JS.UpdateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
		r := startRelay(t, n.URL)
		waitRunning(t, r)
		if got := strings.Count(r.stderr.String(), c.log); got != 1 {
			t.Errorf("max_age %s: %d lines %q, want 1:\n%s", c.have, got, c.log, r.stderr)
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.Config.MaxAge != c.want {
			t.Errorf("EVENTS with max_age %s has %s after relay run started, want %s", c.have, info.Config.MaxAge, c.want)
		}
	}
}
