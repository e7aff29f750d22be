package status

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/relay-dev/relay/internal/deadletter"
	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/internal/testutil"
)

// die dead-letters one delivery for id as a lane does, with an error text
// that names it.
func die(t *testing.T, n *testutil.NATS, id string, reason deadletter.Reason, status int, seq uint64) {
	t.Helper()
	h := nats.Header{}
	h.Set("Relay-Event-Id", fmt.Sprintf("evt-%d", seq))
	_, err := deadletter.Publish(testutil.Context(t), n.JS, []byte("{}"), h, deadletter.Death{
		Subscriber: id,
		Reason:     reason,
		Attempts:   3,
		LastStatus: status,
		LastError:  fmt.Sprintf("error %d", seq),
		OriginSeq:  seq,
	})
	if err != nil {
		t.Fatalf("dead-letter %d for %s: %v", seq, id, err)
	}
}

// The detail's last errors are the subscriber's newest dead letters, newest
// first, found among everyone else's, wherever they are in the DLQ: right at
// its end, or far back behind a crowd of other subscribers' letters.
func TestDescribeShowsTheNewestDeadLetters(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	seq := uint64(0)
	next := func() uint64 { seq++; return seq }
	// alpha: two early letters, 300 of others, then three more of alpha's
	// interleaved with others'.
	die(t, n, "alpha", deadletter.Rejected, 400, next()) // 1
	die(t, n, "alpha", deadletter.MaxAttempts, 503, next())
	for range 300 {
		die(t, n, "other", deadletter.MaxAttempts, 500, next())
	}
	die(t, n, "alpha", deadletter.MaxAttempts, 502, next()) // 303
	die(t, n, "other", deadletter.Gone, 410, next())
	die(t, n, "alpha", deadletter.Rejected, 404, next()) // 305
	die(t, n, "other", deadletter.Gone, 410, next())
	die(t, n, "alpha", deadletter.Rejected, 422, next()) // 307
	// lonely: a single letter far back.
	die(t, n, "lonely", deadletter.Gone, 410, 1000)
	for range 100 {
		die(t, n, "other", deadletter.MaxAttempts, 500, next())
	}

	d, err := Describe(testutil.Context(t), n.JS, limited("alpha", 1), testLanes)
	if err != nil {
		t.Fatal(err)
	}
	if d.Dead != 5 || d.DeadByReason["rejected"] != 3 || d.DeadByReason["max_attempts"] != 2 {
		t.Errorf("dead %d by reason %v, want 5: rejected 3, max_attempts 2", d.Dead, d.DeadByReason)
	}
	want := []struct {
		status int
		err    string
	}{{422, "error 307"}, {404, "error 305"}, {502, "error 303"}, {503, "error 2"}, {400, "error 1"}}
	if len(d.LastErrors) != len(want) {
		t.Fatalf("%d last errors, want %d: %+v", len(d.LastErrors), len(want), d.LastErrors)
	}
	for i, w := range want {
		e := d.LastErrors[i]
		if e.Subscriber != "alpha" || e.LastStatus != w.status || e.LastError != w.err || e.DeadAt.IsZero() {
			t.Errorf("last error %d: %s %d %q at %v, want alpha %d %q", i, e.Subscriber, e.LastStatus, e.LastError, e.DeadAt, w.status, w.err)
		}
	}

	lonely, err := Describe(testutil.Context(t), n.JS, limited("lonely", 1), testLanes)
	if err != nil {
		t.Fatal(err)
	}
	if len(lonely.LastErrors) != 1 || lonely.LastErrors[0].LastError != "error 1000" {
		t.Errorf("lonely: last errors %+v, want its one letter", lonely.LastErrors)
	}

	none, err := Describe(testutil.Context(t), n.JS, limited("clean", 1), testLanes)
	if err != nil {
		t.Fatal(err)
	}
	if none.LastErrors == nil || len(none.LastErrors) != 0 || none.Dead != 0 {
		t.Errorf("clean: last errors %#v dead %d, want an empty list", none.LastErrors, none.Dead)
	}
}

