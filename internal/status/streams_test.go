package status

import (
	"testing"

	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

// TestReportShowsEachStreamsUseAgainstItsLimits: the report gives, with or
// without subscribers, each relay stream's messages and bytes against its
// max_bytes and max_msgs, an operator's limits included, and the share of
// its max_bytes a bounded stream uses.
func TestReportShowsEachStreamsUseAgainstItsLimits(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	ctx := testutil.Context(t)
	s, err := n.JS.Stream(ctx, streams.DLQ)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.MaxMsgs = 1000
	if _, err := n.JS.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	sub := limited("a", 1)
	queue(t, n.JS, sub, 3)
	pub(t, n.JS, "dlq.a.rejected", 2)

	check := func(t *testing.T, got []Stream) {
		t.Helper()
		if len(got) != len(streamNames) {
			t.Fatalf("%d streams, want EVENTS, DELIVERIES, RETRIES, DLQ, BODIES and ATTEMPTS: %+v", len(got), got)
		}
		byName := map[string]Stream{}
		for i, st := range got {
			if st.Name != streamNames[i] {
				t.Fatalf("stream %d is %s, want %s", i, st.Name, streamNames[i])
			}
			byName[st.Name] = st
		}
		want, _ := streams.Config(streams.Deliveries)
		d := byName[streams.Deliveries]
		if d.Messages != 3 || d.Bytes == 0 || d.MaxBytes != want.MaxBytes || d.Discard != "new" || d.Used == nil ||
			*d.Used != float64(d.Bytes)/float64(want.MaxBytes) {
			t.Errorf("DELIVERIES: %+v; want 3 messages, max_bytes %d, discard new and the share used", d, want.MaxBytes)
		}
		q := byName[streams.DLQ]
		if q.Messages != 2 || q.MaxMessages != 1000 || q.MaxBytes != -1 || q.Used != nil || q.MaxAge != "720h0m0s" {
			t.Errorf("DLQ: %+v; want 2 of the operator's 1000 messages, no byte limit, 30 days", q)
		}
		if e := byName[streams.Events]; e.Messages != 0 || e.MaxBytes != -1 || e.MaxMessages != -1 || e.Discard != "new" {
			t.Errorf("EVENTS: %+v; want unbounded, refusing the publisher when an operator bounds it (discard new)", e)
		}
		if a := byName[streams.Attempts]; a.MaxBytes != 1<<30 || a.MaxAge != "72h0m0s" || a.Discard != "old" {
			t.Errorf("ATTEMPTS: %+v; want a ring of 1 GiB, 72 hours, dropping its oldest", a)
		}
	}
	for _, c := range []struct {
		name string
		subs int
	}{{"no subscribers", 0}, {"one subscriber", 1}} {
		t.Run(c.name, func(t *testing.T) {
			report, err := Collect(ctx, n.JS, []subscribers.Subscriber{sub}[:c.subs], testLanes)
			if err != nil {
				t.Fatal(err)
			}
			check(t, report.Streams)
		})
	}
	got, err := Streams(ctx, n.JS)
	if err != nil {
		t.Fatal(err)
	}
	check(t, got)
	if _, err := Streams(ctx, testutil.StartNATS(t).JS); err == nil {
		t.Fatal("Streams on a server without the relay streams did not fail")
	}
}
