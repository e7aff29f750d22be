package attempts

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/metrics"
	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

// running starts a Recorder on a fresh relay server, stopped (and waited
// for) when the test ends.
func running(t *testing.T) (*Recorder, *testutil.NATS) {
	t.Helper()
	n := testutil.StartRelayNATS(t)
	r, err := New(Config{Conn: n.Conn, Relay: "r1"})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); r.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return r, n
}

var t0 = time.Date(2026, 12, 5, 3, 30, 0, 0, time.UTC)

// TestReadSettlesEachSubscribersState: the records of one event, written
// by a Recorder and read back by Read, give each subscriber the state its
// newest record says, every attempt in order, and leave out another
// event's records, a hashed key's included.
func TestReadSettlesEachSubscribersState(t *testing.T) {
	r, n := running(t)
	id := "evt with spaces.and.dots"
	r.Fanout(Fanout{Event: id, Type: "order.paid", At: t0, Copies: []Copy{
		{Subscriber: "ok", Placed: OnLane}, {Subscriber: "flaky", Placed: OnLane},
		{Subscriber: "later", Placed: Scheduled, Until: t0.Add(time.Hour)},
		{Subscriber: "full", Placed: DeadAtFanout, Reason: "backlog", DLQSeq: 7},
		{Subscriber: "waiting", Placed: OnLane}, {Subscriber: "behind", Placed: InOverflow},
	}, Filtered: []string{"picky"}})
	r.Attempt(Record{Event: id, Subscriber: "ok", Attempt: 1, At: t0.Add(time.Millisecond), Status: 204, Outcome: Delivered})
	r.Attempt(Record{Event: id, Subscriber: "flaky", Attempt: 1, At: t0.Add(2 * time.Millisecond), Status: 503, Outcome: Retry, Next: t0.Add(time.Second)})
	// Written out of order, as two relays may: the newest attempt wins.
	r.Attempt(Record{Event: id, Subscriber: "flaky", Attempt: 3, At: t0.Add(3 * time.Second), Status: 200, Outcome: Delivered})
	r.Attempt(Record{Event: id, Subscriber: "flaky", Attempt: 2, At: t0.Add(time.Second), Error: "timeout after 10s", Outcome: Retry, Next: t0.Add(3 * time.Second)})
	r.Attempt(Record{Event: id, Subscriber: "waiting", Attempt: 1, At: t0, Status: 429, RetryAfter: 120, Outcome: Retry, Next: t0.Add(2 * time.Minute)})
	r.Attempt(Record{Event: "other", Subscriber: "ok", Attempt: 1, At: t0, Status: 500, Outcome: Retry})

	var tr Trace
	testutil.Eventually(t, func() bool {
		var err error
		tr, err = Read(testutil.Context(t), n.JS, id)
		return err == nil && len(tr.Deliveries) == 6 && len(tr.Deliveries[1].Attempts) == 3
	}, "the records were not read back: %+v", tr)
	require.Equal(t, "order.paid", tr.Type)
	require.Equal(t, "r1", tr.By)
	require.Equal(t, []string{"picky"}, tr.Filtered)
	got := map[string]Delivery{}
	for _, d := range tr.Deliveries {
		got[d.Subscriber] = d
	}
	require.Equal(t, StateOverflow, got["behind"].State)
	require.Equal(t, StateDelivered, got["flaky"].State)
	var order []int
	for _, a := range got["flaky"].Attempts {
		order = append(order, a.Attempt)
		require.Equal(t, id, a.Event)
		require.Equal(t, "r1", a.Relay)
	}
	require.Equal(t, []int{1, 2, 3}, order)
	require.Equal(t, "timeout after 10s", got["flaky"].Attempts[1].Error)
	require.Equal(t, StateDead, got["full"].State)
	require.Equal(t, uint64(7), got["full"].DLQSeq)
	require.Equal(t, StateScheduled, got["later"].State)
	require.Equal(t, t0.Add(time.Hour), got["later"].Until.UTC())
	require.Equal(t, StateDelivered, got["ok"].State)
	require.Len(t, got["ok"].Attempts, 1, "another event's record was taken for this one's")
	require.Equal(t, StateWaiting, got["waiting"].State)
	require.Equal(t, "retry after 429 (Retry-After 120s)", got["waiting"].Why)

	_, err := Read(testutil.Context(t), n.JS, "never-published")
	require.ErrorIs(t, err, ErrNoRecords)
}

