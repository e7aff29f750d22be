package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/relay-dev/relay/internal/deadletter"
	"github.com/relay-dev/relay/internal/ratelimit"
	"github.com/relay-dev/relay/internal/status"
	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

// relay status over 10,000 subscribers, some with queues, overflow, parked
// retries, dead letters, pauses and open circuits: the report is right, and
// its wall time is logged (the issue asks for under 2 s; a test on a shared
// machine asserts no time).
func TestStatusAt10000Subscribers(t *testing.T) {
	if testing.Short() {
		t.Skip("stores 10,000 subscribers")
	}
	// Not beside the package's parallel tests: 10,000 subscribers in a
	// server of this process, beside the other scale test's and the
	// rest, left the server no time to answer the lanes' pulls for
	// 30 s on a host running a second suite.
	const total = 10_000
	n := testutil.StartRelayNATS(t)
	ctx := testutil.Context(t)
	id := func(i int) string { return fmt.Sprintf("sub-%05d", i) }

	// The subscribers, written straight into the bucket's stream with
	// async publishes: the values relay sub add would store.
	now := time.Now().UTC()
	published := 0
	pubAsync := func(subject string, data []byte, h nats.Header) {
		t.Helper()
		if _, err := n.JS.PublishMsgAsync(&nats.Msg{Subject: subject, Data: data, Header: h}); err != nil {
			t.Fatalf("publish %s: %v", subject, err)
		}
		if published++; published%1000 == 0 {
			// A loaded host stalls a long async burst (too many
			// outstanding): wait for the PubAcks a thousand at a time.
			select {
			case <-n.JS.PublishAsyncComplete():
			case <-ctx.Done():
				t.Fatal("async publishes not acknowledged")
			}
		}
	}
	paused := map[string]bool{}
	for i := range total {
		sub := subscribers.Subscriber{ID: id(i), URL: "https://example.com/" + id(i), Secrets: []string{testSecret}, CreatedAt: now, UpdatedAt: now}
		if i%2 == 0 {
			sub.Rate = 50
		}
		if i%3000 == 1 { // 1, 3001, 6001, 9001
			sub.Paused = true
			paused[sub.ID] = true
		}
		sub.SetDefaults()
		raw, err := json.Marshal(sub)
		if err != nil {
			t.Fatal(err)
		}
		pubAsync("$KV."+streams.SubscribersBucket+"."+sub.ID, raw, nil)
	}
	// Queues: 3 deliveries on the lane of every 50th subscriber, 2 in
	// the overflow of every 500th.
	var pending uint64
	for i := 0; i < total; i += 50 {
		for range 3 {
			pubAsync("deliveries."+subscribers.LaneFor(id(i), 16)+"."+id(i), []byte("{}"), nil)
			pending++
		}
		if i%500 == 0 {
			for range 2 {
				pubAsync("deliveries.overflow."+id(i), []byte("{}"), nil)
				pending++
			}
		}
	}
	// relay_ratelimit entries for every 5th subscriber, more than one
	// batch of the bucket's reads: two failures in a row each.
	for i := 0; i < total; i += 5 {
		raw, err := json.Marshal(ratelimit.State{Tokens: 1, At: now, Failures: 2})
		if err != nil {
			t.Fatal(err)
		}
		pubAsync("$KV."+streams.RateLimitBucket+"."+id(i), raw, nil)
	}
	select {
	case <-n.JS.PublishAsyncComplete():
	case <-ctx.Done():
		t.Fatal("async publishes not acknowledged")
	}
	// Parked retries for every 1000th subscriber, dead letters for every
	// 2000th, open circuits for 5.
	for i := 0; i < total; i += 1000 {
		parkFor(t, n, id(i), 3)
	}
	for i := 0; i < total; i += 2000 {
		storeDeadLetter(t, n, id(i), deadletter.MaxAttempts, 503, "503 Service Unavailable", uint64(i+1))
		storeDeadLetter(t, n, id(i), deadletter.Rejected, 400, "400 Bad Request", uint64(i+2))
	}
	future := time.Now().Add(time.Hour).UTC()
	for i := 7; i < total; i += 2000 {
		testutil.PutJSON(t, n.JS, streams.RateLimitBucket, id(i), ratelimit.State{Tokens: 1, At: time.Now().UTC(), Failures: 5, OpenUntil: future, Opens: 1})
	}

	start := time.Now()
	out := mustRelay(t, "status", "--nats", n.URL, "--json")
	jsonTook := time.Since(start)
	start = time.Now()
	table := mustRelay(t, "status", "--nats", n.URL, "--limit", "0", "--wide")
	tableTook := time.Since(start)
	paged := mustRelay(t, "status", "--nats", n.URL, "--page", "2", "--wide")
	pagedJSON := mustRelay(t, "status", "--nats", n.URL, "--json", "--limit", "10", "--page", "3")
	start = time.Now()
	detail := mustRelay(t, "status", "--nats", n.URL, "--subscriber", id(0), "--json")
	detailTook := time.Since(start)
	t.Logf("relay status over %d subscribers: --json %v, table %v; --subscriber %v", total,
		jsonTook.Round(time.Millisecond), tableTook.Round(time.Millisecond), detailTook.Round(time.Millisecond))

	var d status.Detail
	if err := json.Unmarshal([]byte(detail), &d); err != nil {
		t.Fatalf("status --subscriber --json: %v", err)
	}
	if d.Parked == nil || *d.Parked != 3 || d.Dead != 2 || len(d.LastErrors) != 2 || d.LastErrors[0].LastError != "400 Bad Request" {
		t.Errorf("detail of %s: parked %v dead %d last errors %+v", id(0), d.Parked, d.Dead, d.LastErrors)
	}

	var rows []status.Subscriber
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("status --json: %v", err)
	}
	if len(rows) != total {
		t.Fatalf("%d rows, want %d", len(rows), total)
	}
	byID := make(map[string]status.Subscriber, total)
	for _, r := range rows {
		byID[r.ID] = r
	}
	if r := byID[id(0)]; r.Pending != 5 || r.Queued != 3 || r.Overflow != 2 || r.Parked != nil || r.Dead != 2 || r.DeadByReason["rejected"] != 1 || r.OldestPendingAge == "" || r.Tokens == nil {
		t.Errorf("%s: %+v", id(0), r)
	}
	for _, i := range []int{10, 4005, 9995} {
		if r := byID[id(i)]; r.Failures != 2 || r.Circuit != ratelimit.Closed {
			t.Errorf("%s: failures %d circuit %s, want its entry's 2, closed", id(i), r.Failures, r.Circuit)
		}
	}
	if r := byID[id(50)]; r.Pending != 3 || r.Overflow != 0 || r.Dead != 0 {
		t.Errorf("%s: %+v", id(50), r)
	}
	if r := byID[id(1)]; r.State != status.Paused || r.PauseReason != status.ByOperator || r.Pending != 0 || r.Tokens != nil {
		t.Errorf("%s: %+v", id(1), r)
	}
	if r := byID[id(2007)]; r.Circuit != ratelimit.Open || r.Failures != 5 {
		t.Errorf("%s: %+v", id(2007), r)
	}
	if r := byID[id(9999)]; r.State != status.Enabled || r.Pending != 0 || r.Circuit != ratelimit.Closed {
		t.Errorf("%s: %+v", id(9999), r)
	}

	summary := strings.SplitN(table, "\n", 2)[0]
	want := fmt.Sprintf("10000 subscribers (9996 enabled, 4 paused, 0 disabled), 5 open circuits, %d pending, 30 parked, 0 scheduled, 10 dead letters, in time -, oldest queue ", pending)
	if !strings.HasPrefix(summary, want) || !strings.HasSuffix(summary, "("+id(0)+")") {
		t.Errorf("summary %q, want %q…(%s)", summary, want, id(0))
	}
	if got := strings.Count(table, "\n"); got < total+3 {
		t.Errorf("table has %d lines, want a summary, a header and %d rows", got, total)
	}
	// The table's second page: the same summary, 100 rows, and where the
	// others are; --json paged alike when asked.
	if !strings.HasPrefix(paged, want) || !strings.Contains(paged, "\nsubscribers 101-200 of 10000 (page 2 of 100): --page 3 for the next, --limit 0 for every one\n") {
		t.Errorf("second page:\n%s", paged)
	}
	if got := strings.Count(strings.SplitN(paged, "\n\nsubscribers 101-200", 2)[0], "\n"); got != 100+2 {
		t.Errorf("second page has %d lines before its page line, want a summary, a blank, a header and 100 rows", got+1)
	}
	var page []status.Subscriber
	if err := json.Unmarshal([]byte(pagedJSON), &page); err != nil || len(page) != 10 || page[0].ID != rows[20].ID {
		t.Errorf("--json --limit 10 --page 3: %d rows (%v), want 10 from %s", len(page), err, rows[20].ID)
	}
}
