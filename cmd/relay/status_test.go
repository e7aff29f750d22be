package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/relay-dev/relay/internal/ratelimit"
	"github.com/relay-dev/relay/internal/retry"
	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

// statusRow is the part of a relay status --json element the tests read.
type statusRow struct {
	Subscriber       string     `json:"subscriber"`
	State            string     `json:"state"`
	Lane             string     `json:"lane"`
	Pending          uint64     `json:"pending"`
	LaneInFlight     int        `json:"lane_in_flight"`
	Dead             uint64     `json:"dead"`
	Met              uint64     `json:"met"`
	Missed           uint64     `json:"missed"`
	InTime           *float64   `json:"in_time"`
	Rate             float64    `json:"rate"`
	EffectiveRate    float64    `json:"effective_rate"`
	Tokens           *float64   `json:"tokens"`
	PausedUntil      *time.Time `json:"paused_until"`
	Circuit          string     `json:"circuit"`
	Failures         int        `json:"failures"`
	OldestPendingAge string     `json:"oldest_pending_age"`
	Hint             string     `json:"hint"`
}

// statusJSON runs relay status --json and decodes it by subscriber, failing
// unless the rows come sorted by id.
func statusJSON(t *testing.T, url string) map[string]statusRow {
	t.Helper()
	out := mustRelay(t, "status", "--nats", url, "--json")
	var rows []statusRow
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("status --json is not a JSON array: %v\n%s", err, out)
	}
	byID := map[string]statusRow{}
	for i, r := range rows {
		if i > 0 && rows[i-1].Subscriber >= r.Subscriber {
			t.Fatalf("rows not sorted by id: %s before %s", rows[i-1].Subscriber, r.Subscriber)
		}
		byID[r.Subscriber] = r
	}
	return byID
}

// publishOn stores n plain messages on subject, which nothing moves on.
func publishOn(t *testing.T, n *testutil.NATS, subject string, count int) {
	t.Helper()
	ctx := testutil.Context(t)
	for i := range count {
		if _, err := n.JS.PublishMsg(ctx, &nats.Msg{Subject: subject, Data: fmt.Appendf(nil, "%d", i)}); err != nil {
			t.Fatalf("publish %s: %v", subject, err)
		}
	}
}

// parkFor parks count deliveries for id in RETRIES as a lane does, due in
// an hour, so that nothing moves them during the test.
func parkFor(t *testing.T, n *testutil.NATS, id string, count int) {
	t.Helper()
	ctx := testutil.Context(t)
	at := time.Now().Add(time.Hour)
	for i := range count {
		if err := retry.Park(ctx, n.JS, id, []byte("{}"), nats.Header{}, at, fmt.Sprintf("park-%s-%d", id, i)); err != nil {
			t.Fatalf("park for %s: %v", id, err)
		}
	}
}

func addSub(t *testing.T, url, id string, extra ...string) {
	t.Helper()
	mustRelay(t, append([]string{"sub", "add", id, "--nats", url, "--url", "https://example.com/" + id, "--secret", testSecret}, extra...)...)
}

func TestStatusWithoutSubscribers(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	if out := mustRelay(t, "status", "--nats", n.URL, "--json"); strings.TrimSpace(out) != "[]" {
		t.Fatalf("status --json = %q, want []", out)
	}
	if out := mustRelay(t, "status", "--nats", n.URL); !strings.HasPrefix(out, "no subscribers") {
		t.Fatalf("status = %q, want a no subscribers line", out)
	}
}

