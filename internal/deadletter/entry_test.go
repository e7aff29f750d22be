package deadletter

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/streams"
)

func TestEntryFromMsg(t *testing.T) {
	t.Parallel()
	full := nats.Header{
		streams.HeaderEventID:        {"evt_1"},
		streams.HeaderEventType:      {"video.trending"},
		streams.HeaderReason:         {"max_attempts"},
		streams.HeaderAttempts:       {"12"},
		streams.HeaderLastStatus:     {"503"},
		streams.HeaderLastError:      {"503 Service Unavailable"},
		streams.HeaderFirstAttemptAt: {"2025-03-01T11:00:05+01:00"},
		streams.HeaderDeadAt:         {"2025-03-01T12:01:02.345678901Z"},
		streams.HeaderPublishedAt:    {"2025-03-01T10:00:00Z"},
		streams.HeaderOriginSeq:      {"41"},
	}
	first := time.Date(2025, 3, 1, 10, 0, 5, 0, time.UTC)
	published := time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		name    string
		subject string
		header  nats.Header
		body    []byte
		want    Entry
		bad     string // when set, the error must wrap ErrMalformedEntry and contain it
	}{
		{
			name: "every header", subject: "dlq.demo.max_attempts", header: full, body: []byte("{}"),
			want: Entry{
				Subscriber: "demo", EventID: "evt_1", EventType: "video.trending", Reason: MaxAttempts,
				Attempts: 12, LastStatus: 503, LastError: "503 Service Unavailable", FirstAttemptAt: &first,
				DeadAt: time.Date(2025, 3, 1, 12, 1, 2, 345678901, time.UTC), PublishedAt: &published, DLQSeq: 7, Size: 2,
			},
		},
		{
			name: "no optional headers", subject: "dlq.demo.expired", header: nats.Header{}, body: nil,
			want: Entry{Subscriber: "demo", Reason: Expired, DLQSeq: 7},
		},
		{
			name: "nil header", subject: "dlq.demo.gone", body: []byte("abc"),
			want: Entry{Subscriber: "demo", Reason: Gone, DLQSeq: 7, Size: 3},
		},
		{
			name: "header names in another case", subject: "dlq.demo.gone",
			header: nats.Header{"relay-event-id": {"evt_lower"}, "RELAY-ATTEMPTS": {"2"}},
			want:   Entry{Subscriber: "demo", Reason: Gone, EventID: "evt_lower", Attempts: 2, DLQSeq: 7},
		},
		{
			name: "headers only", subject: "dlq.demo.gone", header: nats.Header{nats.MsgSize: {"65536"}},
			want: Entry{Subscriber: "demo", Reason: Gone, DLQSeq: 7, Size: 65536},
		},
		{
			name: "a reason this relay does not know", subject: "dlq.demo.unknown_future_reason",
			want: Entry{Subscriber: "demo", Reason: "unknown_future_reason", DLQSeq: 7},
		},
		{name: "not a dlq subject", subject: "deliveries.s01.demo", bad: "deliveries.s01.demo"},
		{name: "too few tokens", subject: "dlq.demo", bad: "dlq.demo"},
		{name: "too many tokens", subject: "dlq.demo.gone.x", bad: "dlq.demo.gone.x"},
		{name: "empty token", subject: "dlq..gone", bad: "dlq..gone"},
		{name: "attempts not a number", subject: "dlq.demo.gone", header: nats.Header{streams.HeaderAttempts: {"many"}}, bad: streams.HeaderAttempts},
		{name: "negative status", subject: "dlq.demo.gone", header: nats.Header{streams.HeaderLastStatus: {"-1"}}, bad: streams.HeaderLastStatus},
		{name: "dead-at not a time", subject: "dlq.demo.gone", header: nats.Header{streams.HeaderDeadAt: {"yesterday"}}, bad: streams.HeaderDeadAt},
		{name: "first attempt not a time", subject: "dlq.demo.gone", header: nats.Header{streams.HeaderFirstAttemptAt: {"1700000000"}}, bad: streams.HeaderFirstAttemptAt},
		{name: "size not a number", subject: "dlq.demo.gone", header: nats.Header{nats.MsgSize: {"big"}}, bad: nats.MsgSize},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := EntryFromMsg(tt.subject, tt.header, tt.body, 7)
			if tt.bad != "" {
				require.ErrorIs(t, err, ErrMalformedEntry)
				require.Contains(t, err.Error(), tt.bad)
				require.Contains(t, err.Error(), "sequence 7")
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestEntryJSONUsesTheContractFieldNames(t *testing.T) {
	t.Parallel()
	first := time.Date(2025, 3, 1, 10, 0, 5, 0, time.UTC)
	tests := []struct {
		name    string
		entry   Entry
		null    []string // keys whose value must be null
		omitted []string // keys that must be absent
	}{
		{
			name:    "never attempted",
			entry:   Entry{Subscriber: "demo", Reason: Expired, DeadAt: first, DLQSeq: 1},
			null:    []string{"first_attempt_at"},
			omitted: []string{"published_at"},
		},
		{
			name:  "attempted",
			entry: Entry{Subscriber: "demo", Reason: Gone, FirstAttemptAt: &first, PublishedAt: &first, DeadAt: first, DLQSeq: 2},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			raw, err := json.Marshal(tt.entry)
			require.NoError(t, err)
			var m map[string]any
			require.NoError(t, json.Unmarshal(raw, &m))
			for _, k := range []string{"subscriber", "event_id", "event_type", "reason", "attempts", "last_status",
				"last_error", "first_attempt_at", "dead_at", "dlq_seq", "size"} {
				require.Contains(t, m, k)
			}
			for _, k := range tt.null {
				require.Nil(t, m[k], "%s must be null", k)
			}
			for _, k := range tt.omitted {
				require.NotContains(t, m, k)
			}
			require.Equal(t, "2025-03-01T10:00:05Z", m["dead_at"])
		})
	}
}
