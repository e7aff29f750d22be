package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/relay-dev/relay/internal/deadletter"
	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

func TestDLQLsOnAnEmptyDLQ(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	if out := mustRelay(t, "dlq", "ls", "--nats", n.URL, "--json"); strings.TrimSpace(out) != "[]" {
		t.Fatalf("empty dlq ls --json = %q, want []", out)
	}
	if out := mustRelay(t, "dlq", "ls", "--nats", n.URL); strings.TrimSpace(out) != "no dead letters" {
		t.Fatalf("empty dlq ls = %q, want no dead letters", out)
	}
}

// deadLetter stores one DLQ entry as a lane would.
func deadLetter(t *testing.T, n *testutil.NATS, eventID, eventType string, d deadletter.Death) {
	t.Helper()
	hdr := nats.Header{
		streams.HeaderEventID:   {eventID},
		streams.HeaderEventType: {eventType},
		"Content-Type":          {"application/json"},
	}
	if _, err := deadletter.Publish(testutil.Context(t), n.JS, []byte(`{"id":"`+eventID+`"}`), hdr, d); err != nil {
		t.Fatal(err)
	}
}

func TestDLQLsListsEntries(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	first := time.Date(2025, 3, 1, 10, 0, 5, 0, time.UTC)
	deadLetter(t, n, "evt_gone", "video.trending", deadletter.Death{
		Subscriber: "alpha", Reason: deadletter.Gone, Attempts: 1, LastStatus: 410,
		LastError: "410 Gone: " + strings.Repeat("the endpoint was removed ", 10), FirstAttemptAt: first,
		DeadAt: first, OriginSeq: 1,
	})
	deadLetter(t, n, "evt_late", "order.shipped", deadletter.Death{
		Subscriber: "beta", Reason: deadletter.Expired, DeadAt: first.Add(time.Hour), OriginSeq: 2,
	})

	narrow := mustRelay(t, "dlq", "ls", "--nats", n.URL)
	if !strings.Contains(narrow, "…") || !strings.Contains(narrow, "the endpoint was removed\n") {
		t.Errorf("LAST_ERROR is not cut to its end in the table:\n%s", narrow)
	}
	table := mustRelay(t, "dlq", "ls", "--nats", n.URL, "--wide")
	lines := strings.Split(strings.TrimSpace(table), "\n")
	if len(lines) != 3 {
		t.Fatalf("table has %d lines, want a header and two rows:\n%s", len(lines), table)
	}
	for _, col := range []string{"DLQ_SEQ", "SUBSCRIBER", "EVENT_ID", "TYPE", "REASON", "ATTEMPTS", "LAST_STATUS", "DEAD_AT", "LAST_ERROR"} {
		if !strings.Contains(lines[0], col) {
			t.Errorf("header %q lacks %s", lines[0], col)
		}
	}
	for _, want := range []string{"alpha", "evt_gone", "video.trending", "gone", "410", "2025-03-01T10:00:05Z", "410 Gone: the endpoint"} {
		if !strings.Contains(lines[1], want) {
			t.Errorf("first row %q lacks %q", lines[1], want)
		}
	}
	if !strings.Contains(lines[1], strings.Repeat("the endpoint was removed ", 3)) {
		t.Errorf("LAST_ERROR is cut in the --wide table: %q", lines[1])
	}
	for _, want := range []string{"beta", "evt_late", "order.shipped", "expired", "2025-03-01T11:00:05Z"} {
		if !strings.Contains(lines[2], want) {
			t.Errorf("second row %q lacks %q", lines[2], want)
		}
	}

	var got []map[string]any
	out := mustRelay(t, "dlq", "ls", "--nats", n.URL, "--json")
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("dlq ls --json is not a JSON array: %v\n%s", err, out)
	}
	if len(got) != 2 {
		t.Fatalf("dlq ls --json has %d entries, want 2", len(got))
	}
	for _, e := range got {
		for _, k := range []string{"subscriber", "event_id", "event_type", "reason", "attempts", "last_status",
			"last_error", "first_attempt_at", "dead_at", "dlq_seq"} {
			if _, ok := e[k]; !ok {
				t.Errorf("entry %v lacks %q", e, k)
			}
		}
	}
	if got[0]["event_id"] != "evt_gone" || got[0]["reason"] != "gone" || got[0]["last_status"] != 410.0 ||
		got[0]["first_attempt_at"] != "2025-03-01T10:00:05Z" || got[0]["dead_at"] != "2025-03-01T10:00:05Z" {
		t.Errorf("first entry = %v", got[0])
	}
	if got[1]["event_id"] != "evt_late" || got[1]["first_attempt_at"] != nil || got[1]["attempts"] != 0.0 {
		t.Errorf("second entry = %v", got[1])
	}

	tests := []struct {
		name string
		args []string
		want []string // event ids, in order
	}{
		{"by subscriber", []string{"--subscriber", "beta"}, []string{"evt_late"}},
		{"by reason", []string{"--reason", "gone"}, []string{"evt_gone"}},
		{"by both", []string{"--subscriber", "alpha", "--reason", "gone"}, []string{"evt_gone"}},
		{"no match", []string{"--subscriber", "alpha", "--reason", "expired"}, []string{}},
		{"unknown subscriber", []string{"--subscriber", "gamma"}, []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out := mustRelay(t, append([]string{"dlq", "ls", "--nats", n.URL, "--json"}, tt.args...)...)
			var entries []deadletter.Entry
			if err := json.Unmarshal([]byte(out), &entries); err != nil {
				t.Fatal(err)
			}
			ids := []string{}
			for _, e := range entries {
				ids = append(ids, e.EventID)
			}
			if strings.Join(ids, ",") != strings.Join(tt.want, ",") {
				t.Fatalf("event ids %v, want %v", ids, tt.want)
			}
		})
	}

	t.Run("limit", func(t *testing.T) {
		t.Parallel()
		code, out, stderr := relayCmd(t, "dlq", "ls", "--nats", n.URL, "--json", "--limit", "1")
		if code != exitOK {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		var entries []deadletter.Entry
		if err := json.Unmarshal([]byte(out), &entries); err != nil {
			t.Fatal(err)
		}
		if len(entries) != 1 || entries[0].EventID != "evt_gone" {
			t.Fatalf("--limit 1 listed %+v, want the oldest entry only", entries)
		}
		if !strings.Contains(stderr, "--limit") {
			t.Fatalf("no note on stderr that the list was cut: %q", stderr)
		}
	})
}

