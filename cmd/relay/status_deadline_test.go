package main

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/internal/retry"
	"github.com/relay-dev/relay/internal/status"
	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/internal/timeliness"
	"github.com/relay-dev/relay/streams"
)

// checkStatusDeadlines waits until relay status shows subscriber id with met
// deliveries in time and missed ones dead-lettered for their deadline (the
// relays write their counts every few seconds), then checks the ratio in
// --json, the IN_TIME column and the detail.
func checkStatusDeadlines(t *testing.T, url, id string, met, missed int) {
	t.Helper()
	var row statusRow
	testutil.Eventually(t, func() bool {
		row = statusJSON(t, url)[id]
		return row.Met == uint64(met) && row.Missed == uint64(missed)
	}, "relay status shows %s with %d met and %d missed, want %d and %d", id, row.Met, row.Missed, met, missed)
	if met+missed == 0 {
		if row.InTime != nil {
			t.Errorf("%s: in_time %v without counts, want none", id, *row.InTime)
		}
	} else if want := float64(met) / float64(met+missed); row.InTime == nil || *row.InTime != want {
		t.Errorf("%s: in_time %v, want %v", id, row.InTime, want)
	}
	text := status.FormatInTime(uint64(met), uint64(missed))
	table := mustRelay(t, "status", "--nats", url, "--wide")
	if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(id) + `\s.*\s` + regexp.QuoteMeta(text) + `\s`).MatchString(table) {
		t.Errorf("the table shows no %s in time for %s:\n%s", text, id, table)
	}
	detail := mustRelay(t, "status", "--nats", url, "--subscriber", id)
	want := text
	if met+missed > 0 {
		want = fmt.Sprintf("%s (%d met, %d missed)", text, met, missed)
	}
	if !regexp.MustCompile(`(?m)^in time +` + regexp.QuoteMeta(want) + `$`).MatchString(detail) {
		t.Errorf("the detail of %s lacks in time %s:\n%s", id, want, detail)
	}
}

// relay status shows the deadline counts every relay wrote to
// relay_timeliness, per row and over all, and the deliveries scheduled for
// later apart from the parked retries, in the summary and in the detail.
func TestStatusShowsDeadlinesAndScheduledDeliveries(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	ctx := testutil.Context(t)
	addSub(t, n.URL, "alpha")
	addSub(t, n.URL, "beta")
	kv, err := n.JS.KeyValue(ctx, streams.TimelinessBucket)
	if err != nil {
		t.Fatal(err)
	}
	r := timeliness.NewRecorder(kv)
	for range 3 {
		r.Met("alpha")
	}
	r.Missed("alpha")
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	parkFor(t, n, "alpha", 1)
	for i := range 2 {
		m := retry.Scheduled("alpha", []byte("{}"), nil, time.Now().Add(time.Hour))
		if _, err := n.JS.PublishMsg(ctx, m, jetstream.WithMsgID(fmt.Sprintf("evt-%d.alpha", i))); err != nil {
			t.Fatal(err)
		}
	}

	checkStatusDeadlines(t, n.URL, "alpha", 3, 1)
	checkStatusDeadlines(t, n.URL, "beta", 0, 0)
	table := mustRelay(t, "status", "--nats", n.URL, "--wide")
	if want := ", 1 parked, 2 scheduled, 0 dead letters, in time 75.0% (3 met, 1 missed), oldest queue "; !strings.Contains(table, want) {
		t.Errorf("summary lacks %q:\n%s", want, table)
	}
	detail := mustRelay(t, "status", "--nats", n.URL, "--subscriber", "alpha")
	for _, re := range []string{`(?m)^parked +1$`, `(?m)^scheduled +2$`} {
		if !regexp.MustCompile(re).MatchString(detail) {
			t.Errorf("detail does not match %s:\n%s", re, detail)
		}
	}
	if out := mustRelay(t, "status", "--nats", n.URL, "--json"); strings.Contains(out, `"scheduled"`) {
		t.Errorf("status --json counts scheduled deliveries per subscriber:\n%s", out)
	}
	if out := mustRelay(t, "status", "--nats", n.URL, "--subscriber", "alpha", "--json"); !strings.Contains(out, `"scheduled": 2`) || !strings.Contains(out, `"in_time": 0.75`) {
		t.Errorf("status --subscriber --json:\n%s", out)
	}

	// A cluster whose relays predate the bucket: no counts, no failure.
	if err := n.JS.DeleteKeyValue(ctx, streams.TimelinessBucket); err != nil {
		t.Fatal(err)
	}
	checkStatusDeadlines(t, n.URL, "alpha", 0, 0)
	if table := mustRelay(t, "status", "--nats", n.URL, "--wide"); !strings.Contains(table, ", in time -, ") {
		t.Errorf("summary without the bucket:\n%s", table)
	}
}
