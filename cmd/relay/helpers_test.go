package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/internal/deliver"
	"github.com/relay-dev/relay/internal/fanout"
	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

// testSecret is a valid whsec_ secret (32 bytes).
const testSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// relayCmd runs one relay command to completion.
func relayCmd(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut testutil.Buffer
	code = run(testutil.Context(t), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// mustRelay runs one relay command and fails the test unless it exits 0.
func mustRelay(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errOut := relayCmd(t, args...)
	if code != 0 {
		t.Fatalf("relay %s: exit %d: %s", strings.Join(args, " "), code, errOut)
	}
	return out
}

// runningRelay is a `relay run` in the background of a test.
type runningRelay struct {
	stderr *testutil.Buffer
	cancel context.CancelFunc
	done   chan int
}

// startRelay starts `relay run` against the test server; it is stopped (as
// by SIGTERM) when the test ends, and must then exit 0.
func startRelay(t *testing.T, natsURL string, extra ...string) *runningRelay {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &runningRelay{stderr: &testutil.Buffer{}, cancel: cancel, done: make(chan int, 1)}
	args := append([]string{"run", "--nats", natsURL, "--metrics", "", "--lanes", "4"}, extra...)
	go func() { r.done <- run(ctx, args, io.Discard, r.stderr) }()
	t.Cleanup(func() {
		if code := r.stop(); code != 0 {
			t.Errorf("relay run exited %d: %s", code, r.stderr.String())
			return
		}
		if t.Failed() {
			logWarnings(t, r.stderr.String())
		}
	})
	return r
}

// logWarnings logs the last warnings and errors of a relay's log, for a test
// that failed: what the relay noticed is often what explains it.
func logWarnings(t *testing.T, log string) {
	const most = 40
	var lines []string
	for line := range strings.Lines(log) {
		if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
			lines = append(lines, strings.TrimRight(line, "\n"))
		}
	}
	if len(lines) == 0 {
		t.Log("relay run logged no warning")
		return
	}
	if len(lines) > most {
		t.Logf("relay run logged %d warnings and errors; the last %d:", len(lines), most)
		lines = lines[len(lines)-most:]
	}
	for _, line := range lines {
		t.Log(line)
	}
}

// stop cancels the relay as a signal would and returns its exit code.
func (r *runningRelay) stop() int {
	r.cancel()
	code, ok := <-r.done
	if !ok {
		return 0
	}
	close(r.done)
	return code
}

// delivery is one request a test receiver got.
type delivery struct {
	header http.Header
	body   []byte
	path   string
}

// webhookSink is a loopback webhook endpoint that records what it gets.
type webhookSink struct {
	*httptest.Server
	mu     sync.Mutex
	got    []delivery
	status int
}

func newReceiver(t *testing.T) *webhookSink {
	t.Helper()
	r := &webhookSink{status: http.StatusOK}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.got = append(r.got, delivery{header: req.Header.Clone(), body: body, path: req.URL.Path})
		status := r.status
		r.mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *webhookSink) deliveries() []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]delivery(nil), r.got...)
}

func (r *webhookSink) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got)
}

func (r *webhookSink) setStatus(code int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.status = code
}

// publish publishes an event on EVENTS with a Nats-Msg-Id, as
// `nats pub -J events.<type> BODY -H Nats-Msg-Id:<id>` does.
func publish(t *testing.T, js jetstream.JetStream, eventType, id string, body []byte, hdr ...string) *jetstream.PubAck {
	t.Helper()
	m := &nats.Msg{Subject: fanout.SubjectPrefix + eventType, Data: body, Header: nats.Header{}}
	if id != "" {
		m.Header.Set(jetstream.MsgIDHeader, id)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		m.Header.Set(hdr[i], hdr[i+1])
	}
	ack, err := js.PublishMsg(testutil.Context(t), m)
	if err != nil {
		t.Fatalf("publish %s: %v", eventType, err)
	}
	return ack
}

