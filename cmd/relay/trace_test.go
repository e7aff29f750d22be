package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/attempts"
	"github.com/relay-dev/relay/internal/status"
	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

// maxRecordBytes is what one attempt record may weigh in ATTEMPTS: its
// subject, its JSON and the store's own bytes for a message.
const maxRecordBytes = 300

// storeOverhead is what nats-server's file store adds to a message's
// subject, headers and data (its record header and checksum).
const storeOverhead = 30

// TestTraceShowsEveryAttemptOfAnEvent: one event to a subscriber that
// answers 503 twice and then 200, beside one that accepts it at once and one
// that answers 429 with a Retry-After first. relay trace shows the four
// attempts of the first two (and the throttled one's two), each with its
// relay, result and what it led to, and every delivery's state; relay status
// --subscriber shows the failed attempts, the 429 with its Retry-After. An
// event id that is no subject token (dots, spaces) is traced all the same;
// an unknown one exits 1, a missing argument 2. An event to one subscriber
// is traced by its attempts alone. Each attempt record weighs at most
// maxRecordBytes.
func TestTraceShowsEveryAttemptOfAnEvent(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	fast := newReceiver(t)
	flaky := failFirst(t, 2, http.StatusServiceUnavailable, nil)
	throttled := failFirst(t, 1, http.StatusTooManyRequests, http.Header{"Retry-After": {"1"}})
	for id, url := range map[string]string{"fast": fast.URL, "flaky": flaky.URL, "throttled": throttled.URL} {
		mustRelay(t, "sub", "add", id, "--nats", n.URL, "--url", url, "--secret", testSecret, "--events", "order.*",
			"--retry-base", "200ms", "--retry-max", "1s")
	}
	mustRelay(t, "sub", "add", "solo", "--nats", n.URL, "--url", fast.URL, "--secret", testSecret, "--events", "invoice.*")
	startReadyRelay(t, n.URL)
	publish(t, n.JS, "order.paid", "ord-1", []byte(`{"n":1}`))

	traceOf := func(id string, subscribers int) attempts.Trace {
		t.Helper()
		var tr attempts.Trace
		testutil.Eventually(t, func() bool {
			code, out, _ := relayCmd(t, "trace", id, "--nats", n.URL, "--json")
			if code != 0 || json.Unmarshal([]byte(out), &tr) != nil || len(tr.Deliveries) != subscribers {
				return false
			}
			for _, d := range tr.Deliveries {
				if d.State != attempts.StateDelivered {
					return false
				}
			}
			return true
		}, "relay trace %q never showed %d deliveries", id, subscribers)
		return tr
	}
	trace := func(id string) attempts.Trace { return traceOf(id, 3) }
	tr := trace("ord-1")
	require.Equal(t, "order.paid", tr.Type)
	require.NotEmpty(t, tr.By)
	require.False(t, tr.FannedOut.IsZero())
	byID := map[string]attempts.Delivery{}
	for _, d := range tr.Deliveries {
		byID[d.Subscriber] = d
	}
	outcomes := func(d attempts.Delivery) (got []string) {
		for i, r := range d.Attempts {
			require.Equal(t, i+1, r.Attempt, "%s's attempts out of order: %+v", d.Subscriber, d.Attempts)
			require.Equal(t, "ord-1", r.Event)
			require.NotEmpty(t, r.Relay)
			require.False(t, r.At.IsZero())
			if i > 0 {
				require.False(t, r.At.Before(d.Attempts[i-1].At), "%s's attempts out of order", d.Subscriber)
			}
			if r.Outcome == attempts.Retry {
				require.True(t, r.Next.After(r.At), "a retry due before its attempt: %+v", r)
			}
			got = append(got, string(r.Outcome)+" "+attempts.Result(r))
		}
		return got
	}
	require.Equal(t, []string{"delivered 200"}, outcomes(byID["fast"]))
	require.Equal(t, []string{"retry 503", "retry 503", "delivered 200"}, outcomes(byID["flaky"]))
	require.Equal(t, []string{"retry 429 (Retry-After 1s)", "delivered 200"}, outcomes(byID["throttled"]))

	// The text: every attempt a row, with its result and what it led to.
	out := mustRelay(t, "trace", "ord-1", "--nats", n.URL)
	for _, want := range []string{"event       ord-1", "order.paid", "flaky", "503", "retry at", "429 (Retry-After 1s)", "delivered"} {
		require.Contains(t, out, want)
	}
	require.Equal(t, 6, strings.Count(out, "\nflaky ")+strings.Count(out, "\nfast "), "the two state rows and the four attempts of flaky and fast:\n%s", out)

	// An id that is no subject token is traced by its own records (the
	// receivers answer 200 from now on).
	odd := "ord.2 with spaces/and*wildcards>"
	publish(t, n.JS, "order.paid", odd, []byte(`{"n":2}`))
	require.Equal(t, odd, trace(odd).Event)

	// An event to one subscriber, its copy on its lane, has no fan-out
	// record: its attempt says where it went.
	publish(t, n.JS, "invoice.sent", "inv-1", []byte(`{"n":3}`))
	solo := traceOf("inv-1", 1)
	require.Equal(t, "solo", solo.Deliveries[0].Subscriber)
	require.Len(t, solo.Deliveries[0].Attempts, 1)
	require.True(t, solo.FannedOut.IsZero(), "%+v", solo)
	require.Contains(t, mustRelay(t, "trace", "inv-1", "--nats", n.URL), "no fan-out record")

	// relay status --subscriber: the last failed attempts, newest first.
	var d status.Detail
	require.NoError(t, json.Unmarshal([]byte(mustRelay(t, "status", "--subscriber", "flaky", "--nats", n.URL, "--json")), &d))
	require.Len(t, d.LastFailedAttempts, 2, "%+v", d.LastFailedAttempts)
	require.Equal(t, 2, d.LastFailedAttempts[0].Attempt)
	require.Equal(t, http.StatusServiceUnavailable, d.LastFailedAttempts[0].Status)
	text := mustRelay(t, "status", "--subscriber", "throttled", "--nats", n.URL)
	require.Contains(t, text, "last failed attempts")
	require.Contains(t, text, "429 (Retry-After 1s)")

	// Each attempt record's weight in ATTEMPTS.
	s, err := n.JS.Stream(testutil.Context(t), streams.Attempts)
	require.NoError(t, err)
	for seq := uint64(1); ; {
		m, err := s.GetMsg(testutil.Context(t), seq, jetstream.WithGetMsgSubject(streams.EventRecords("ord-1")))
		if err != nil {
			break
		}
		seq = m.Sequence + 1
		if strings.Contains(string(m.Data), `"type":`) {
			continue // the fan-out's
		}
		size := len(m.Subject) + len(m.Data) + storeOverhead
		require.LessOrEqual(t, size, maxRecordBytes, "%s %s", m.Subject, m.Data)
	}

	code, _, stderr := relayCmd(t, "trace", "no-such-event", "--nats", n.URL)
	require.Equal(t, 1, code, stderr)
	require.Contains(t, stderr, `no records of event "no-such-event"`)
	code, _, stderr = relayCmd(t, "trace", "--nats", n.URL)
	require.Equal(t, 2, code, stderr)
}

