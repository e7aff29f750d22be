package commands

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

// TestSubRmDropsWhatARelayHoldsWithoutDeadLetters: a subscriber limited
// to one request a second has a backlog, part of it held in the relay's
// memory. relay sub rm asks for --yes, then removes it; the relay drops
// what it held, counts it in relay_deliveries_removed_total, and stores no
// dead letter (so no relay.delivery.dead event and no RelayDeadLetters
// alert). Before, what the relay held became unroutable dead letters.
func TestSubRmDropsWhatARelayHoldsWithoutDeadLetters(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	rcv := newSink(t, http.StatusOK)
	metrics := startRelay(t, n.URL, "relay-0")
	mustRelay(t, "sub", "add", "gone", "--nats", n.URL, "--url", rcv.URL, "--secret", testSecret, "--rate", "1", "--events", "order.*")
	publish(t, n.JS, "order.created", "order", 40)
	testutil.Eventually(t, func() bool { return rcv.count() >= 1 }, "nothing delivered")

	code, out, errOut := relayCmd(t, "sub", "rm", "gone", "--nats", n.URL)
	if code != 2 || out != "" || !strings.Contains(errOut, "deliveries waiting") || !strings.Contains(errOut, "add --yes") {
		t.Fatalf("relay sub rm without --yes: exit %d, stdout %q, stderr %q; want 2 asking for --yes", code, out, errOut)
	}
	out = mustRelay(t, "sub", "rm", "gone", "--nats", n.URL, "--yes")
	if !strings.Contains(out, "subscriber gone removed") {
		t.Fatalf("relay sub rm --yes: %q", out)
	}
	testutil.Eventually(t, func() bool { return counter(t, metrics, "relay_deliveries_removed_total") > 0 },
		"the relay does not count the deliveries it held as removed")
	ctx := testutil.Context(t)
	dlq, err := n.JS.Stream(ctx, streams.DLQ)
	if err != nil {
		t.Fatal(err)
	}
	info, err := dlq.Info(ctx, jetstream.WithSubjectFilter(streams.DeadLetterFilter("gone")))
	if err != nil {
		t.Fatal(err)
	}
	if len(info.State.Subjects) != 0 {
		t.Fatalf("dead letters of the removed subscriber: %v; want none", info.State.Subjects)
	}
}

// counter is the value of an unlabelled counter on a relay's /metrics.
func counter(t *testing.T, addr, name string) float64 {
	t.Helper()
	for _, line := range strings.Split(metricsText(t, addr), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	return 0
}

// TestSubRmAgainFinishesAHalfDonePurge: relay sub rm removed the key but
// failed to drop the queues (it says "run relay sub rm ID --yes again"). Run
// again, it finds no subscriber, and still drops what waits; without
// --yes, or with nothing left to drop, the id is not found as before.
func TestSubRmAgainFinishesAHalfDonePurge(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	mustRelay(t, "sub", "add", "half", "--nats", n.URL, "--url", "https://example.com/in", "--secret", testSecret)
	ctx := testutil.Context(t)
	kv, err := n.JS.KeyValue(ctx, streams.SubscribersBucket)
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Purge(ctx, "half"); err != nil { // the first run's removal, its purge failed
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := n.JS.Publish(ctx, "deliveries.s00.half", []byte(`{}`), jetstream.WithMsgID("half-"+strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	if code, _, _ := relayCmd(t, "sub", "rm", "half", "--nats", n.URL); code == 0 {
		t.Fatal("relay sub rm without --yes of an id not there succeeded")
	}
	out := mustRelay(t, "sub", "rm", "half", "--nats", n.URL, "--yes")
	if !strings.Contains(out, "3 queued") {
		t.Fatalf("relay sub rm --yes run again: %q; want its 3 queued deliveries dropped", out)
	}
	if code, _, errOut := relayCmd(t, "sub", "rm", "half", "--nats", n.URL, "--yes"); code == 0 || !strings.Contains(errOut, "half") {
		t.Fatalf("relay sub rm --yes with nothing left: exit %d, %q; want not found", code, errOut)
	}
}