// publishUntilAcked publishes like publish, and keeps publishing the same
// message until a PubAck comes: when the server restarts (relay's embedded
// server after kill -9), a publish written just before the client saw the
// connection drop is lost with its PubAck, and nats.go does not send a
// request again. A re-send is safe: the Nats-Msg-Id makes it idempotent
// (the PubAck then says Duplicate). Each attempt waits pubAckWait; the test
// fails on an error that a restart does not explain, or if no PubAck comes
// within a minute.
func publishUntilAcked(t *testing.T, js jetstream.JetStream, eventType, id string, body []byte) *jetstream.PubAck {
	t.Helper()
	const pubAckWait = 5 * time.Second
	if id == "" {
		t.Fatal("publishUntilAcked: a re-sent publish is idempotent only with a Nats-Msg-Id")
	}
	ctx, cancel := context.WithTimeout(testutil.Context(t), time.Minute)
	defer cancel()
	for attempt := 1; ; attempt++ {
		m := &nats.Msg{Subject: fanout.SubjectPrefix + eventType, Data: body, Header: nats.Header{}}
		m.Header.Set(jetstream.MsgIDHeader, id)
		attemptCtx, cancelAttempt := context.WithTimeout(ctx, pubAckWait)
		ack, err := js.PublishMsg(attemptCtx, m)
		cancelAttempt()
		switch {
		case err == nil:
			return ack
		case ctx.Err() != nil:
			t.Fatalf("publish %s %s: no PubAck in %d attempts: %v", eventType, id, attempt, err)
		case !serverUnavailable(err):
			t.Fatalf("publish %s %s: %v", eventType, id, err)
		}
		t.Logf("publish %s %s: %v; sending it again", eventType, id, err)
		// Some of these errors come at once: do not spin while the
		// server restarts.
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// errCodeMsgIDInProcess is JetStream's answer to a publish whose
// Nats-Msg-Id a replicated stream is still storing from an earlier publish
// (one whose PubAck was lost in a leader change): asked again, it is
// answered as a duplicate.
const errCodeMsgIDInProcess = 10158

// serverUnavailable reports whether a publish failed as it does while the
// server is down or restarting, or a cluster elects: no PubAck in time, no
// stream listening yet, the client's reconnect buffer full, or an earlier
// copy of the same message still being stored.
func serverUnavailable(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeMsgIDInProcess {
		return true
	}
	return errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, nats.ErrReconnectBufExceeded) ||
		errors.Is(err, nats.ErrConnectionReconnecting) ||
		errors.Is(err, nats.ErrDisconnected)
}

// fannedOut reports whether the fan-out has taken every event published so
// far and settled it: every copy stored (or dead-lettered) and the event
// acked.
func fannedOut(ctx context.Context, js jetstream.JetStream) bool {
	c, err := js.Consumer(ctx, streams.Events, fanout.ConsumerName)
	if err != nil {
		return false
	}
	ci, err := c.Info(ctx)
	return err == nil && ci.NumPending == 0 && ci.NumAckPending == 0
}

// fanoutFloor is how many of EVENTS' messages the fan-out has settled: its
// ack floor, the stream sequence below which every event is acked. With
// nothing else in EVENTS, it counts the events fanned out.
func fanoutFloor(ctx context.Context, js jetstream.JetStream) int {
	c, err := js.Consumer(ctx, streams.Events, fanout.ConsumerName)
	if err != nil {
		return 0
	}
	ci, err := c.Info(ctx)
	if err != nil {
		return 0
	}
	return int(ci.AckFloor.Stream)
}

// waitIdle waits until every event published so far has been fanned out and
// every delivery has left DELIVERIES and RETRIES (delivered, or dropped), so
// that a test can assert that something did not happen without sleeping.
// Idle must be seen on several looks in a row: a copy on its way between two
// streams can leave them all empty for an instant.
func waitIdle(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	ctx := testutil.Context(t)
	idle := func() bool {
		if !fannedOut(ctx, js) {
			return false
		}
		for _, name := range []string{streams.Deliveries, streams.Retries} {
			s, err := js.Stream(ctx, name)
			if err != nil {
				return false
			}
			si, err := s.Info(ctx)
			if err != nil || si.State.Msgs != 0 {
				return false
			}
		}
		return true
	}
	seen := 0
	testutil.Eventually(t, func() bool {
		if !idle() {
			seen = 0
			return false
		}
		seen++
		return seen >= 5
	}, "relay did not go idle")
}

// verify checks a delivery's Standard Webhooks signature with testSecret.
func verify(t *testing.T, d delivery) {
	t.Helper()
	key, err := deliver.ParseSecret(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	err = deliver.Verify([][]byte{key}, d.header.Get("webhook-id"), d.header.Get("webhook-timestamp"),
		d.header.Get("webhook-signature"), d.body, time.Now(), 0)
	if err != nil {
		t.Fatalf("signature: %v", err)
	}
}

func sortStrings(s []string) []string {
	out := append([]string(nil), s...)
	slices.Sort(out)
	return out
}
