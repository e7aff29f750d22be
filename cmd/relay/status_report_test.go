package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
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

// storeDeadLetter stores one dead letter for id as a lane does.
func storeDeadLetter(t *testing.T, n *testutil.NATS, id string, reason deadletter.Reason, lastStatus int, lastError string, originSeq uint64) {
	t.Helper()
	h := nats.Header{}
	h.Set(streams.HeaderEventID, fmt.Sprintf("evt_%d", originSeq))
	_, err := deadletter.Publish(testutil.Context(t), n.JS, []byte(`{}`), h, deadletter.Death{
		Subscriber: id, Reason: reason, Attempts: 12, LastStatus: lastStatus, LastError: lastError, OriginSeq: originSeq,
	})
	if err != nil {
		t.Fatalf("dead letter for %s: %v", id, err)
	}
}

// statusRows runs relay status --json and decodes it, by subscriber.
func statusRows(t *testing.T, args ...string) map[string]status.Subscriber {
	t.Helper()
	out := mustRelay(t, append([]string{"status", "--json"}, args...)...)
	var rows []status.Subscriber
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("status --json is not one JSON array: %v\n%s", err, out)
	}
	byID := make(map[string]status.Subscriber, len(rows))
	for _, r := range rows {
		byID[r.ID] = r
	}
	return byID
}