// TestFailuresAreReadBySubscriber: a failure goes on its subscriber's
// subject too, with its event; a success does not.
func TestFailuresAreReadBySubscriber(t *testing.T) {
	r, n := running(t)
	r.Attempt(Record{Event: "e1", Subscriber: "s", Attempt: 1, At: t0, Status: 200, Outcome: Delivered})
	r.Attempt(Record{Event: "e2", Subscriber: "s", Attempt: 1, At: t0, Status: 410, Outcome: Dead, Reason: "gone", DLQSeq: 3})
	s, err := n.JS.Stream(testutil.Context(t), streams.Attempts)
	require.NoError(t, err)
	testutil.Eventually(t, func() bool {
		info, err := s.Info(testutil.Context(t))
		return err == nil && info.State.Msgs == 3
	}, "three records were not stored")
	m, err := s.GetLastMsgForSubject(testutil.Context(t), streams.SubscriberFailures("s"))
	require.NoError(t, err)
	rec, ok := Failure(m.Data)
	require.True(t, ok, "%s", m.Data)
	require.Equal(t, "e2", rec.Event)
	require.Equal(t, Dead, rec.Outcome)
}

// TestBigFanoutIsSplit: the record of a fan-out to 600 subscribers (and 100
// filtered out) is split into records of at most maxCopies, which Read
// puts back together.
func TestBigFanoutIsSplit(t *testing.T) {
	r, n := running(t)
	f := Fanout{Event: "big", Type: "t", At: t0}
	for i := range 600 {
		f.Copies = append(f.Copies, Copy{Subscriber: fmt.Sprintf("s%03d", i), Placed: OnLane})
	}
	for i := range 100 {
		f.Filtered = append(f.Filtered, fmt.Sprintf("f%03d", i))
	}
	r.Fanout(f)
	var tr Trace
	testutil.Eventually(t, func() bool {
		var err error
		tr, err = Read(testutil.Context(t), n.JS, "big")
		return err == nil && len(tr.Deliveries) == 600 && len(tr.Filtered) == 100
	}, "the split fan-out was not read back whole")
	s, err := n.JS.Stream(testutil.Context(t), streams.Attempts)
	require.NoError(t, err)
	info, err := s.Info(testutil.Context(t))
	require.NoError(t, err)
	require.EqualValues(t, 3, info.State.Msgs, "700 entries in records of at most %d", maxCopies)
}

// TestRecordingNeverWaits: with nothing writing the queue (a server that
// does not answer, say), recording goes on at once; what does not fit is
// counted as dropped, never waited for.
func TestRecordingNeverWaits(t *testing.T) {
	n := testutil.StartRelayNATS(t)
	r, err := New(Config{Conn: n.Conn, Relay: "r"})
	require.NoError(t, err)
	for i := range queueSize + 100 {
		r.Attempt(Record{Event: "e", Subscriber: "s", Attempt: i + 1, Outcome: Delivered})
	}
	require.EqualValues(t, 100, r.dropped.Load())
	var nilRecorder *Recorder
	nilRecorder.Attempt(Record{Event: "e"})
	nilRecorder.Fanout(Fanout{Event: "e"})
}

// TestStopWritesWhatIsQueued: records queued before the stop are written
// by it.
func TestStopWritesWhatIsQueued(t *testing.T) {
	n := testutil.StartRelayNATS(t)
	r, err := New(Config{Conn: n.Conn, Relay: "r"})
	require.NoError(t, err)
	for i := range 500 {
		r.Attempt(Record{Event: fmt.Sprintf("e%d", i), Subscriber: "s", Attempt: 1, Outcome: Delivered})
	}
	stored(t, stopped(t, r, n), 500, "every queued record")
}

// stopped runs r with its context ended, so that it writes what is queued
// and returns, and returns ATTEMPTS.
func stopped(t *testing.T, r *Recorder, n *testutil.NATS) jetstream.Stream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r.Run(ctx)
	s, err := n.JS.Stream(testutil.Context(t), streams.Attempts)
	require.NoError(t, err)
	return s
}

// stored waits until ATTEMPTS holds want records, and no more: a record
// written without a PubAck is stored a moment after it is sent.
func stored(t *testing.T, s jetstream.Stream, want uint64, what string) {
	t.Helper()
	var got uint64
	testutil.Eventually(t, func() bool {
		info, err := s.Info(testutil.Context(t))
		if err != nil {
			return false
		}
		got = info.State.Msgs
		return got >= want
	}, "%s: %d records stored, want %d", what, got, want)
	require.Equal(t, want, got, what)
}

// TestCutKeepsRunes: an error is cut on rune boundaries, by its middle,
// marked: its start and its end, the useful part of a dial error, are kept.
func TestCutKeepsRunes(t *testing.T) {
	s := strings.Repeat("é", 100)
	c := cut(s, MaxError)
	require.LessOrEqual(t, len(c), MaxError)
	require.True(t, utf8.ValidString(c), c)
	require.Contains(t, c, "…")
	require.Equal(t, "short", cut("short", MaxError))
	dial := `connection failed: Post "http://127.0.0.1:1/": dial tcp 127.0.0.1:1: connect: connection refused`
	c = cut(dial, MaxError)
	require.LessOrEqual(t, len(c), MaxError)
	require.True(t, strings.HasPrefix(c, "connection failed: "), c)
	require.True(t, strings.HasSuffix(c, "connect: connection refused"), c)
}

