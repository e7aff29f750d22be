package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

// startSmallStore starts a JetStream server whose max_file_store is store,
// as an operator's `jetstream { max_file_store: 64MB }` makes it, and
// returns its URL; it goes when the test ends.
func startSmallStore(t *testing.T, store int64) string {
	t.Helper()
	return testutil.StartNATSWith(t, func(o *server.Options) { o.JetStreamMaxStore = store }).URL
}

// TestRunOnASmallJetStreamStore: relay run --nats against a server with a
// 64 MiB max_file_store starts (a 4 GiB DELIVERIES used to be refused with
// "insufficient storage resources"), says how it sized the streams, and
// delivers.
func TestRunOnASmallJetStreamStore(t *testing.T) {
	t.Parallel()
	url := startSmallStore(t, 64<<20)
	r := startRelay(t, url, "--allow-private-targets")
	waitRunning(t, r)
	if log := r.stderr.String(); !strings.Contains(log, `msg="streams sized"`) || !strings.Contains(log, "deliveries_max_bytes=33554432 ") {
		t.Fatalf("relay run did not log DELIVERIES sized to 32 MiB:\n%s", log)
	}
	rcv := newReceiver(t)
	mustRelay(t, "sub", "add", "demo", "--nats", url, "--url", rcv.URL, "--secret", testSecret)
	js, err := jetstream.New(testutil.Connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	// The relay picks the subscriber up within a second: publish until an
	// event is copied to it.
	probes := 0
	testutil.Eventually(t, func() bool {
		probes++
		publish(t, js, "video.trending", fmt.Sprintf("probe-%d", probes), []byte(`{}`))
		waitIdle(t, js)
		return rcv.count() > 0
	}, "no delivery on a 64 MiB store")
	verify(t, rcv.deliveries()[0])
}

// TestRunRefusesALimitOnRetries: a max_bytes an operator set on RETRIES
// would make JetStream drop parked retries (RETRIES must discard old, for
// message schedules): relay run does not start, exits 1 and names the
// limit in one line.
func TestRunRefusesALimitOnRetries(t *testing.T) {
	t.Parallel()
	n := testutil.StartNATS(t)
	r := startRelay(t, n.URL, "--allow-private-targets")
	waitRunning(t, r)
	if code := r.stop(); code != 0 {
		t.Fatalf("relay run exited %d: %s", code, r.stderr)
	}
	s, err := n.JS.Stream(testutil.Context(t), streams.Retries)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.MaxBytes = 8 << 20 // nats stream edit RETRIES --max-bytes 8MiB
	if _, err := n.JS.UpdateStream(testutil.Context(t), cfg); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := relayCmd(t, "run", "--nats", n.URL, "--metrics", "")
	if code != exitFailure || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "relay: ") ||
		!strings.Contains(stderr, "RETRIES has max_bytes 8 MiB") {
		t.Fatalf("relay run with a max_bytes on RETRIES: exit %d, %q; want 1 and one line naming the limit", code, stderr)
	}
	t.Log(stderr)
}