func TestStatusCountsEachSubscribersMessages(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	addSub(t, n.URL, "alpha")
	addSub(t, n.URL, "beta", "--rate", "20")
	mustRelay(t, "sub", "disable", "beta", "--nats", n.URL)
	for id, count := range map[string]int{"alpha": 3, "beta": 1} {
		publishOn(t, n, "deliveries."+subscribers.LaneFor(id, 16)+"."+id, count)
	}
	parkFor(t, n, "alpha", 2)
	publishOn(t, n, "dlq.alpha.rejected", 1)
	publishOn(t, n, "dlq.beta.rejected", 4)

	rows := statusJSON(t, n.URL)
	if len(rows) != 2 {
		t.Fatalf("%d rows, want 2: %+v", len(rows), rows)
	}
	a, b := rows["alpha"], rows["beta"]
	if a.Pending != 3 || a.Dead != 1 {
		t.Errorf("alpha pending/dead = %d/%d, want 3/1", a.Pending, a.Dead)
	}
	if b.Pending != 1 || b.Dead != 4 {
		t.Errorf("beta pending/dead = %d/%d, want 1/4", b.Pending, b.Dead)
	}
	// Parked deliveries are in the summary and in --subscriber, not in
	// the rows.
	if out := mustRelay(t, "status", "--nats", n.URL, "--json"); strings.Contains(out, `"parked"`) {
		t.Errorf("status --json counts parked deliveries per subscriber:\n%s", out)
	}
	if a.Lane != subscribers.LaneFor("alpha", 16) || a.State != "enabled" || b.State != "disabled" {
		t.Errorf("alpha lane %q state %q, beta state %q", a.Lane, a.State, b.State)
	}
	if a.Rate != 0 || a.Tokens != nil || b.Rate != 20 || b.EffectiveRate != 20 || b.Tokens == nil || *b.Tokens != 20 {
		t.Errorf("rates: alpha %v tokens %v, beta %v (in force %v) tokens %v; want unlimited without tokens, and 20/s with a full bucket",
			a.Rate, a.Tokens, b.Rate, b.EffectiveRate, b.Tokens)
	}
	for _, r := range rows {
		hint := ""
		if r.Subscriber == "beta" {
			hint = "disabled: new events are not copied to it; what waits is held until relay sub enable beta"
		}
		if r.OldestPendingAge == "" || r.Circuit != "closed" || r.PausedUntil != nil || r.Hint != hint {
			t.Errorf("%s: oldest %q circuit %q paused %v hint %q", r.Subscriber, r.OldestPendingAge, r.Circuit, r.PausedUntil, r.Hint)
		}
	}

	// --lanes moves shared subscribers to other lanes; the counts follow
	// the subscriber, not the lane.
	out := mustRelay(t, "status", "--nats", n.URL, "--lanes", "4", "--json")
	if !strings.Contains(out, `"lane": "`+subscribers.LaneFor("alpha", 4)+`"`) || !strings.Contains(out, `"pending": 3`) {
		t.Errorf("status --lanes 4 does not show alpha on %s with 3 pending:\n%s", subscribers.LaneFor("alpha", 4), out)
	}

	table := mustRelay(t, "status", "--nats", n.URL, "--wide")
	lines := strings.Split(strings.TrimSpace(table), "\n")
	if len(lines) != 15 || !strings.HasPrefix(lines[8], "STREAM ") || !strings.HasPrefix(lines[6], "hint: beta: disabled: new events are not copied") {
		t.Fatalf("table has %d lines, want a summary, a blank line, a header and two rows, a blank line and beta's hint, then a blank line and the streams' header and six rows:\n%s", len(lines), table)
	}
	if want := "2 subscribers (1 enabled, 0 paused, 1 disabled), 0 open circuits, 4 pending, 2 parked, 0 scheduled, 5 dead letters, in time -, oldest queue "; !strings.HasPrefix(lines[0], want) {
		t.Errorf("summary %q, want it to start with %q", lines[0], want)
	}
	for _, col := range []string{"SUBSCRIBER", "STATE", "LANE", "PENDING", "OVERFLOW", "LANE_IN_FLIGHT", "DEAD", "IN_TIME", "RATE", "TOKENS", "PAUSED_UNTIL", "CIRCUIT", "FAILURES", "OLDEST", "DEAD_BY_REASON"} {
		if !strings.Contains(lines[2], col) {
			t.Errorf("header %q lacks %s", lines[2], col)
		}
	}
	if f := strings.Fields(lines[3]); f[0] != "alpha" || f[1] != "enabled" || f[3] != "3" || f[4] != "0" || f[6] != "1" || f[7] != "-" || f[8] != "unlimited" || f[len(f)-1] != "rejected=1" {
		t.Errorf("alpha row %q", lines[3])
	}
	if !strings.HasPrefix(lines[4], "beta") || !strings.Contains(lines[4], "disabled (disabled by relay sub disable)") || !strings.Contains(lines[4], "20/s") {
		t.Errorf("beta row %q", lines[4])
	}
}