// Describe counts a subscriber's own messages alone, as Collect counts them.
func TestDescribeCountsTheSubscribersMessages(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	alpha, beta := limited("alpha", 10), limited("beta", 10)
	queue(t, n.JS, alpha, 3)
	pub(t, n.JS, "deliveries.overflow.alpha", 2)
	queue(t, n.JS, beta, 7)
	park(t, n.JS, "alpha", 4)
	park(t, n.JS, "beta", 9)
	pub(t, n.JS, "retries.due.alpha", 1)

	d, err := Describe(testutil.Context(t), n.JS, alpha, testLanes)
	if err != nil {
		t.Fatal(err)
	}
	if d.Pending != 5 || d.Queued != 3 || d.Overflow != 2 || d.Parked == nil || *d.Parked != 5 || d.OldestPendingAge == "" {
		t.Errorf("alpha: pending %d (queued %d, overflow %d) parked %v oldest %q, want 5 (3, 2), 5, set",
			d.Pending, d.Queued, d.Overflow, d.Parked, d.OldestPendingAge)
	}
	row := collect(t, n.JS, alpha, beta)["alpha"]
	if row.Pending != d.Pending || row.Queued != d.Queued || row.Overflow != d.Overflow {
		t.Errorf("Collect says %d/%d/%d, Describe %d/%d/%d", row.Pending, row.Queued, row.Overflow, d.Pending, d.Queued, d.Overflow)
	}
	// Nothing parked: one request fewer, and a count of 0 all the same.
	clean := testutil.StartRelayNATS(t)
	d, err = Describe(testutil.Context(t), clean.JS, alpha, testLanes)
	if err != nil {
		t.Fatal(err)
	}
	if d.Parked == nil || *d.Parked != 0 {
		t.Errorf("alpha on an empty server: parked %v, want 0", d.Parked)
	}
}

// However many deliveries are parked or scheduled, no answer the report
// gets from the server names one of them: they are counted by the server,
// never listed, in all for the summary and by subscriber in its detail. A
// second connection sees every reply the report's connection gets.
func TestStatusNeverListsParkedDeliveries(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	const parked, scheduled = 500, 300
	park(t, n.JS, "busy", parked)
	park(t, n.JS, "quiet", 1)
	schedule(t, n.JS, "busy", scheduled)

	spy := testutil.Connect(t, n.URL)
	sub, err := spy.SubscribeSync("_INBOX.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	ctx := testutil.Context(t)
	report, err := Collect(ctx, n.JS, []subscribers.Subscriber{limited("busy", 1), limited("quiet", 1), limited("idle", 1)}, testLanes)
	if err != nil {
		t.Fatal(err)
	}
	if report.Summary.Parked != parked+1 || report.Summary.Scheduled != scheduled {
		t.Errorf("summary: %d parked, %d scheduled; want %d, %d", report.Summary.Parked, report.Summary.Scheduled, parked+1, scheduled)
	}
	for name, want := range map[string][2]uint64{"busy": {parked, scheduled}, "quiet": {1, 0}, "idle": {0, 0}} {
		d, err := Describe(ctx, n.JS, limited(name, 1), testLanes)
		if err != nil {
			t.Fatal(err)
		}
		if d.Parked == nil || *d.Parked != want[0] || d.Scheduled == nil || *d.Scheduled != want[1] {
			t.Errorf("%s: parked %v, scheduled %v; want %d, %d", name, d.Parked, d.Scheduled, want[0], want[1])
		}
	}

	// The server sent the spy its copy of each reply as it sent the
	// report's: after a round trip of the spy's, they have all arrived.
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	count, _, err := sub.Pending()
	if err != nil {
		t.Fatal(err)
	}
	counted, countedScheduled := false, false
	for range count {
		m, err := sub.NextMsg(time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(m.Data, []byte("retries.wait.busy.")) || bytes.Contains(m.Data, []byte("retries.at.busy.")) {
			t.Fatalf("a reply names a parked or scheduled delivery's subject (%d bytes): %.300s", len(m.Data), m.Data)
		}
		counted = counted || bytes.Contains(m.Data, fmt.Appendf(nil, `"total":%d`, parked))
		countedScheduled = countedScheduled || bytes.Contains(m.Data, fmt.Appendf(nil, `"total":%d`, scheduled))
	}
	if !counted || !countedScheduled {
		t.Errorf("the spy saw no reply counting busy's %d parked (%v) or %d scheduled (%v) deliveries among %d replies", parked, counted, scheduled, countedScheduled, count)
	}
}
