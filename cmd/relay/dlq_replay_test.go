package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/relay-dev/relay/internal/deadletter"
	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

// dlqEntries lists the DLQ through relay dlq ls --json with extra filters.
func dlqEntries(t *testing.T, url string, args ...string) []deadletter.Entry {
	t.Helper()
	out := mustRelay(t, append([]string{"dlq", "ls", "--nats", url, "--json", "--limit", "0"}, args...)...)
	var entries []deadletter.Entry
	if err := json.Unmarshal([]byte(out), &entries); err != nil {
		t.Fatalf("dlq ls --json: %v\n%s", err, out)
	}
	return entries
}

// waitDead waits until the DLQ holds n entries.
func waitDead(t *testing.T, url string, n int) []deadletter.Entry {
	t.Helper()
	var got []deadletter.Entry
	testutil.Eventually(t, func() bool {
		got = dlqEntries(t, url)
		return len(got) >= n
	}, "want %d dead letters", n)
	if len(got) != n {
		t.Fatalf("%d dead letters, want %d: %+v", len(got), n, got)
	}
	return got
}

// TestEveryReasonEndToEnd produces each dead-letter reason with the real
// relay and a real receiver, and selects each with relay dlq ls.
func TestEveryReasonEndToEnd(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	statuses := map[string]int{"rej": 400, "gone": 410, "maxa": 500, "late": 500, "exp": 204}
	for id, status := range statuses {
		rcv := newReceiver(t)
		rcv.setStatus(status)
		attempts := "1"
		if id == "late" {
			attempts = "5" // its next retry, not its attempts, runs out
		}
		mustRelay(t, "sub", "add", id, "--nats", n.URL, "--url", rcv.URL, "--secret", testSecret,
			"--events", id+".*", "--max-attempts", attempts, "--retry-base", "1h", "--retry-max", "2h")
	}
	mustRelay(t, "sub", "add", "ref", "--nats", n.URL, "--url", newReceiver(t).URL, "--secret", testSecret, "--events", "ref.*")

	// refused needs the SSRF guard, which the others' loopback receivers
	// need lifted: one relay with it, then one without.
	guarded := startRelay(t, n.URL)
	publish(t, n.JS, "ref.x", "e_ref", []byte(`{}`))
	waitDead(t, n.URL, 1)
	if code := guarded.stop(); code != 0 {
		t.Fatalf("relay exited %d", code)
	}
	startRelay(t, n.URL, "--allow-private-targets")
	publish(t, n.JS, "rej.x", "e_rej", []byte(`{}`))
	publish(t, n.JS, "gone.x", "e_gone", []byte(`{}`))
	publish(t, n.JS, "maxa.x", "e_maxa", []byte(`{}`))
	publish(t, n.JS, "late.x", "e_late", []byte(`{}`), streams.HeaderDeadline, time.Now().Add(time.Minute).UTC().Format(time.RFC3339))
	publish(t, n.JS, "exp.x", "e_exp", []byte(`{}`), streams.HeaderDeadline, "2020-01-01T00:00:00Z")
	ghost := &nats.Msg{Subject: "deliveries." + subscribers.LaneFor("ghost", 4) + ".ghost", Header: nats.Header{streams.HeaderEventID: {"e_ghost"}}, Data: []byte(`{}`)}
	if _, err := n.JS.PublishMsg(testutil.Context(t), ghost); err != nil {
		t.Fatal(err)
	}
	all := waitDead(t, n.URL, 7)

	want := map[string]string{"e_ref": "refused", "e_rej": "rejected", "e_gone": "gone", "e_maxa": "max_attempts",
		"e_late": "deadline", "e_exp": "expired", "e_ghost": "unroutable"}
	for _, e := range all {
		if want[e.EventID] != string(e.Reason) {
			t.Errorf("%s died of %s, want %s", e.EventID, e.Reason, want[e.EventID])
		}
	}
	for id, reason := range want {
		got := dlqEntries(t, n.URL, "--reason", reason)
		if len(got) != 1 || got[0].EventID != id {
			t.Errorf("--reason %s lists %+v, want %s", reason, got, id)
		}
	}
	if got := dlqEntries(t, n.URL, "--subscriber", "gone"); len(got) != 1 || got[0].EventID != "e_gone" {
		t.Errorf("--subscriber gone lists %+v", got)
	}
	if got := dlqEntries(t, n.URL, "--type", "rej.*"); len(got) != 1 || got[0].EventID != "e_rej" {
		t.Errorf("--type rej.* lists %+v", got)
	}
	if got := dlqEntries(t, n.URL, "--since", "1h"); len(got) != 7 {
		t.Errorf("--since 1h lists %d entries, want 7", len(got))
	}
	if got := dlqEntries(t, n.URL, "--until", "1h"); len(got) != 0 {
		t.Errorf("--until 1h (an hour ago) lists %d entries, want none", len(got))
	}
	if got := dlqEntries(t, n.URL, "--until", time.Now().Add(time.Minute).UTC().Format(time.RFC3339)); len(got) != 7 {
		t.Errorf("--until in a minute lists %d entries, want 7", len(got))
	}
}