// status --json tells an operator's pause from a Retry-After pause, shows
// an open circuit and the dead letters by reason, and the summary line
// counts them.
func TestStatusJSONShowsPausesCircuitsAndDeadLettersByReason(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	for _, id := range []string{"held", "throttled", "broken", "fine"} {
		addSub(t, n.URL, id, "--rate", "10")
	}
	mustRelay(t, "sub", "pause", "held", "--nats", n.URL, "--until", "1h")
	future := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	testutil.PutJSON(t, n.JS, streams.RateLimitBucket, "throttled", ratelimit.State{Tokens: 0, At: time.Now().UTC(), Rate: 2.5, DecreasedAt: time.Now().UTC(), PausedUntil: future})
	testutil.PutJSON(t, n.JS, streams.RateLimitBucket, "broken", ratelimit.State{Tokens: 10, At: time.Now().UTC(), Failures: 6, OpenUntil: future, Opens: 2})
	storeDeadLetter(t, n, "broken", deadletter.MaxAttempts, 503, "503 Service Unavailable", 1)
	storeDeadLetter(t, n, "broken", deadletter.MaxAttempts, 0, "dial tcp: connection refused", 2)
	storeDeadLetter(t, n, "broken", deadletter.Rejected, 400, "400 Bad Request", 3)

	rows := statusRows(t, "--nats", n.URL)
	held, throttled, broken, fine := rows["held"], rows["throttled"], rows["broken"], rows["fine"]
	if held.State != status.Paused || held.PauseReason != status.ByOperator || held.ResumesAt.IsZero() {
		t.Errorf("held: state %q by %q resumes at %v, want paused by the operator, with an end", held.State, held.PauseReason, held.ResumesAt)
	}
	if throttled.State != status.Paused || throttled.PauseReason != status.ByRetryAfter || !throttled.PausedUntil.Equal(future) || throttled.EffectiveRate != 2.5 || throttled.Rate != 10 {
		t.Errorf("throttled: state %q by %q until %v, rate %v in force of %v; want paused by retry_after until %v, 2.5 of 10",
			throttled.State, throttled.PauseReason, throttled.PausedUntil, throttled.EffectiveRate, throttled.Rate, future)
	}
	if broken.State != status.Enabled || broken.Circuit != ratelimit.Open || broken.Failures != 6 {
		t.Errorf("broken: state %q circuit %s failures %d, want enabled, open, 6", broken.State, broken.Circuit, broken.Failures)
	}
	if broken.Dead != 3 || broken.DeadByReason["max_attempts"] != 2 || broken.DeadByReason["rejected"] != 1 || len(broken.DeadByReason) != 2 {
		t.Errorf("broken: dead %d by reason %v, want 3: max_attempts 2, rejected 1", broken.Dead, broken.DeadByReason)
	}
	if fine.State != status.Enabled || fine.PauseReason != "" || fine.Circuit != ratelimit.Closed || fine.Dead != 0 || fine.DeadByReason != nil {
		t.Errorf("fine: %+v", fine)
	}
	raw := mustRelay(t, "status", "--nats", n.URL, "--json")
	for _, field := range []string{`"pause_reason": "operator"`, `"pause_reason": "retry_after"`, `"dead_by_reason": {`, `"queued": 0`, `"overflow": 0`} {
		if !strings.Contains(raw, field) {
			t.Errorf("status --json lacks %s:\n%s", field, raw)
		}
	}

	table := mustRelay(t, "status", "--nats", n.URL, "--wide")
	summary := strings.SplitN(table, "\n", 2)[0]
	if want := "4 subscribers (2 enabled, 2 paused, 0 disabled), 1 open circuit, 0 pending, 0 parked, 0 scheduled, 3 dead letters, in time -, oldest queue -"; summary != want {
		t.Errorf("summary %q, want %q", summary, want)
	}
	for _, want := range []string{"paused by Retry-After  ", future.Format(time.RFC3339), "paused until ", "max_attempts=2,rejected=1"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	for line := range strings.Lines(table) {
		if n := strings.Count(line, future.Format(time.RFC3339)); strings.HasPrefix(line, "throttled ") && n != 1 {
			t.Errorf("the end of the Retry-After pause is shown %d times, want once:\n%s", n, line)
		}
	}
}

// --subscriber shows one subscriber with its last dead letters' status and
// error, newest first, as a table and as one JSON object.
func TestStatusSubscriberShowsItsLastErrors(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	addSub(t, n.URL, "demo", "--rate", "5")
	addSub(t, n.URL, "other")
	for i := 1; i <= 7; i++ {
		storeDeadLetter(t, n, "demo", deadletter.MaxAttempts, 500+i, fmt.Sprintf("upstream failure %d", i), uint64(2*i))
		storeDeadLetter(t, n, "other", deadletter.Rejected, 400, "not demo's", uint64(2*i+1))
	}
	publishOn(t, n, "deliveries."+subscribers.LaneFor("demo", 16)+".demo", 2)
	publishOn(t, n, "deliveries.overflow.demo", 3)
	parkFor(t, n, "demo", 4)

	out := mustRelay(t, "status", "--nats", n.URL, "--subscriber", "demo", "--wide")
	for _, want := range []string{"subscriber", "demo", "5: 2 queued on its lane, 3 in its overflow", "parked", "7 (max_attempts 7)", "5/s", "last errors", "upstream failure 7", "upstream failure 3", "507"} {
		if !strings.Contains(out, want) {
			t.Errorf("detail lacks %q:\n%s", want, out)
		}
	}
	for _, unwanted := range []string{"upstream failure 2", "not demo's"} {
		if strings.Contains(out, unwanted) {
			t.Errorf("detail shows %q:\n%s", unwanted, out)
		}
	}
	if !regexp.MustCompile(`(?m)^parked +4$`).MatchString(out) {
		t.Errorf("detail lacks the parked count:\n%s", out)
	}

	var d status.Detail
	raw := mustRelay(t, "status", "--nats", n.URL, "--subscriber", "demo", "--json")
	if err := json.Unmarshal([]byte(raw), &d); err != nil {
		t.Fatalf("status --subscriber --json is not one JSON object: %v\n%s", err, raw)
	}
	if d.ID != "demo" || d.Pending != 5 || d.Queued != 2 || d.Overflow != 3 || d.Parked == nil || *d.Parked != 4 || d.Dead != 7 {
		t.Errorf("detail %+v", d.Subscriber)
	}
	if len(d.LastErrors) != status.LastErrors {
		t.Fatalf("%d last errors, want %d", len(d.LastErrors), status.LastErrors)
	}
	for i, e := range d.LastErrors {
		if want := 7 - i; e.LastStatus != 500+want || e.LastError != fmt.Sprintf("upstream failure %d", want) || e.Subscriber != "demo" {
			t.Errorf("last error %d: %d %q (%s), want %d %q", i, e.LastStatus, e.LastError, e.Subscriber, 500+want, fmt.Sprintf("upstream failure %d", want))
		}
	}
	if !strings.Contains(raw, `"last_errors": [`) || !strings.Contains(raw, `"last_status": 507`) || !strings.Contains(raw, `"subscriber": "demo"`) {
		t.Errorf("JSON field names:\n%s", raw)
	}

	clean := mustRelay(t, "status", "--nats", n.URL, "--subscriber", "other", "--json")
	if !strings.Contains(clean, `"last_errors": [`) {
		t.Errorf("other's detail has no last errors list:\n%s", clean)
	}
	code, _, stderr := relayCmd(t, "status", "--nats", n.URL, "--subscriber", "nobody")
	if code != exitFailure || !strings.Contains(stderr, "no such subscriber: nobody") {
		t.Errorf("status --subscriber nobody: exit %d, stderr %q; want 1 saying it is not found", code, stderr)
	}
}

// Every flag of relay status is checked before relay connects, with a
// message that names it, and exit 2.
func TestStatusRefusesBadFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--interval", "5s"}, "--interval: only with --watch"},
		{[]string{"--watch", "--interval", "0s"}, "--interval: must be at least 100ms"},
		{[]string{"--watch", "--interval", "-1s"}, "--interval: must be at least 100ms"},
		{[]string{"--watch", "--interval", "10ms"}, "--interval: must be at least 100ms, got 10ms"},
		{[]string{"--watch", "--interval", "soon"}, "interval"},
		{[]string{"--watch=maybe"}, "watch"},
		{[]string{"--subscriber", "no spaces"}, "--subscriber"},
		{[]string{"--subscriber", ""}, "--subscriber"},
		{[]string{"--subscriber", "a.b"}, "--subscriber"},
		{[]string{"--lanes", "0"}, "--lanes"},
		{[]string{"--lanes", "257"}, "--lanes"},
		{[]string{"--limit", "-1"}, "--limit: must be 0 (every subscriber) or more, got -1"},
		{[]string{"--page", "0"}, "--page: must be 1 or more, got 0"},
		{[]string{"--limit", "10", "--subscriber", "a"}, "--limit, --page: only for the report of every subscriber"},
		{[]string{"--page", "2", "--streams"}, "--limit, --page: only for the report of every subscriber"},
	} {
		// No server: a bad flag is refused before relay connects.
		args := append([]string{"status", "--nats", "nats://127.0.0.1:1"}, tc.args...)
		code, _, stderr := relayCmd(t, args...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
			t.Errorf("relay %s: exit %d, stderr %q; want 2 and one line with %q", strings.Join(args, " "), code, stderr, tc.want)
		}
	}
}