// TestPlainFanoutIsNotWritten: the fan-out of an event to one subscriber,
// its copy on its lane and nothing filtered, is not written (its attempts
// say the same); one with anything more is.
func TestPlainFanoutIsNotWritten(t *testing.T) {
	n := testutil.StartRelayNATS(t)
	r, err := New(Config{Conn: n.Conn, Relay: "r"})
	require.NoError(t, err)
	r.Fanout(Fanout{Event: "plain", Type: "t", At: t0, Copies: []Copy{{Subscriber: "s", Placed: OnLane}}})
	r.Fanout(Fanout{Event: "two", Type: "t", At: t0, Copies: []Copy{{Subscriber: "s", Placed: OnLane}, {Subscriber: "u", Placed: OnLane}}})
	r.Fanout(Fanout{Event: "behind", Type: "t", At: t0, Copies: []Copy{{Subscriber: "s", Placed: InOverflow}}})
	r.Fanout(Fanout{Event: "picky", Type: "t", At: t0, Copies: []Copy{{Subscriber: "s", Placed: OnLane}}, Filtered: []string{"u"}})
	r.Attempt(Record{Event: "plain", Subscriber: "s", Attempt: 1, At: t0, Status: 204, Outcome: Delivered})
	stored(t, stopped(t, r, n), 4, "three fan-outs and an attempt")
	tr, err := Read(testutil.Context(t), n.JS, "plain")
	require.NoError(t, err)
	require.Len(t, tr.Deliveries, 1)
	require.Equal(t, StateDelivered, tr.Deliveries[0].State)
}

// TestRefusedRecordsAreCounted: while ATTEMPTS refuses records (full, with
// discard new), every record asks for its PubAck and each refused one is
// counted; once it takes them again, they are stored.
func TestRefusedRecordsAreCounted(t *testing.T) {
	n := testutil.StartRelayNATS(t)
	ctx := testutil.Context(t)
	s, err := n.JS.Stream(ctx, streams.Attempts)
	require.NoError(t, err)
	cfg := s.CachedInfo().Config
	full := cfg
	full.Discard, full.MaxMsgs = jetstream.DiscardNew, 1
	_, err = n.JS.UpdateStream(ctx, full)
	require.NoError(t, err)
	_, err = n.JS.Publish(ctx, "attempts.filler", []byte("{}"))
	require.NoError(t, err)

	m := metrics.New()
	r, err := New(Config{Conn: n.Conn, Relay: "r", Metrics: m, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(runCtx) }()
	defer func() { stop(); <-done }()
	const each = 3 * checkEvery
	for i := range each {
		r.Attempt(Record{Event: fmt.Sprintf("refused%d", i), Subscriber: "s", Attempt: 1, Outcome: Delivered})
	}
	testutil.Eventually(t, func() bool { return lost(t, m, "refused") == each },
		"%d records refused, %v counted", each, lost(t, m, "refused"))

	_, err = n.JS.UpdateStream(ctx, cfg)
	require.NoError(t, err)
	for i := range each {
		r.Attempt(Record{Event: fmt.Sprintf("stored%d", i), Subscriber: "s", Attempt: 1, Outcome: Delivered})
	}
	stop()
	<-done
	stored(t, s, 1+each, "the filler and every record written after the refusals")
	require.EqualValues(t, each, lost(t, m, "refused"))
	require.Zero(t, lost(t, m, "dropped"))
}

// lost reads relay_attempt_records_lost_total{why} from m's /metrics.
func lost(t *testing.T, m *metrics.Metrics, why string) float64 {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	prefix := `relay_attempt_records_lost_total{why="` + why + `"} `
	for line := range strings.Lines(rec.Body.String()) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), prefix); ok {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err)
			return f
		}
	}
	return 0
}

// TestRecordsWithoutPubAckAreBounded: while a check is unanswered every
// record asks for its PubAck; once it is stored, at most checkEvery go
// without; once one is refused, none does.
func TestRecordsWithoutPubAckAreBounded(t *testing.T) {
	r := &Recorder{checked: time.Now()}
	ok, refused := make(chan *jetstream.PubAck, 1), make(chan error, 1)
	r.checkOK, r.checkErr = ok, refused
	require.True(t, r.checks(), "a check unanswered")
	ok <- &jetstream.PubAck{}
	without := 0
	for !r.checks() {
		r.sinceCheck++
		without++
	}
	require.Equal(t, checkEvery, without)

	r.checkOK, r.checkErr, r.sinceCheck = ok, refused, 0
	refused <- errors.New("maximum messages exceeded")
	for range 3 * checkEvery {
		require.True(t, r.checks(), "after a refusal")
	}
}