// TestDLQReplayEndToEnd fails deliveries, fixes the receiver and replays:
// the receiver gets the same webhook-id, the DLQ empties, and what could
// not be replayed stays.
func TestDLQReplayEndToEnd(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	rcv := newReceiver(t)
	rcv.setStatus(http.StatusBadRequest)
	mustRelay(t, "sub", "add", "demo", "--nats", n.URL, "--url", rcv.URL, "--secret", testSecret)
	startRelay(t, n.URL, "--allow-private-targets")
	for i := range 3 {
		publish(t, n.JS, "video.trending", "evt_"+strconv.Itoa(i), []byte(`{"i":`+strconv.Itoa(i)+`}`))
	}
	dead := waitDead(t, n.URL, 3)
	rcv.setStatus(http.StatusNoContent)
	base := []string{"--nats", n.URL, "--lanes", "4"}

	// A dry run lists and changes nothing.
	out := mustRelay(t, append([]string{"dlq", "replay", "--dry-run"}, base...)...)
	if !strings.Contains(out, "would replay 3, skip 0") || !strings.Contains(out, "evt_1") {
		t.Fatalf("dry run:\n%s", out)
	}
	if len(dlqEntries(t, n.URL)) != 3 || rcv.count() != 3 {
		t.Fatal("a dry run changed something")
	}
	// An unknown subscriber: an error, and nothing leaves.
	code, _, stderr := relayCmd(t, append([]string{"dlq", "replay", "--subscriber", "nobody"}, base...)...)
	if code != exitFailure || !strings.Contains(stderr, "nobody") || !strings.Contains(stderr, "nothing was replayed") {
		t.Fatalf("unknown subscriber: exit %d: %s", code, stderr)
	}

	// A sequence that names no entry: said, exit 1.
	code, out, stderr = relayCmd(t, append([]string{"dlq", "replay", "--seq", "999999"}, base...)...)
	if code != exitFailure || !strings.Contains(stderr, "no dead letter with DLQ sequence 999999") {
		t.Fatalf("replay --seq 999999: exit %d: %s%s", code, out, stderr)
	}

	out = mustRelay(t, append([]string{"dlq", "replay", "--seq", strconv.FormatUint(dead[0].DLQSeq, 10)}, base...)...)
	if !strings.Contains(out, "replayed 1, skipped 0, failed 0") {
		t.Fatalf("replay --seq: %s", out)
	}
	// Without --lanes, the lane count comes from the lanes relay run made.
	out = mustRelay(t, "dlq", "replay", "--subscriber", "demo", "--nats", n.URL)
	if !strings.Contains(out, "replayed 2, skipped 0, failed 0") {
		t.Fatalf("replay: %s", out)
	}
	testutil.Eventually(t, func() bool { return rcv.count() == 6 }, "replayed deliveries not received: %d", rcv.count())
	waitIdle(t, n.JS)
	if left := dlqEntries(t, n.URL); len(left) != 0 {
		t.Fatalf("DLQ after replay: %+v", left)
	}
	var first, again []string
	for i, d := range rcv.deliveries() {
		verify(t, d)
		if i < 3 {
			first = append(first, d.header.Get("webhook-id"))
		} else {
			again = append(again, d.header.Get("webhook-id"))
		}
	}
	if !slices.Equal(sortStrings(first), sortStrings(again)) {
		t.Fatalf("webhook-ids of the replay %v, first tries %v", again, first)
	}
	if rcv.count() != 6 {
		t.Fatalf("%d requests, want 6: a replayed entry was delivered twice", rcv.count())
	}
	out = mustRelay(t, append([]string{"dlq", "replay"}, base...)...)
	if !strings.Contains(out, "replayed 0, skipped 0, failed 0") {
		t.Fatalf("a second replay: %s", out)
	}
}

