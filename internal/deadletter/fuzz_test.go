package deadletter

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/relay-dev/relay/streams"
)

// FuzzEntryFromMsg decodes DLQ messages with arbitrary subjects and header
// lines (a "Name: value" per line, names in any case, each header possibly
// twice). A message is either refused with ErrMalformedEntry and a zero
// Entry, or decoded into one that says what its subject and headers say:
// counts and size not negative, times in UTC, and JSON that `relay dlq ls
// --json` can print. `go test` runs the seeds; `make fuzz` fuzzes it.
func FuzzEntryFromMsg(f *testing.F) {
	full := strings.Join([]string{
		streams.HeaderEventID + ": evt_01",
		streams.HeaderEventType + ": video.trending",
		streams.HeaderAttempts + ": 12",
		streams.HeaderLastStatus + ": 503",
		streams.HeaderLastError + ": HTTP 503",
		streams.HeaderFirstAttemptAt + ": 2026-01-01T00:00:00Z",
		streams.HeaderPublishedAt + ": 2026-01-01T00:00:00.123456789+02:00",
		streams.HeaderDeadline + ": not a time",
		streams.HeaderDeadAt + ": 2026-01-01T02:00:00Z",
	}, "\n")
	f.Add("dlq.demo.max_attempts", full, []byte(`{"id":"evt_01"}`), uint64(42))
	f.Add("dlq.demo.gone", "relay-attempts: 1\nRELAY-LAST-STATUS: 410", []byte{}, uint64(1))
	f.Add("dlq.demo.rejected", "Nats-Msg-Size: 1048576", []byte{}, uint64(7))
	f.Add("dlq.demo.rejected", "Nats-Msg-Size: -1", []byte{}, uint64(7))
	f.Add("dlq.demo.rejected", streams.HeaderAttempts+": -3", []byte("x"), uint64(2))
	f.Add("dlq.demo.rejected", streams.HeaderAttempts+": 99999999999999999999", []byte("x"), uint64(2))
	f.Add("dlq.demo.future_reason", streams.HeaderDeadAt+": 9999-12-31T23:59:59-01:00", []byte("x"), uint64(3))
	f.Add("dlq.demo.expired", streams.HeaderDeadAt+": 0000-01-01T00:00:00+01:00", []byte("x"), uint64(3))
	f.Add("dlq..gone", "", []byte("x"), uint64(4))
	f.Add("dlq.a.b.c", "", []byte("x"), uint64(5))
	f.Add("events.video", "", []byte(nil), uint64(0))
	f.Fuzz(func(t *testing.T, subject, lines string, body []byte, seq uint64) {
		header := nats.Header{}
		for line := range strings.SplitSeq(lines, "\n") {
			name, value, _ := strings.Cut(line, ":")
			header[name] = append(header[name], strings.TrimSpace(value))
		}
		e, err := EntryFromMsg(subject, header, body, seq)
		if err != nil {
			if !errors.Is(err, ErrMalformedEntry) {
				t.Fatalf("error %v does not wrap ErrMalformedEntry", err)
			}
			if e != (Entry{}) {
				t.Fatalf("an error with a non-zero entry %+v", e)
			}
			return
		}
		if want := "dlq." + e.Subscriber + "." + string(e.Reason); subject != want || e.Subscriber == "" || e.Reason == "" {
			t.Fatalf("subject %q decoded as subscriber %q, reason %q", subject, e.Subscriber, e.Reason)
		}
		if e.DLQSeq != seq {
			t.Fatalf("DLQSeq %d, want %d", e.DLQSeq, seq)
		}
		if e.Attempts < 0 || e.LastStatus < 0 || e.Size < 0 {
			t.Fatalf("negative count in %+v", e)
		}
		if len(body) > 0 && e.Size != len(body) {
			t.Fatalf("Size %d for a body of %d bytes", e.Size, len(body))
		}
		if e.EventID != streams.HeaderValue(header, streams.HeaderEventID) ||
			e.EventType != streams.HeaderValue(header, streams.HeaderEventType) ||
			e.LastError != streams.HeaderValue(header, streams.HeaderLastError) {
			t.Fatalf("%+v does not carry the headers' id, type and last error", e)
		}
		for name, tm := range map[string]*time.Time{"DeadAt": &e.DeadAt, "FirstAttemptAt": e.FirstAttemptAt, "PublishedAt": e.PublishedAt, "Deadline": e.Deadline} {
			if tm != nil && !tm.IsZero() && tm.Location() != time.UTC {
				t.Fatalf("%s %v is not in UTC", name, tm)
			}
		}
		if _, err := json.Marshal(e); err != nil {
			t.Fatalf("an entry that decodes cannot be printed as JSON: %v", err)
		}
	})
}