func TestStatusShowsTheRateLimitEntry(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	ctx := testutil.Context(t)
	addSub(t, n.URL, "angry", "--rate", "1", "--burst", "10")
	future := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	raw, err := json.Marshal(ratelimit.State{Tokens: 2, PausedUntil: future, OpenUntil: future, Failures: 5})
	if err != nil {
		t.Fatal(err)
	}
	kv, err := n.JS.KeyValue(ctx, streams.RateLimitBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "angry", raw); err != nil {
		t.Fatal(err)
	}

	r := statusJSON(t, n.URL)["angry"]
	if r.PausedUntil == nil || !r.PausedUntil.Equal(future) || r.Circuit != "open" || r.Failures != 5 {
		t.Errorf("paused %v circuit %q failures %d, want %v open 5", r.PausedUntil, r.Circuit, r.Failures, future)
	}
	if r.Tokens == nil || *r.Tokens < 2 || *r.Tokens > 10 {
		t.Errorf("tokens %v, want the stored 2 refilled at 1/s, at most 10", r.Tokens)
	}
	if r.OldestPendingAge != "" {
		t.Errorf("oldest pending age %q without a queue", r.OldestPendingAge)
	}
	table := mustRelay(t, "status", "--nats", n.URL, "--wide")
	for _, want := range []string{future.Format(time.RFC3339), "open", " 5 "} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
}

func TestStatusHintsAtADedicatedLaneForABigBacklog(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	addSub(t, n.URL, "slow", "--rate", "1")
	addSub(t, n.URL, "quick", "--rate", "1000")
	publishOn(t, n, "deliveries."+subscribers.LaneFor("slow", 16)+".slow", 80)
	parkFor(t, n, "slow", 10)
	publishOn(t, n, "deliveries."+subscribers.LaneFor("quick", 16)+".quick", 80)

	rows := statusJSON(t, n.URL)
	const want = "backlog of 80 s at its rate: consider --lane dedicated"
	if got := rows["slow"].Hint; got != want {
		t.Errorf("slow: hint %q, want %q", got, want)
	}
	if got := rows["quick"].Hint; got != "" {
		t.Errorf("quick: hint %q, want none", got)
	}
	table := mustRelay(t, "status", "--nats", n.URL, "--wide")
	if !strings.Contains(table, "hint: slow: "+want) || strings.Contains(table, "hint: quick") {
		t.Errorf("table does not give slow, and only slow, the hint:\n%s", table)
	}
	// The detail counts the parked ones too.
	if detail := mustRelay(t, "status", "--nats", n.URL, "--subscriber", "slow"); !strings.Contains(detail, "backlog of 90 s at its rate") {
		t.Errorf("detail of slow lacks the hint with its parked deliveries:\n%s", detail)
	}
}

func TestStatusRefusesABadLaneCount(t *testing.T) {
	t.Parallel()
	for _, lanes := range []string{"0", "257", "-1"} {
		// No server: a bad flag is refused before relay connects.
		code, _, stderr := relayCmd(t, "status", "--nats", "nats://127.0.0.1:1", "--lanes", lanes)
		if code != exitUsage || !strings.Contains(stderr, "--lanes") {
			t.Errorf("status --lanes %s: exit %d, stderr %q; want 2 naming --lanes", lanes, code, stderr)
		}
	}
	if code, _, _ := relayCmd(t, "status", "extra"); code != exitUsage {
		t.Errorf("status with an argument: exit %d, want 2", code)
	}
}

// TestStatusReadsTheLaneCountFromTheRelays: without --lanes, status names
// each subscriber's lane as the running relays compute it (here 4 lanes,
// not relay run's default of 16); before any relay ran, as the default.
func TestStatusReadsTheLaneCountFromTheRelays(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	addSub(t, n.URL, "alpha")
	lane := func() string {
		var rows []struct {
			ID   string `json:"id"`
			Lane string `json:"lane"`
		}
		out := mustRelay(t, "status", "--nats", n.URL, "--json")
		if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 1 {
			t.Fatalf("status --json: %v: %s", err, out)
		}
		return rows[0].Lane
	}
	if got, want := lane(), subscribers.LaneFor("alpha", 16); got != want {
		t.Errorf("before any relay ran: lane %s, want %s (16 lanes)", got, want)
	}
	startRelay(t, n.URL) // --lanes 4
	testutil.Eventually(t, func() bool {
		_, err := n.JS.Consumer(testutil.Context(t), streams.Deliveries, "lane_s03")
		return err == nil
	}, "the relay's lanes were not created")
	if got, want := lane(), subscribers.LaneFor("alpha", 4); got != want {
		t.Errorf("beside a relay with 4 lanes: lane %s, want %s", got, want)
	}
}
