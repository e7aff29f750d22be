package fanout_test

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/fanout"
	"github.com/relay-dev/relay/streams"
)

// TestEventID proves the event id rule of docs/headers.md: the Nats-Msg-Id header,
// else EVENTS-<sequence>; the body is never read. An id with dots or spaces
// inside, or of up to 1 KiB, stays the publisher's (the webhook-id made of it
// is safe: deliver.WebhookID), so that the same event published again has
// the same id; one a NATS header cannot carry as it is falls back.
func TestEventID(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 201)
	longest := strings.Repeat("y", 200)
	msgID := func(v string) nats.Header { return nats.Header{"Nats-Msg-Id": []string{v}} }
	tests := []struct {
		name   string
		header nats.Header
		want   string
	}{
		{"header", msgID("hdr-1"), "hdr-1"},
		{"header of 200 bytes is kept", msgID(longest), longest},
		{"header with a space", msgID("a b"), "a b"},
		{"header with dots", msgID("order.42.created"), "order.42.created"},
		{"header longer than 200 bytes", msgID(long), long},
		{"header of 1 KiB", msgID(strings.Repeat("k", fanout.MaxEventID)), strings.Repeat("k", fanout.MaxEventID)},
		{"header over 1 KiB", msgID(strings.Repeat("k", fanout.MaxEventID+1)), "EVENTS-7"},
		{"header with a tab", msgID("a\tb"), "EVENTS-7"},
		{"header with a line break", msgID("a\rb"), "EVENTS-7"},
		{"header with DEL", msgID("a\x7fb"), "EVENTS-7"},
		{"header with a trailing space", msgID("abc "), "EVENTS-7"},
		{"empty header", msgID(""), "EVENTS-7"},
		{"other headers are not ids", nats.Header{"X-Id": {"nope"}}, "EVENTS-7"},
		{"no header", nil, "EVENTS-7"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, fanout.EventID(tc.header, 7))
		})
	}
}

// TestEventIDSequence proves that the fallback id is EVENTS- followed by the
// event's own stream sequence in decimal.
func TestEventIDSequence(t *testing.T) {
	t.Parallel()
	for _, seq := range []uint64{0, 1, 1000, 1<<64 - 1} {
		require.Equal(t, "EVENTS-"+strconv.FormatUint(seq, 10), fanout.EventID(nil, seq))
	}
}

// TestEventType proves that the event type is the subject after "events.".
func TestEventType(t *testing.T) {
	t.Parallel()
	tests := []struct{ subject, want string }{
		{"events.order.created", "order.created"},
		{"events.x", "x"},
		{"events.a.b.c.d", "a.b.c.d"},
	}
	for _, tc := range tests {
		require.Equal(t, tc.want, fanout.EventType(tc.subject), tc.subject)
	}
}

// TestDeliverySubject proves the contract's subject for a copy,
// deliveries.<lane>.<subscriber>.
func TestDeliverySubject(t *testing.T) {
	t.Parallel()
	require.Equal(t, "deliveries.s03.sub-a", streams.DeliverySubject("s03", "sub-a"))
	require.Equal(t, "deliveries.d_big.big", streams.DeliverySubject("d_big", "big"))
}