// TestDLQReplayOfADisabledSubscriberNeedsEnable: a 410 disables the
// subscriber, and a replay asks for --enable before anything leaves.
func TestDLQReplayOfADisabledSubscriberNeedsEnable(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	rcv := newReceiver(t)
	rcv.setStatus(http.StatusGone)
	mustRelay(t, "sub", "add", "demo", "--nats", n.URL, "--url", rcv.URL, "--secret", testSecret)
	startRelay(t, n.URL, "--allow-private-targets")
	publish(t, n.JS, "video.trending", "evt_1", []byte(`{}`))
	waitDead(t, n.URL, 1)
	// The relay disables the subscriber once the DLQ copy is stored, a
	// moment after the entry appears.
	testutil.Eventually(t, func() bool {
		return strings.Contains(mustRelay(t, "sub", "get", "demo", "--nats", n.URL), "disabled (410 Gone")
	}, "the 410 did not disable the subscriber")
	rcv.setStatus(http.StatusOK)

	code, _, stderr := relayCmd(t, "dlq", "replay", "--nats", n.URL, "--lanes", "4")
	if code != exitUsage || !strings.Contains(stderr, "--enable") {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if len(dlqEntries(t, n.URL)) != 1 {
		t.Fatal("an entry left the DLQ")
	}
	mustRelay(t, "dlq", "replay", "--nats", n.URL, "--lanes", "4", "--enable")
	testutil.Eventually(t, func() bool { return rcv.count() == 2 }, "not delivered after --enable")
}

// TestDLQReplayObeysTheRate replays a backlog for a rate-limited
// subscriber: in no window do more requests arrive than burst + rate × T
// plus one lease of tokens, plus one for the arrival that closes a window
// (as TestCapHoldsAcrossRelays counts): the receiver sees arrivals, and
// the relay is another process, whose own waits for a CPU this one cannot
// see. Requests sent while this process waited for a CPU (a loaded host)
// are handled together after, so a window's T counts the most the process
// ran late in it too.
func TestDLQReplayObeysTheRate(t *testing.T) {
	t.Parallel()
	stalls := testutil.WatchStalls(t)
	n := testutil.StartRelayNATS(t)
	const entries, rate, burst = 30, 10.0, 2
	rcv := newReceiver(t)
	mustRelay(t, "sub", "add", "demo", "--nats", n.URL, "--url", rcv.URL, "--secret", testSecret,
		"--rate", strconv.Itoa(int(rate)), "--burst", strconv.Itoa(burst))
	startRelay(t, n.URL, "--allow-private-targets")
	waitLanes(t, n, 4)
	ctx := testutil.Context(t)
	for i := 1; i <= entries; i++ {
		h := nats.Header{streams.HeaderEventID: {"evt_" + strconv.Itoa(i)}, streams.HeaderEventType: {"x"}}
		if _, err := deadletter.Publish(ctx, n.JS, []byte(`{}`), h, deadletter.Death{Subscriber: "demo", Reason: deadletter.MaxAttempts, OriginSeq: uint64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	var times []time.Time
	rcv.Config.Handler = timed(rcv.Config.Handler, &times, rcv)
	mustRelay(t, "dlq", "replay", "--nats", n.URL, "--lanes", "4")
	testutil.Eventually(t, func() bool { return rcv.count() == entries }, "replay not delivered: %d", rcv.count())
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	lease := max(1, int(rate*0.1))
	for i := range times {
		for j := i; j < len(times); j++ {
			stalled := stalls.Late(times[i], times[j]).Seconds()
			window := times[j].Sub(times[i]).Seconds()
			if allowed := float64(burst+lease) + rate*(window+stalled) + 1; float64(j-i+1) > allowed {
				t.Fatalf("%d requests in %.2f s (the process ran up to %.3f s late in it); at most %.1f allowed at --rate %g --burst %d",
					j-i+1, window, stalled, allowed, rate, burst)
			}
		}
	}
}

// waitLanes waits until a relay run has created its shared lanes.
func waitLanes(t *testing.T, n *testutil.NATS, lanes int) {
	t.Helper()
	ctx := testutil.Context(t)
	testutil.Eventually(t, func() bool {
		for i := range lanes {
			if _, err := n.JS.Consumer(ctx, streams.Deliveries, "lane_"+fmt.Sprintf("s%02d", i)); err != nil {
				return false
			}
		}
		return true
	}, "relay run created no lanes")
}

// timed wraps a receiver's handler to note when each request arrived.
func timed(h http.Handler, times *[]time.Time, r *webhookSink) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		*times = append(*times, time.Now())
		r.mu.Unlock()
		h.ServeHTTP(w, req)
	})
}

func TestDLQShowAndPurge(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	ctx := testutil.Context(t)
	binary := []byte{0xff, 0x00, 0xfe}
	for i, body := range [][]byte{[]byte(`{"hello":"world"}`), binary} {
		h := nats.Header{streams.HeaderEventID: {"evt_" + strconv.Itoa(i)}, streams.HeaderEventType: {"x"}, "X-Trace": {"t" + strconv.Itoa(i)}}
		if _, err := deadletter.Publish(ctx, n.JS, body, h, deadletter.Death{Subscriber: "demo", Reason: deadletter.Rejected, LastStatus: 422, OriginSeq: uint64(i + 1)}); err != nil {
			t.Fatal(err)
		}
	}
	out := mustRelay(t, "dlq", "show", "1", "--nats", n.URL)
	for _, want := range []string{"evt_0", "rejected", "422", "X-Trace: t0", "Relay-Origin-Seq: 1", `{"hello":"world"}`} {
		if !strings.Contains(out, want) {
			t.Errorf("dlq show lacks %q:\n%s", want, out)
		}
	}
	var shown struct {
		EventID    string              `json:"event_id"`
		Headers    map[string][]string `json:"headers"`
		Body       *string             `json:"body"`
		BodyBase64 *string             `json:"body_base64"`
	}
	if err := json.Unmarshal([]byte(mustRelay(t, "dlq", "show", "2", "--nats", n.URL, "--json")), &shown); err != nil {
		t.Fatal(err)
	}
	if shown.EventID != "evt_1" || shown.Body != nil || shown.BodyBase64 == nil || *shown.BodyBase64 != "/wD+" || shown.Headers["X-Trace"][0] != "t1" {
		t.Errorf("dlq show --json of a binary body: %+v", shown)
	}
	if code, _, stderr := relayCmd(t, "dlq", "show", "9", "--nats", n.URL); code != exitFailure || !strings.Contains(stderr, "9") {
		t.Errorf("show of a missing entry: exit %d: %s", code, stderr)
	}

	code, _, stderr := relayCmd(t, "dlq", "purge", "--nats", n.URL, "--subscriber", "demo")
	if code != exitUsage || !strings.Contains(stderr, "2 dead letters would be purged") || !strings.Contains(stderr, "--yes") {
		t.Fatalf("purge without --yes: exit %d: %s", code, stderr)
	}
	if out := mustRelay(t, "dlq", "purge", "--nats", n.URL, "--seq", "2", "--yes"); !strings.Contains(out, "purged 1") {
		t.Fatalf("purge --seq: %s", out)
	}
	if out := mustRelay(t, "dlq", "purge", "--nats", n.URL, "--reason", "rejected", "--yes"); !strings.Contains(out, "purged 1") {
		t.Fatalf("purge --reason: %s", out)
	}
	if left := dlqEntries(t, n.URL); len(left) != 0 {
		t.Fatalf("left after purge: %+v", left)
	}
}

// TestDLQReplayKilledHalfWayThenRunAgainDeliversEachOnce kills the real
// binary with SIGKILL in the middle of a replay, runs the replay again, and
// checks that the receiver saw every entry's webhook-id exactly once.
func TestDLQReplayKilledHalfWayThenRunAgainDeliversEachOnce(t *testing.T) {
	t.Parallel()
	bin := buildRelay(t)
	n := testutil.StartRelayNATS(t)
	rcv := newReceiver(t)
	mustRelay(t, "sub", "add", "demo", "--nats", n.URL, "--url", rcv.URL, "--secret", testSecret, "--max-in-flight", "64")
	startRelay(t, n.URL, "--allow-private-targets")
	waitLanes(t, n, 4)
	const entries = 4000
	ctx := testutil.Context(t)
	for i := 1; i <= entries; i++ {
		h := nats.Header{streams.HeaderEventID: {"evt_" + strconv.Itoa(i)}, streams.HeaderEventType: {"x"}}
		if _, err := deadletter.Publish(ctx, n.JS, []byte(`{}`), h, deadletter.Death{Subscriber: "demo", Reason: deadletter.MaxAttempts, OriginSeq: uint64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	dlq, err := n.JS.Stream(ctx, streams.DLQ)
	if err != nil {
		t.Fatal(err)
	}
	left := func() uint64 {
		info, err := dlq.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Msgs
	}

	p := testutil.StartProcess(t, exec.Command(bin, "dlq", "replay", "--nats", n.URL, "--lanes", "4"))
	killedAt := uint64(0)
	for killedAt == 0 {
		select {
		case <-p.Exited():
			t.Fatalf("the replay ended before it could be killed (%d left): %v", left(), p.Err())
		case <-time.After(5 * time.Millisecond):
		}
		if l := left(); l <= entries*3/4 {
			p.Kill()
			killedAt = left()
		}
	}
	t.Logf("killed with %d of %d entries left in the DLQ", killedAt, entries)
	if killedAt == 0 || killedAt == entries {
		t.Fatalf("killed with %d left: not half-way", killedAt)
	}
	out := mustRelay(t, "dlq", "replay", "--nats", n.URL, "--lanes", "4")
	t.Logf("run again: %s", strings.TrimSpace(out))
	testutil.Eventually(t, func() bool { return rcv.count() >= entries }, "replayed entries not all delivered: %d", rcv.count())
	waitIdle(t, n.JS)
	seen := map[string]int{}
	for _, d := range rcv.deliveries() {
		seen[d.header.Get("webhook-id")]++
	}
	for id, c := range seen {
		if c != 1 {
			t.Errorf("%s delivered %d times", id, c)
		}
	}
	if len(seen) != entries || left() != 0 {
		t.Fatalf("%d distinct deliveries, want %d; %d left in the DLQ", len(seen), entries, left())
	}
}

// TestReplayAndACopyNeverShareAnID: the copy of an event published with id
// "replay" for subscriber "42" and the replay of DLQ entry 42 are both
// delivered: relay's own ids hold no dot, so neither is taken for a
// duplicate of the other (with replay.<seq>, the replay was dropped as a
// duplicate within DELIVERIES' window and its entry removed: lost).
func TestReplayAndACopyNeverShareAnID(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	rcv := newReceiver(t)
	mustRelay(t, "sub", "add", "42", "--nats", n.URL, "--url", rcv.URL, "--secret", testSecret, "--events", "x")
	startRelay(t, n.URL, "--allow-private-targets")
	waitLanes(t, n, 4)
	ctx := testutil.Context(t)
	for i := 1; i <= 42; i++ {
		h := nats.Header{streams.HeaderEventID: {"dead-" + strconv.Itoa(i)}, streams.HeaderEventType: {"x"}}
		if _, err := deadletter.Publish(ctx, n.JS, []byte(`{}`), h, deadletter.Death{Subscriber: "42", Reason: deadletter.MaxAttempts, OriginSeq: uint64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	publish(t, n.JS, "x", "replay", []byte(`{"copy":true}`))
	testutil.Eventually(t, func() bool { return rcv.count() == 1 }, "the copy of event replay not delivered")
	mustRelay(t, "dlq", "replay", "--nats", n.URL, "--lanes", "4", "--seq", "42")
	testutil.Eventually(t, func() bool { return rcv.count() == 2 }, "the replay of DLQ entry 42 not delivered")
	ids := map[string]bool{}
	for _, d := range rcv.deliveries() {
		ids[d.header.Get("webhook-id")] = true
	}
	if !ids["replay"] || !ids["dead-42"] || len(ids) != 2 {
		t.Fatalf("webhook-ids %v, want replay and dead-42", ids)
	}
}
