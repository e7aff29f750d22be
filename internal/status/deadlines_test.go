package status

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/internal/retry"
	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/internal/timeliness"
	"github.com/relay-dev/relay/streams"
)

// schedule holds n copies of events for subscriber id in RETRIES until an
// hour from now, as the fan-out holds an event whose Relay-Deliver-At is
// ahead: a JetStream message schedule each, on a subject of its own.
func schedule(t *testing.T, js jetstream.JetStream, id string, n int) {
	t.Helper()
	ctx := testutil.Context(t)
	at := time.Now().Add(time.Hour)
	for i := range n {
		m := retry.Scheduled(id, fmt.Appendf(nil, "s%d", i), nats.Header{}, at)
		if _, err := js.PublishMsg(ctx, m, jetstream.WithMsgID(fmt.Sprintf("evt-%d.%s", i, id))); err != nil {
			t.Fatalf("schedule for %s: %v", id, err)
		}
	}
}

// record adds met and missed deliveries of id to the relay_timeliness
// bucket as a relay's Recorder does.
func record(t *testing.T, js jetstream.JetStream, counts map[string]timeliness.Counts) {
	t.Helper()
	ctx := testutil.Context(t)
	kv, err := js.KeyValue(ctx, streams.TimelinessBucket)
	if err != nil {
		t.Fatal(err)
	}
	r := timeliness.NewRecorder(kv)
	for id, c := range counts {
		for range c.Met {
			r.Met(id)
		}
		for range c.Missed {
			r.Missed(id)
		}
	}
	if err := r.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
}

// Deliveries not due yet are counted apart from parked retries: in all in
// the summary (RETRIES' message count split by one count of retries.at.>),
// by subscriber in its detail; and the text says both.
func TestStatusCountsScheduledApartFromParked(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	alpha, beta, idle := limited("alpha", 10), limited("beta", 10), limited("idle", 10)
	park(t, n.JS, "alpha", 2)
	pub(t, n.JS, "retries.due.alpha", 1)
	schedule(t, n.JS, "alpha", 3)
	park(t, n.JS, "beta", 1)
	schedule(t, n.JS, "beta", 4)

	report, err := Collect(testutil.Context(t), n.JS, []subscribers.Subscriber{alpha, beta, idle}, testLanes)
	if err != nil {
		t.Fatal(err)
	}
	if s := report.Summary; s.Parked != 4 || s.Scheduled != 7 {
		t.Errorf("summary: %d parked, %d scheduled; want 4, 7", s.Parked, s.Scheduled)
	}
	if got := report.Summary.String(); !strings.Contains(got, ", 4 parked, 7 scheduled, ") {
		t.Errorf("summary line %q lacks 4 parked, 7 scheduled", got)
	}
	for _, r := range report.Subscribers {
		if r.Parked != nil || r.Scheduled != nil {
			t.Errorf("%s: parked %v, scheduled %v counted per subscriber in the overview", r.ID, r.Parked, r.Scheduled)
		}
	}
	for _, c := range []struct {
		sub               subscribers.Subscriber
		parked, scheduled uint64
	}{{alpha, 3, 3}, {beta, 1, 4}, {idle, 0, 0}} {
		d, err := Describe(testutil.Context(t), n.JS, c.sub, testLanes)
		if err != nil {
			t.Fatal(err)
		}
		if d.Parked == nil || *d.Parked != c.parked || d.Scheduled == nil || *d.Scheduled != c.scheduled {
			t.Errorf("%s: parked %v, scheduled %v; want %d, %d", c.sub.ID, d.Parked, d.Scheduled, c.parked, c.scheduled)
		}
		// Scheduled deliveries are not a backlog: they may not be sent yet.
		if d.Hint != "" {
			t.Errorf("%s: hint %q", c.sub.ID, d.Hint)
		}
	}

	// Nothing in RETRIES: no count asked, and zeros all the same.
	clean := testutil.StartRelayNATS(t)
	d, err := Describe(testutil.Context(t), clean.JS, alpha, testLanes)
	if err != nil {
		t.Fatal(err)
	}
	if d.Scheduled == nil || *d.Scheduled != 0 {
		t.Errorf("alpha on an empty server: scheduled %v, want 0", d.Scheduled)
	}
	report, err = Collect(testutil.Context(t), clean.JS, []subscribers.Subscriber{alpha}, testLanes)
	if err != nil {
		t.Fatal(err)
	}
	if s := report.Summary; s.Parked != 0 || s.Scheduled != 0 {
		t.Errorf("empty server: %d parked, %d scheduled", s.Parked, s.Scheduled)
	}
}