// TestNoRecordsWithRecordAttemptsOff: relay run --record-attempts=false
// creates no ATTEMPTS and delivers all the same; relay trace says why it
// has nothing to show, and --attempts-max-age with it is a usage error.
func TestNoRecordsWithRecordAttemptsOff(t *testing.T) {
	t.Parallel()
	n := testutil.StartNATS(t)
	rcv := newReceiver(t)
	startReadyRelay(t, n.URL, "--record-attempts=false")
	mustRelay(t, "sub", "add", "a", "--nats", n.URL, "--url", rcv.URL, "--secret", testSecret, "--events", "order.*")
	// The running relay reads the new subscriber within a second.
	testutil.Eventually(t, func() bool {
		publish(t, n.JS, "order.paid", "e-"+time.Now().Format(time.RFC3339Nano), []byte(`{}`))
		return rcv.count() > 0
	}, "no delivery")
	_, err := n.JS.Stream(testutil.Context(t), streams.Attempts)
	require.ErrorIs(t, err, jetstream.ErrStreamNotFound)
	code, _, stderr := relayCmd(t, "trace", "e-1", "--nats", n.URL)
	require.Equal(t, 1, code, stderr)
	require.Contains(t, stderr, "record-attempts=false")

	code, _, stderr = relayCmd(t, "run", "--nats", n.URL, "--record-attempts=false", "--attempts-max-age", "1h")
	require.Equal(t, 2, code, stderr)
}
