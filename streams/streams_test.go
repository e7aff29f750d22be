package streams_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

func dlqAge(t *testing.T, js jetstream.JetStream) time.Duration {
	t.Helper()
	s, err := js.Stream(testutil.Context(t), streams.DLQ)
	if err != nil {
		t.Fatal(err)
	}
	return s.CachedInfo().Config.MaxAge
}

// TestEnsureKeepsTheDLQAgeUnlessAskedOtherwise: an operator's `nats stream
// edit DLQ --max-age` survives a restart of relay run, and --dlq-max-age
// overrules it.
func TestEnsureKeepsTheDLQAgeUnlessAskedOtherwise(t *testing.T) {
	t.Parallel()
	n := testutil.StartNATS(t)
	ctx := testutil.Context(t)
	ensure := func(age time.Duration) {
		t.Helper()
		if err := streams.Ensure(ctx, n.JS, streams.Options{DLQMaxAge: age}); err != nil {
			t.Fatal(err)
		}
	}
	ensure(0)
	if got := dlqAge(t, n.JS); got != 30*24*time.Hour {
		t.Fatalf("a new DLQ keeps dead letters %s, want 30 days", got)
	}
	cfg := streamConfig(t, n.JS)
	cfg.MaxAge = 90 * 24 * time.Hour
	if _, err := n.JS.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	ensure(0)
	if got := dlqAge(t, n.JS); got != 90*24*time.Hour {
		t.Fatalf("after a restart the DLQ keeps %s, want the operator's 90 days", got)
	}
	ensure(48 * time.Hour)
	if got := dlqAge(t, n.JS); got != 48*time.Hour {
		t.Fatalf("--dlq-max-age 48h gave %s", got)
	}
}

func streamConfig(t *testing.T, js jetstream.JetStream) jetstream.StreamConfig {
	t.Helper()
	s, err := js.Stream(testutil.Context(t), streams.DLQ)
	if err != nil {
		t.Fatal(err)
	}
	return s.CachedInfo().Config
}

// TestEnsureCreatesTheBuckets: every relay bucket exists after Ensure with
// one value a key, the rate-limit state and the refill leases alone
// expiring, and a second Ensure
// (a second relay starting) changes nothing.
func TestEnsureCreatesTheBuckets(t *testing.T) {
	t.Parallel()
	n := testutil.StartNATS(t)
	ctx := testutil.Context(t)
	for range 2 {
		if err := streams.Ensure(ctx, n.JS, streams.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		bucket string
		ttl    time.Duration
	}{
		{streams.SubscribersBucket, 0},
		{streams.RateLimitBucket, 24 * time.Hour},
		{streams.TimelinessBucket, 0},
		{streams.RefillBucket, streams.RefillLeaseTTL},
	} {
		kv, err := n.JS.KeyValue(ctx, c.bucket)
		if err != nil {
			t.Fatalf("bucket %s: %v", c.bucket, err)
		}
		st, err := kv.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.History() != 1 || st.TTL() != c.ttl {
			t.Errorf("bucket %s: history %d, TTL %s; want 1, %s", c.bucket, st.History(), st.TTL(), c.ttl)
		}
	}
}

// A stream created from its definition reads back, with the defaults the
// server fills in, as the same definition: a relay that finds the streams
// another relay is creating leaves them alone instead of sending an update
// that a cluster may leave unanswered. A changed setting relay enforces is
// not the same.
func TestEnsureFindsItsOwnDefinitionsTheSame(t *testing.T) {
	t.Parallel()
	n := testutil.StartNATS(t)
	ctx := testutil.Context(t)
	if err := streams.Ensure(ctx, n.JS, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{streams.Events, streams.Deliveries, streams.DLQ, streams.Retries} {
		want, err := streams.Config(name)
		if err != nil {
			t.Fatal(err)
		}
		want.Replicas = 1
		s, err := n.JS.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		have := s.CachedInfo().Config
		if !streams.SameStream(want, have) {
			t.Errorf("%s: its definition and the stream created from it differ:\nwant %+v\nhave %+v", name, want, have)
		}
		changed := want
		changed.Duplicates++
		if streams.SameStream(changed, have) {
			t.Errorf("%s: a changed duplicate window is taken for the same definition", name)
		}
	}
}

// Every stream drops a message written again within DuplicateWindow, the
// bound relay run's --ack-wait is checked against.
func TestEveryStreamHasTheDuplicateWindow(t *testing.T) {
	t.Parallel()
	for _, name := range []string{streams.Events, streams.Deliveries, streams.Retries, streams.DLQ} {
		cfg, err := streams.Config(name)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Duplicates != streams.DuplicateWindow {
			t.Errorf("%s: duplicate window %v, want %v", name, cfg.Duplicates, streams.DuplicateWindow)
		}
	}
}

// TestEnsureGivesANewStreamTheReplicasOfThoseThatExist: a stream a newer
// relay adds (BODIES) on a cluster whose streams were made R3 is made R3
// too, without --replicas: an R1 one would stop the fan-out when its one
// node is lost.
func TestEnsureGivesANewStreamTheReplicasOfThoseThatExist(t *testing.T) {
	t.Parallel()
	c := testutil.StartRelayCluster(t)
	_, js := c.ConnectJS(t, 0)
	ctx := testutil.Context(t)
	if err := js.DeleteStream(ctx, streams.Bodies); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, func() bool { return streams.Ensure(ctx, js, streams.Options{}) == nil }, "Ensure failed")
	s, err := js.Stream(ctx, streams.Bodies)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.CachedInfo().Config.Replicas; got != 3 {
		t.Fatalf("BODIES made with %d replicas beside R3 streams, want 3", got)
	}
}

// The keys' bucket is made only when asked, once, with one value a key; a
// second ask leaves it as it is.
func TestEnsureKeys(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	ctx := testutil.Context(t)
	if _, err := n.JS.KeyValue(ctx, streams.KeysBucket); err == nil {
		t.Fatal("Ensure made the keys' bucket")
	}
	for range 2 {
		if err := streams.EnsureKeys(ctx, n.JS, 0); err != nil {
			t.Fatal(err)
		}
	}
	kv, err := n.JS.KeyValue(ctx, streams.KeysBucket)
	if err != nil {
		t.Fatal(err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.History() != 1 {
		t.Errorf("history %d, want 1", st.History())
	}
}