func TestDLQLsInvalidFlagsExit2BeforeConnecting(t *testing.T) {
	t.Parallel()
	// Nothing listens there: a command that connected would exit 1.
	const nowhere = "nats://127.0.0.1:1"
	tests := []struct {
		name string
		args []string
		want []string // parts of the one-line message
	}{
		{"unknown reason", []string{"--reason", "nope"}, []string{"--reason", "nope", "gone", "max_attempts", "expired"}},
		{"reason in capitals", []string{"--reason", "GONE"}, []string{"--reason"}},
		{"empty reason", []string{"--reason", ""}, []string{"--reason"}},
		{"subscriber with a space", []string{"--subscriber", "a b"}, []string{"--subscriber"}},
		{"subscriber wildcard", []string{"--subscriber", "*"}, []string{"--subscriber"}},
		{"empty subscriber", []string{"--subscriber", ""}, []string{"--subscriber"}},
		{"negative limit", []string{"--limit", "-1"}, []string{"--limit"}},
		{"bad type", []string{"--type", "video..x"}, []string{"--type"}},
		{"bad since", []string{"--since", "yesterday"}, []string{"--since", "RFC 3339"}},
		{"until before since", []string{"--since", "2026-12-01T10:00:00Z", "--until", "2026-12-01T09:00:00Z"}, []string{"--until"}},
		{"limit not a number", []string{"--limit", "many"}, []string{"limit"}},
		{"an argument", []string{"extra"}, []string{"expects"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, _, stderr := relayCmd(t, append([]string{"dlq", "ls", "--nats", nowhere}, tt.args...)...)
			if code != exitUsage {
				t.Fatalf("exit %d, want %d; stderr: %s", code, exitUsage, stderr)
			}
			if lines := strings.Count(strings.TrimSpace(stderr), "\n"); lines != 0 {
				t.Fatalf("stderr has %d lines, want one: %q", lines+1, stderr)
			}
			for _, w := range tt.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr %q does not mention %q", stderr, w)
				}
			}
		})
	}
}

func TestDLQLsUnreachableNATSExits1(t *testing.T) {
	t.Parallel()
	code, _, stderr := relayCmd(t, "dlq", "ls", "--nats", "nats://127.0.0.1:1")
	if code != exitFailure || !strings.Contains(stderr, "cannot connect") {
		t.Fatalf("exit %d: %s", code, stderr)
	}
}

func TestDLQLsTableCell(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in    string
		width int
		want  string
	}{
		{"", 0, "-"},
		{"plain", 0, "plain"},
		{"tab\there", 0, "tab here"},
		{"line\nbreak", 0, "line break"},
		{"exactly", 7, "exactly"},
		{"too long", 4, "too…"},
		{"日本語です", 3, "日本…"},
	}
	for _, tt := range tests {
		if got := cell(tt.in, tt.width); got != tt.want {
			t.Errorf("cell(%q, %d) = %q, want %q", tt.in, tt.width, got, tt.want)
		}
	}
}