// TestCopyHeader proves the header rule of docs/headers.md for copies: every
// Nats-* header of the original is stripped whatever its case, every other
// header is kept with all its values, Relay-Event-Id, Relay-Event-Type and
// Relay-Published-At (RFC 3339, UTC) are set, and the original is left as
// it was.
func TestCopyHeader(t *testing.T) {
	t.Parallel()
	published := time.Date(2025, 3, 4, 5, 6, 7, 890_000_000, time.FixedZone("CET", 3600))
	tests := []struct {
		name     string
		orig     nats.Header
		wantKept nats.Header
	}{
		{
			name:     "nil original",
			orig:     nil,
			wantKept: nats.Header{},
		},
		{
			name: "Nats headers in any case are stripped",
			orig: nats.Header{
				"Nats-Msg-Id":               {"m1"},
				"nats-expected-stream":      {"EVENTS"},
				"NATS-EXPECTED-LAST-SEQ":    {"3"},
				"Nats-Expected-Last-Msg-Id": {"m0"},
				"Nats-Rollup":               {"sub"},
				"Nats-TTL":                  {"1s"},
				"nAtS-anything":             {"x", "y"},
			},
			wantKept: nats.Header{},
		},
		{
			name: "other headers are kept with all values",
			orig: nats.Header{
				"Nats-Msg-Id":            {"m1"},
				"Content-Type":           {"application/cloudevents+json"},
				streams.HeaderDeadline:   {"2030-01-01T00:00:00Z"},
				"X-Trace":                {"a", "b", "c"},
				"x-lower":                {"v"},
				"Natsy":                  {"not a Nats- header"},
				"Nats":                   {"not a Nats- header either"},
				"X-Nats-Msg-Id":          {"prefix is not Nats-"},
				"Authorization-Hint":     {""},
				"Relay-Something-Custom": {"kept"},
			},
			wantKept: nats.Header{
				"Content-Type":           {"application/cloudevents+json"},
				streams.HeaderDeadline:   {"2030-01-01T00:00:00Z"},
				"X-Trace":                {"a", "b", "c"},
				"x-lower":                {"v"},
				"Natsy":                  {"not a Nats- header"},
				"Nats":                   {"not a Nats- header either"},
				"X-Nats-Msg-Id":          {"prefix is not Nats-"},
				"Authorization-Hint":     {""},
				"Relay-Something-Custom": {"kept"},
			},
		},
		{
			name: "identity headers of the original are replaced",
			orig: nats.Header{
				streams.HeaderEventID:     {"spoofed", "twice"},
				streams.HeaderEventType:   {"spoofed"},
				streams.HeaderPublishedAt: {"1999-01-01T00:00:00Z"},
			},
			wantKept: nats.Header{},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			before := cloneHeader(tc.orig)
			got := fanout.CopyHeader(tc.orig, "evt-1", "order.created", published)

			require.Equal(t, before, tc.orig, "the original header must not be modified")
			for k := range got {
				require.False(t, strings.EqualFold(k[:min(len(k), 5)], "nats-"), "Nats header %q kept", k)
			}
			require.Equal(t, []string{"evt-1"}, got[streams.HeaderEventID])
			require.Equal(t, []string{"order.created"}, got[streams.HeaderEventType])
			require.Len(t, got[streams.HeaderPublishedAt], 1)
			at := got.Get(streams.HeaderPublishedAt)
			require.True(t, strings.HasSuffix(at, "Z"), "Relay-Published-At %q is not UTC", at)
			parsed, err := time.Parse(time.RFC3339, at)
			require.NoError(t, err, "Relay-Published-At %q is not RFC 3339", at)
			require.True(t, parsed.Equal(published), "Relay-Published-At %q is not %v", at, published)

			rest := cloneHeader(got)
			delete(rest, streams.HeaderEventID)
			delete(rest, streams.HeaderEventType)
			delete(rest, streams.HeaderPublishedAt)
			require.Equal(t, tc.wantKept, rest)

			// The copy owns its values: changing it leaves the original alone.
			for k := range got {
				if len(got[k]) > 0 {
					got[k][0] = "changed"
				}
			}
			require.Equal(t, before, tc.orig, "the copy shares value slices with the original")
		})
	}
}

// cloneHeader deep-copies a header; nil stays nil.
func cloneHeader(h nats.Header) nats.Header {
	if h == nil {
		return nil
	}
	out := make(nats.Header, len(h))
	for k, v := range h {
		out[k] = slices.Clone(v)
	}
	return out
}

// TestCopyHeaderDropsRelayHeadersOfThePublisher proves that a publisher
// cannot set the headers relay owns: an event published with
// Relay-Attempt: 12 must not reach its lane as if it had failed twelve
// times. Relay-Deadline is the publisher's and is kept.
func TestCopyHeaderDropsRelayHeadersOfThePublisher(t *testing.T) {
	t.Parallel()
	orig := nats.Header{}
	orig.Set("Relay-Attempt", "12")
	orig.Set("relay-first-attempt-at", "2020-01-01T00:00:00Z")
	orig.Set("Relay-Reason", "gone")
	orig.Set("Relay-Overflow-Seq", "7") // would skip its subscriber's queue
	orig.Set("Relay-Deadline", "2030-01-01T00:00:00Z")
	got := fanout.CopyHeader(orig, "e1", "t", time.Now())
	for _, k := range []string{"Relay-Attempt", "relay-first-attempt-at", "Relay-Reason", "Relay-Overflow-Seq"} {
		if _, ok := got[k]; ok {
			t.Errorf("%s kept on the copy", k)
		}
	}
	if got.Get("Relay-Deadline") != "2030-01-01T00:00:00Z" {
		t.Errorf("Relay-Deadline not kept: %v", got)
	}
}
