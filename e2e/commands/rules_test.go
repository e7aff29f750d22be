package commands

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

// stored is the subscriber as relay sub get --json shows it.
func stored(t *testing.T, url, id string) subscribers.Subscriber {
	t.Helper()
	var s subscribers.Subscriber
	if err := json.Unmarshal([]byte(mustRelay(t, "sub", "get", id, "--nats", url, "--json")), &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestRetryStatusRetriesA401: by default a 401 is final (a rejected dead
// letter at the first answer); a subscriber with --retry-status 401 is
// retried until its receiver, whose key was rotated late, takes it. A
// status that is not final by default exits 2, from the same rule as
// every other writer of a subscriber.
func TestRetryStatusRetriesA401(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	startRelay(t, n.URL, "relay-0")
	strict := newSink(t, http.StatusUnauthorized)
	patient := newSink(t, http.StatusUnauthorized)
	mustRelay(t, "sub", "add", "strict", "--nats", n.URL, "--url", strict.URL, "--secret", testSecret, "--events", "order.*")
	mustRelay(t, "sub", "add", "patient", "--nats", n.URL, "--url", patient.URL, "--secret", testSecret, "--events", "order.*",
		"--retry-status", "401,403", "--retry-base", "100ms", "--retry-max", "200ms")
	if got := stored(t, n.URL, "patient").RetryStatus; len(got) != 2 || got[0] != 401 || got[1] != 403 {
		t.Fatalf("stored retry statuses %v, want [401 403]", got)
	}
	if out := mustRelay(t, "sub", "get", "patient", "--nats", n.URL); !strings.Contains(out, "retry status:") || !strings.Contains(out, "401,403") {
		t.Fatalf("relay sub get does not show the retry statuses:\n%s", out)
	}

	publish(t, n.JS, "order.created", "order", 1)
	testutil.Eventually(t, func() bool { return patient.count() >= 3 }, "a 401 of --retry-status is not retried (%d requests)", patient.count())
	patient.set(http.StatusOK)
	before := patient.count()
	testutil.Eventually(t, func() bool { return patient.count() > before }, "no retry after the receiver was fixed")
	if strict.count() != 1 {
		t.Fatalf("the subscriber without --retry-status got %d requests, want 1 (a 401 is final)", strict.count())
	}
	ctx := testutil.Context(t)
	dlq, err := n.JS.Stream(ctx, streams.DLQ)
	if err != nil {
		t.Fatal(err)
	}
	deadOf := func(id string) uint64 {
		info, err := dlq.Info(ctx, jetstream.WithSubjectFilter(streams.DeadLetterFilter(id)))
		if err != nil {
			t.Fatal(err)
		}
		var n uint64
		for _, c := range info.State.Subjects {
			n += c
		}
		return n
	}
	testutil.Eventually(t, func() bool { return deadOf("strict") == 1 }, "the strict subscriber's 401 is not a dead letter")
	if d := deadOf("patient"); d != 0 {
		t.Fatalf("%d dead letters of the patient subscriber, want none:\n%s", d, mustRelay(t, "dlq", "ls", "--nats", n.URL, "--json"))
	}

	for _, bad := range []string{"429", "410", "503", "200", "4o1"} {
		code, _, errOut := relayCmd(t, "sub", "update", "patient", "--nats", n.URL, "--retry-status", bad)
		if code != 2 || !strings.HasPrefix(errOut, "relay: --retry-status: ") || strings.Count(errOut, "\n") != 1 {
			t.Errorf("--retry-status %s: exit %d, stderr %q; want 2 and one line about --retry-status", bad, code, errOut)
		}
	}
	mustRelay(t, "sub", "update", "patient", "--nats", n.URL, "--retry-status", "")
	if got := stored(t, n.URL, "patient").RetryStatus; len(got) != 0 {
		t.Fatalf("--retry-status '' left %v", got)
	}
}

// TestSubUpdateRateMovesABurstNeverGiven: --rate 5 on a subscriber added
// with --rate 50 and no --burst lowers its burst to 5, and says so; one
// whose --burst was given keeps it.
func TestSubUpdateRateMovesABurstNeverGiven(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	mustRelay(t, "sub", "add", "follows", "--nats", n.URL, "--url", "https://example.com/", "--secret", testSecret, "--rate", "50")
	mustRelay(t, "sub", "add", "own", "--nats", n.URL, "--url", "https://example.com/", "--secret", testSecret, "--rate", "50", "--burst", "50")

	code, out, errOut := relayCmd(t, "sub", "update", "follows", "--nats", n.URL, "--rate", "5")
	if code != 0 || !strings.Contains(out, "rate 5/s burst 5") || errOut != "note: its burst followed the rate, from 50 to 5 (--burst N sets one a rate change keeps)\n" {
		t.Fatalf("relay sub update --rate 5: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if b := stored(t, n.URL, "follows").Burst; b != 5 {
		t.Fatalf("burst %d after --rate 5, want 5", b)
	}
	code, out, errOut = relayCmd(t, "sub", "update", "own", "--nats", n.URL, "--rate", "5")
	if code != 0 || !strings.Contains(out, "rate 5/s burst 50") || errOut != "" {
		t.Fatalf("relay sub update --rate 5 of a given burst: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// TestEventsRelayStarMatchesNothingAndSaysSo: relay.* has two tokens and
// every operational event type three: relay sub add refuses it, pointing
// to relay.>, and stores nothing.
func TestEventsRelayStarMatchesNothingAndSaysSo(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	code, out, errOut := relayCmd(t, "sub", "add", "ops", "--nats", n.URL, "--url", "https://example.com/", "--secret", testSecret, "--events", "order.*,relay.*")
	if code != 2 || out != "" || !strings.Contains(errOut, "relay.*") || !strings.Contains(errOut, "relay.>") || strings.Count(errOut, "\n") != 1 {
		t.Fatalf("--events relay.*: exit %d, stdout %q, stderr %q; want 2 and one line pointing to relay.>", code, out, errOut)
	}
	if code, _, _ := relayCmd(t, "sub", "get", "ops", "--nats", n.URL); code == 0 {
		t.Fatal("the refused subscriber was stored")
	}
	mustRelay(t, "sub", "add", "ops", "--nats", n.URL, "--url", "https://example.com/", "--secret", testSecret, "--events", "relay.>")
}
