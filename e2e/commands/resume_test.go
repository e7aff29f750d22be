package commands

import (
	"net/http"
	"testing"
	"time"

	"github.com/relay-dev/relay/internal/ratelimit"
	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

// TestSubResumeClosesTheCircuitOnEveryRelay: a subscriber whose circuit is
// open for ten minutes more, its eighth cool-down in a row (what a
// receiver down for half an hour leaves), is held by two relays; its
// receiver is fixed. relay sub resume closes the circuit: every event
// waiting is delivered long before the cool-down ends, relay status shows
// the circuit closed, and the next cool-down would start from the
// shortest. Before, resume said "was not paused" and the deliveries waited
// for the probe.
func TestSubResumeClosesTheCircuitOnEveryRelay(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	rcv := newSink(t, http.StatusOK)
	open := time.Now().Add(10 * time.Minute).UTC()
	testutil.PutJSON(t, n.JS, streams.RateLimitBucket, "partner", ratelimit.State{Tokens: 10, At: time.Now().UTC(), Failures: 5, OpenUntil: open, Opens: 8})
	startRelay(t, n.URL, "relay-0")
	startRelay(t, n.URL, "relay-1")
	mustRelay(t, "sub", "add", "partner", "--nats", n.URL, "--url", rcv.URL, "--secret", testSecret, "--events", "order.*")

	const events = 20
	publish(t, n.JS, "order.created", "order", events)
	testutil.Eventually(t, func() bool { return statusOf(t, n.URL, "partner").Pending == events },
		"the events do not all wait for the open circuit")
	row := statusOf(t, n.URL, "partner")
	if row.Circuit != ratelimit.Open || rcv.count() != 0 {
		t.Fatalf("before resume: circuit %s, %d requests; want open, none", row.Circuit, rcv.count())
	}

	out := mustRelay(t, "sub", "resume", "partner", "--nats", n.URL)
	if want := "subscriber partner resumed: its circuit closed (it was open)\n"; out != want {
		t.Fatalf("relay sub resume printed %q, want %q", out, want)
	}
	testutil.Eventually(t, func() bool { return rcv.count() >= events }, "the waiting events are not delivered after resume (%d of %d)", rcv.count(), events)
	row = statusOf(t, n.URL, "partner")
	if row.Circuit != ratelimit.Closed || row.Failures != 0 {
		t.Fatalf("after resume: circuit %s, %d failures; want closed, none", row.Circuit, row.Failures)
	}
	if time.Now().After(open) {
		t.Fatal("the cool-down ended by itself before the test looked: it proves nothing")
	}
	if out := mustRelay(t, "sub", "resume", "partner", "--nats", n.URL); out != "subscriber partner was not paused, and its circuit is closed\n" {
		t.Fatalf("a second resume printed %q", out)
	}
}