// The deadline counts come from relay_timeliness, summed over the relays:
// per row met, missed and their ratio (none without counts), and over all
// in the summary; in the detail as well.
func TestStatusShowsTheDeadlineCounts(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	alpha, beta, plain := limited("alpha", 10), limited("beta", 10), limited("plain", 10)
	// Two relays' counts of alpha add up.
	record(t, n.JS, map[string]timeliness.Counts{"alpha": {Met: 2, Missed: 1}, "beta": {Met: 2}})
	record(t, n.JS, map[string]timeliness.Counts{"alpha": {Met: 1}})

	report, err := Collect(testutil.Context(t), n.JS, []subscribers.Subscriber{alpha, beta, plain}, testLanes)
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]Subscriber{}
	for _, r := range report.Subscribers {
		rows[r.ID] = r
	}
	for _, c := range []struct {
		id          string
		met, missed uint64
		inTime      float64
	}{{"alpha", 3, 1, 0.75}, {"beta", 2, 0, 1}} {
		r := rows[c.id]
		if r.Met != c.met || r.Missed != c.missed || r.InTime == nil || *r.InTime != c.inTime {
			t.Errorf("%s: met %d missed %d in time %v; want %d, %d, %v", c.id, r.Met, r.Missed, r.InTime, c.met, c.missed, c.inTime)
		}
	}
	p := rows["plain"]
	if p.Met != 0 || p.Missed != 0 || p.InTime != nil {
		t.Errorf("plain: met %d missed %d in time %v; want none", p.Met, p.Missed, p.InTime)
	}
	raw, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), `"met":0,"missed":0`) || strings.Contains(string(raw), "in_time") {
		t.Errorf("plain's JSON %s: want met and missed 0 and no in_time", raw)
	}
	raw, err = json.Marshal(rows["alpha"])
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), `"met":3,"missed":1,"in_time":0.75`) {
		t.Errorf("alpha's JSON %s", raw)
	}
	if s := report.Summary; s.Met != 5 || s.Missed != 1 || !strings.Contains(s.String(), ", in time 83.3% (5 met, 1 missed), ") {
		t.Errorf("summary %+v: %q", s, s.String())
	}

	d, err := Describe(testutil.Context(t), n.JS, alpha, testLanes)
	if err != nil {
		t.Fatal(err)
	}
	if d.Met != 3 || d.Missed != 1 || d.InTime == nil || *d.InTime != 0.75 {
		t.Errorf("detail of alpha: met %d missed %d in time %v", d.Met, d.Missed, d.InTime)
	}
}

// A cluster whose relays predate relay_timeliness has no such bucket: the
// report does not fail, it shows no deadline counts.
func TestStatusWithoutTheTimelinessBucket(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	ctx := testutil.Context(t)
	if err := n.JS.DeleteKeyValue(ctx, streams.TimelinessBucket); err != nil {
		t.Fatal(err)
	}
	alpha := limited("alpha", 10)
	report, err := Collect(ctx, n.JS, []subscribers.Subscriber{alpha}, testLanes)
	if err != nil {
		t.Fatalf("Collect without the bucket: %v", err)
	}
	if r := report.Subscribers[0]; r.InTime != nil || r.Met != 0 {
		t.Errorf("row %+v: want no deadline counts", r)
	}
	if got := report.Summary.String(); !strings.Contains(got, ", in time -, ") {
		t.Errorf("summary line %q lacks in time -", got)
	}
	if _, err := Describe(ctx, n.JS, alpha, testLanes); err != nil {
		t.Fatalf("Describe without the bucket: %v", err)
	}
}

// The counts of more subscribers than one direct get returns come in a few
// batches, every one of them read; a value written around relay is left
// out rather than fail the report.
func TestStatusReadsTheDeadlineCountsInBatches(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	ctx := testutil.Context(t)
	const many = kvBatch + kvBatch/2
	subs := make([]subscribers.Subscriber, many)
	for i := range subs {
		subs[i] = limited(fmt.Sprintf("s%04d", i), 0)
		raw, err := json.Marshal(timeliness.Counts{Met: uint64(i), Missed: 1})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := n.JS.PublishAsync("$KV."+streams.TimelinessBucket+"."+subs[i].ID, raw); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-n.JS.PublishAsyncComplete():
	case <-time.After(10 * time.Second):
		t.Fatal("filling the bucket: no PubAcks")
	}
	kv, err := n.JS.KeyValue(ctx, streams.TimelinessBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, subs[7].ID, []byte("not json")); err != nil {
		t.Fatal(err)
	}
	report, err := Collect(ctx, n.JS, subs, testLanes)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range report.Subscribers {
		want := uint64(i)
		if i == 7 {
			if r.Met != 0 || r.Missed != 0 {
				t.Errorf("%s with an unreadable value: met %d missed %d, want none", r.ID, r.Met, r.Missed)
			}
			continue
		}
		if r.Met != want || r.Missed != 1 {
			t.Fatalf("%s: met %d missed %d, want %d, 1", r.ID, r.Met, r.Missed, want)
		}
	}
}
