package main

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/relay-dev/relay/internal/testutil"
)

// TestRunLogsEveryDeadLetterAndNoSecret runs relay at debug level with
// credentials and tokens everywhere a URL can carry them (the NATS URL's
// userinfo, subscriber URLs' queries, a receiver that refuses connections
// so that transport errors carry its URL; `relay sub add` refuses userinfo
// in a subscriber URL) and checks its whole output: a
// line for each dead letter, a line for each lane started and stopped, and
// none of the secrets, passwords or query tokens.
func TestRunLogsEveryDeadLetterAndNoSecret(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	rcv := newReceiver(t)
	rcv.setStatus(400)
	leaky := rcv.URL + "/in?token=querytok"
	mustRelay(t, "sub", "add", "leaky", "--nats", n.URL, "--url", leaky, "--secret", testSecret, "--events", "x")
	down := httptest.NewServer(nil)
	downURL := down.URL + "/gone?token=downtok"
	down.Close()
	mustRelay(t, "sub", "add", "down", "--nats", n.URL, "--url", downURL, "--secret", testSecret,
		"--events", "x", "--max-attempts", "1")

	withCreds := strings.Replace(n.URL, "nats://", "nats://natsuser:natspass@", 1)
	r := startRelay(t, withCreds, "--allow-private-targets", "--log-level", "debug")
	for i := range 3 {
		publish(t, n.JS, "x", fmt.Sprintf("e%d", i), []byte(`{}`))
	}
	waitDead(t, n.URL, 6)
	if code := r.stop(); code != 0 {
		t.Fatalf("relay exited %d: %s", code, r.stderr.String())
	}

	out := r.stderr.String()
	secretKey := strings.TrimPrefix(testSecret, "whsec_")
	for _, leak := range []string{"querytok", "downtok", "natspass", secretKey} {
		if strings.Contains(out, leak) {
			t.Errorf("relay's log shows %q:\n%s", leak, out)
		}
	}
	if got := strings.Count(out, "dead-lettered"); got != 6 {
		t.Errorf("%d dead-letter lines, want 6 (3 events × 2 subscribers):\n%s", got, out)
	}
	for _, line := range []string{"lane started", "lane stopped"} {
		if got := strings.Count(out, line); got != 4 {
			t.Errorf("%d lines %q, want one per lane (4)", got, line)
		}
	}
	// On a single server the fan-out learns of subscriber changes from the
	// server, with no bucket read per batch of events.
	if !strings.Contains(out, "subscriber changes signalled by the server") {
		t.Errorf("the fan-out does not follow the change signal on a single server:\n%s", out)
	}
}

// TestRunLogsNoLinePerDelivery: at the default level, deliveries that
// succeed write nothing.
func TestRunLogsNoLinePerDelivery(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	rcv := newReceiver(t)
	mustRelay(t, "sub", "add", "quiet", "--nats", n.URL, "--url", rcv.URL, "--secret", testSecret)
	r := startRelay(t, n.URL, "--allow-private-targets")
	for i := range 20 {
		publish(t, n.JS, "x", fmt.Sprintf("quiet%02d", i), []byte(`{}`))
	}
	testutil.Eventually(t, func() bool { return rcv.count() == 20 }, "20 deliveries")
	if code := r.stop(); code != 0 {
		t.Fatalf("relay exited %d", code)
	}
	if out := r.stderr.String(); strings.Contains(out, "quiet0") || strings.Contains(out, "quiet1") {
		t.Errorf("a line per delivery at info:\n%s", out)
	}
}