// --watch prints a report every --interval until it is stopped, which is a
// success; to a pipe it prints reports one after another, without the
// terminal's clear-screen codes, and with --json one JSON value each.
func TestStatusWatchPrintsReportsUntilStopped(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	addSub(t, n.URL, "demo")
	for _, tc := range []struct {
		args   []string
		frames func(string) int
	}{
		{[]string{"--watch", "--interval", "100ms"}, func(out string) int {
			return strings.Count(out, "1 subscriber (1 enabled, 0 paused, 0 disabled)")
		}},
		{[]string{"--watch", "--interval", "100ms", "--json"}, func(out string) int {
			dec := json.NewDecoder(strings.NewReader(out))
			frames := 0
			for {
				var rows []status.Subscriber
				if err := dec.Decode(&rows); err != nil {
					return frames // io.EOF, or a frame still being written
				}
				if len(rows) == 1 && rows[0].ID == "demo" {
					frames++
				}
			}
		}},
		{[]string{"--watch", "--interval", "100ms", "--subscriber", "demo"}, func(out string) int {
			return strings.Count(out, "last errors: none")
		}},
	} {
		ctx, cancel := context.WithCancel(testutil.Context(t))
		var out, errOut testutil.Buffer
		done := make(chan int, 1)
		args := append([]string{"status", "--nats", n.URL}, tc.args...)
		go func() { done <- run(ctx, args, &out, &errOut) }()
		testutil.Eventually(t, func() bool { return tc.frames(out.String()) >= 3 }, "relay %s: fewer than 3 reports: %q", strings.Join(args, " "), out.String())
		cancel()
		if code := <-done; code != exitOK {
			t.Errorf("relay %s stopped: exit %d, stderr %q; want 0", strings.Join(args, " "), code, errOut.String())
		}
		if strings.Contains(out.String(), "\033[") || errOut.String() != "" {
			t.Errorf("relay %s to a pipe: escape codes or errors: stderr %q", strings.Join(args, " "), errOut.String())
		}
	}
}

// A frame of --watch on a terminal starts by clearing it, and ends with how
// to stop; a frame that fails is said on stderr and the watch goes on.
func TestStatusWatchClearsATerminalBetweenFrames(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var out, errOut bytes.Buffer
	frames := 0
	f := statusFlags{interval: minWatchInterval, watch: true}
	err := watchTo(ctx, &out, &errOut, true, f, func(_ context.Context, w io.Writer) error {
		frames++
		if frames == 2 {
			return fmt.Errorf("nats: timeout")
		}
		if frames == 3 {
			cancel()
		}
		_, err := fmt.Fprintf(w, "frame %d\n", frames)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(out.String(), clearScreen); got != 2 {
		t.Errorf("%d clear-screen codes, want one before each of the 2 frames drawn:\n%q", got, out.String())
	}
	if !strings.HasPrefix(out.String(), clearScreen+"frame 1\n") || !strings.Contains(out.String(), "Ctrl-C to stop") {
		t.Errorf("output %q", out.String())
	}
	if errOut.String() != "relay: nats: timeout\n" {
		t.Errorf("stderr %q, want the failed frame's error", errOut.String())
	}
}
