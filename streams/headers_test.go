package streams_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/streams"
)

// A delivery's attempts so far and its first attempt's time come from the
// headers a retry carries; anything else there counts as none.
func TestAttemptsOf(t *testing.T) {
	t.Parallel()
	first := time.Date(2026, 12, 3, 6, 0, 0, 123, time.UTC)
	tests := []struct {
		name     string
		header   nats.Header
		attempts int
		firstAt  time.Time
	}{
		{name: "fresh", header: nats.Header{}},
		{name: "no header at all"},
		{name: "a retry", header: nats.Header{
			streams.HeaderAttempt:        {"3"},
			streams.HeaderFirstAttemptAt: {first.Format(time.RFC3339Nano)},
		}, attempts: 3, firstAt: first},
		{name: "not a number", header: nats.Header{streams.HeaderAttempt: {"three"}}},
		{name: "negative", header: nats.Header{streams.HeaderAttempt: {"-2"}}},
		{name: "zero", header: nats.Header{streams.HeaderAttempt: {"0"}}},
		{name: "bad time", header: nats.Header{streams.HeaderAttempt: {"1"}, streams.HeaderFirstAttemptAt: {"yesterday"}}, attempts: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			attempts, firstAt := streams.AttemptsOf(tt.header)
			require.Equal(t, tt.attempts, attempts)
			require.True(t, tt.firstAt.Equal(firstAt), "first attempt at %v, want %v", firstAt, tt.firstAt)
		})
	}
}

// A fresh delivery carries neither header, and every delivery is read: it
// is read without an allocation (not an error built for a parse of "").
// Not parallel: testing.AllocsPerRun refuses to run in a parallel test.
func TestAttemptsOfFreshDoesNotAllocate(t *testing.T) {
	fresh := nats.Header{streams.HeaderEventID: {"evt_1"}}
	allocs := testing.AllocsPerRun(100, func() { streams.AttemptsOf(fresh) })
	require.Zero(t, allocs, "a fresh delivery's headers are read without an allocation")
}

// A copy keeps the event's W3C trace headers, whatever their case: every
// writer of a delivery (the fan-out, a park in RETRIES, the retry mover,
// the overflow, a dead letter, a replay) copies with CopyHeader, so the
// trace reaches the request whichever way the delivery went.
func TestCopyHeaderKeepsTheTraceContext(t *testing.T) {
	t.Parallel()
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	h := nats.Header{"traceparent": {parent}, "Tracestate": {"congo=t61rcWkgMzE"}, "Nats-Msg-Id": {"e1"}}
	got := streams.CopyHeader(h, 0)
	require.Equal(t, nats.Header{"traceparent": {parent}, "Tracestate": {"congo=t61rcWkgMzE"}}, got)
}
