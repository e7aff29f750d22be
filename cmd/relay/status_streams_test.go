package main

import (
	"encoding/json"
	"regexp"
	"testing"

	"github.com/relay-dev/relay/internal/status"
	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

// TestStatusShowsTheStreamsUse: relay status shows, under the subscribers,
// each relay stream's messages and bytes against its limits, an
// operator's included; --streams shows them alone, as a JSON array with
// --json, while --json alone stays the array of subscribers.
func TestStatusShowsTheStreamsUse(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	addSub(t, n.URL, "demo")
	publishOn(t, n, "deliveries.s00.demo", 3)
	ctx := testutil.Context(t)
	s, err := n.JS.Stream(ctx, streams.DLQ)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.MaxBytes = 64 << 20
	if _, err := n.JS.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}

	table := mustRelay(t, "status", "--nats", n.URL)
	for _, row := range []string{
		`STREAM\s+MESSAGES\s+MAX_MSGS\s+BYTES\s+MAX_BYTES\s+USED\s+MAX_AGE\s+WHEN_FULL`,
		`EVENTS\s+0\s+unlimited\s+0 B\s+unlimited\s+-\s+-\s+refuses new`,
		`DELIVERIES\s+3\s+unlimited\s+\d+ B\s+4 GiB\s+0\.0%\s+-\s+refuses new`,
		`DLQ\s+0\s+unlimited\s+0 B\s+64 MiB\s+0\.0%\s+720h0m0s\s+drops oldest`,
		`ATTEMPTS\s+0\s+unlimited\s+0 B\s+1 GiB\s+0\.0%\s+72h0m0s\s+drops oldest`,
	} {
		if !regexp.MustCompile(`(?m)^` + row).MatchString(table) {
			t.Errorf("relay status has no row %q:\n%s", row, table)
		}
	}

	var use []status.Stream
	out := mustRelay(t, "status", "--nats", n.URL, "--streams", "--json")
	if err := json.Unmarshal([]byte(out), &use); err != nil {
		t.Fatalf("status --streams --json is not a JSON array: %v\n%s", err, out)
	}
	if len(use) != 6 || use[1].Name != streams.Deliveries || use[1].Messages != 3 || use[1].Used == nil || use[3].MaxBytes != 64<<20 {
		t.Fatalf("status --streams --json = %+v", use)
	}
	if rows := statusJSON(t, n.URL); len(rows) != 1 || rows["demo"].Pending != 3 {
		t.Fatalf("status --json = %+v, want demo's row alone", rows)
	}
	if code, _, stderr := relayCmd(t, "status", "--nats", n.URL, "--streams", "--subscriber", "demo"); code != exitUsage {
		t.Fatalf("--streams with --subscriber: exit %d, %s; want %d", code, stderr, exitUsage)
	}
}
