package testrequest

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/relay-dev/relay/internal/deliver"
	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

// TestMain fails the package when a test leaves a goroutine behind: a
// responder stops by cancel plus wait, its requests in flight included.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const testSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// The default body is JSON naming the type; a webhook-id is its own
// webhook-id (no dot, as the spec wants) and never repeats.
func TestDefaultBodyAndWebhookID(t *testing.T) {
	t.Parallel()
	var body struct{ Type, Message string }
	require.NoError(t, json.Unmarshal(DefaultBody(""), &body))
	require.Equal(t, DefaultType, body.Type)
	require.NotEmpty(t, body.Message)
	require.NoError(t, json.Unmarshal(DefaultBody(`order."paid"`), &body))
	require.Equal(t, `order."paid"`, body.Type)

	seen := map[string]bool{}
	for range 1000 {
		id := NewWebhookID()
		require.True(t, strings.HasPrefix(id, WebhookIDPrefix), id)
		require.Equal(t, id, deliver.WebhookID(id), "sent as it is")
		require.NotContains(t, id, ".")
		require.False(t, seen[id], "repeated: %s", id)
		seen[id] = true
	}
}

// A request is checked by both sides: the id, the type, the body.
func TestRequestCheck(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		req Request
		ok  bool
	}{
		{Request{Subscriber: "demo"}, true},
		{Request{Subscriber: "demo", Type: "order.paid", Body: []byte(`[1]`)}, true},
		{Request{Subscriber: ""}, false},
		{Request{Subscriber: "a.b"}, false},
		{Request{Subscriber: "demo", Type: "order.*"}, false},
		{Request{Subscriber: "demo", Type: "order.>"}, false},
		{Request{Subscriber: "demo", Type: "a b"}, false},
		{Request{Subscriber: "demo", Type: "a..b"}, false},
		{Request{Subscriber: "demo", Body: []byte(`{not json`)}, false},
	} {
		err := c.req.Check()
		if c.ok {
			require.NoError(t, err, "%+v", c.req)
		} else {
			require.ErrorIs(t, err, ErrInvalid, "%+v", c.req)
		}
	}
}

// sink is a webhook receiver that records what it gets and answers with
// the status, headers and body it is given, after release is closed when
// hold is set.
type sink struct {
	*httptest.Server
	mu      sync.Mutex
	got     []*http.Request
	bodies  [][]byte
	status  int
	body    string
	hold    bool
	release chan struct{}
}

func newSink(t *testing.T, status int, body string) *sink {
	t.Helper()
	s := &sink{status: status, body: body, release: make(chan struct{})}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.got = append(s.got, r)
		s.bodies = append(s.bodies, b)
		hold := s.hold
		s.mu.Unlock()
		if hold {
			select {
			case <-s.release:
			case <-r.Context().Done():
				return
			}
		}
		w.Header().Set("X-Receiver", "sink")
		w.WriteHeader(s.status)
		_, _ = io.WriteString(w, s.body)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *sink) requests() ([]*http.Request, [][]byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*http.Request(nil), s.got...), append([][]byte(nil), s.bodies...)
}

// relaySide is what a relay runs for relay sub test: the bucket and its
// live view, a client, a responder.
type relaySide struct {
	n     *testutil.NATS
	store *subscribers.Store
	stop  func()
}

// startRelaySide starts a responder with a client that allows private
// targets or not, stopped (cancel plus wait) when the test ends.
func startRelaySide(t *testing.T, allowPrivate bool) *relaySide {
	t.Helper()
	n := testutil.StartRelayNATS(t)
	store, err := subscribers.Open(testutil.Context(t), n.JS)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	live, err := store.Watch(ctx)
	require.NoError(t, err)
	client, err := deliver.NewClient(deliver.WithAllowPrivate(allowPrivate))
	require.NoError(t, err)
	r, err := Start(Config{Conn: n.Conn, Subscribers: live, Client: client, Relay: "relay-under-test"})
	require.NoError(t, err)
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			<-done
			<-live.Done()
			client.CloseIdleConnections()
		})
	}
	t.Cleanup(stop)
	return &relaySide{n: n, store: store, stop: stop}
}

func (rs *relaySide) add(t *testing.T, id, url string, change func(*subscribers.Subscriber)) {
	t.Helper()
	sub := subscribers.Subscriber{ID: id, URL: url, Secrets: []string{testSecret}, Headers: map[string]string{"X-Team": "payments"}}
	if change != nil {
		change(&sub)
	}
	sub.SetDefaults()
	require.NoError(t, rs.store.Put(testutil.Context(t), sub))
}

func (rs *relaySide) ask(t *testing.T, r Request) (Answer, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(testutil.Context(t), 30*time.Second)
	defer cancel()
	return Ask(ctx, rs.n.Conn, r)
}

// A test request is a delivery's request: signed with the subscriber's
// secret, its headers on, content-type JSON, the default body; a
// webhook-id of its own. The answer carries the status, the reply's
// headers and its body, and who answered; a body over 1 KiB is cut and
// said to be. A subscriber added just before is found: the relay brings
// its view up to date first.
func TestAskSendsASignedRequest(t *testing.T) {
	t.Parallel()
	rs := startRelaySide(t, true)
	rcv := newSink(t, http.StatusAccepted, strings.Repeat("é", 700))
	rs.add(t, "demo", rcv.URL, nil)

	a, err := rs.ask(t, Request{Subscriber: "demo", Type: "order.paid"})
	require.NoError(t, err)
	require.True(t, a.Accepted(), "%+v", a)
	require.Equal(t, http.StatusAccepted, a.Status)
	require.Equal(t, "relay-under-test", a.Relay)
	require.Equal(t, "demo", a.Subscriber)
	require.Empty(t, a.Error)
	require.Positive(t, a.Duration)
	require.Equal(t, "sink", a.Header.Get("X-Receiver"))
	require.Len(t, a.Body, MaxBodyCut)
	require.True(t, a.BodyCut)

	got, bodies := rcv.requests()
	require.Len(t, got, 1)
	h := got[0].Header
	require.Equal(t, a.WebhookID, h.Get("Webhook-Id"))
	require.True(t, strings.HasPrefix(a.WebhookID, WebhookIDPrefix))
	require.Equal(t, "payments", h.Get("X-Team"))
	require.Equal(t, deliver.DefaultContentType, h.Get("Content-Type"))
	require.Equal(t, DefaultBody("order.paid"), bodies[0])
	key, err := deliver.ParseSecret(testSecret)
	require.NoError(t, err)
	require.NoError(t, deliver.Verify([][]byte{key}, h.Get("Webhook-Id"), h.Get("Webhook-Timestamp"), h.Get("Webhook-Signature"), bodies[0], time.Now(), 0))

	// A body given is sent byte for byte, spaces and all.
	raw := []byte("{ \"id\" : \"evt_test\",\n  \"n\": 1 }")
	_, err = rs.ask(t, Request{Subscriber: "demo", Body: raw})
	require.NoError(t, err)
	_, bodies = rcv.requests()
	require.Equal(t, raw, bodies[1])
}

// A failure is an answer, not an error: a 500 with its status and error;
// a disabled subscriber is sent to all the same; an unknown one is
// ErrNotFound and nothing is sent.
func TestAskReportsFailuresAndUnknownSubscribers(t *testing.T) {
	t.Parallel()
	rs := startRelaySide(t, true)
	rcv := newSink(t, http.StatusInternalServerError, "down for maintenance")
	rs.add(t, "broken", rcv.URL, func(s *subscribers.Subscriber) { s.Disabled, s.DisabledReason = true, "by hand" })

	a, err := rs.ask(t, Request{Subscriber: "broken"})
	require.NoError(t, err)
	require.False(t, a.Accepted())
	require.Equal(t, http.StatusInternalServerError, a.Status)
	require.Equal(t, deliver.Retryable.String(), a.Outcome)
	require.Contains(t, a.Error, "500")
	require.Equal(t, "down for maintenance", string(a.Body))
	require.False(t, a.BodyCut)

	a, err = rs.ask(t, Request{Subscriber: "nobody"})
	require.ErrorIs(t, err, subscribers.ErrNotFound)
	require.True(t, a.NotFound)
	require.Empty(t, a.WebhookID)
	got, _ := rcv.requests()
	require.Len(t, got, 1)

	_, err = rs.ask(t, Request{Subscriber: "broken", Body: []byte("nope")})
	require.ErrorIs(t, err, ErrInvalid)
}

// The relay's SSRF guard applies: a relay that does not allow private
// targets refuses a loopback receiver, and says which flag allows it.
func TestAskRefusedPrivateTargetNamesTheFlag(t *testing.T) {
	t.Parallel()
	rs := startRelaySide(t, false)
	rcv := newSink(t, http.StatusNoContent, "")
	rs.add(t, "local", rcv.URL, nil)

	a, err := rs.ask(t, Request{Subscriber: "local"})
	require.NoError(t, err)
	require.Equal(t, deliver.Refused.String(), a.Outcome)
	require.Zero(t, a.Status)
	require.Contains(t, a.Error, "--allow-private-targets")
	got, _ := rcv.requests()
	require.Empty(t, got)
}

// With no responder the asker learns at once that no relay runs.
func TestAskWithoutARelay(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	start := time.Now()
	_, err := Ask(testutil.Context(t), n.Conn, Request{Subscriber: "demo"})
	require.ErrorIs(t, err, ErrNoRelay)
	require.Less(t, time.Since(start), 5*time.Second)
}

// A relay that stops cancels the request in flight and still answers it;
// Run returns only then.
func TestStopAnswersTheRequestInFlight(t *testing.T) {
	t.Parallel()
	rs := startRelaySide(t, true)
	rcv := newSink(t, http.StatusOK, "")
	rcv.mu.Lock()
	rcv.hold = true
	rcv.mu.Unlock()
	t.Cleanup(func() { close(rcv.release) })
	rs.add(t, "slow", rcv.URL, func(s *subscribers.Subscriber) { s.Timeout = subscribers.Duration(time.Minute) })

	answered := make(chan Answer, 1)
	go func() {
		a, err := rs.ask(t, Request{Subscriber: "slow"})
		if err != nil {
			a.Error = "ask: " + err.Error()
		}
		answered <- a
	}()
	testutil.Eventually(t, func() bool { got, _ := rcv.requests(); return len(got) == 1 }, "the request was not sent")
	rs.stop()
	select {
	case a := <-answered:
		require.Equal(t, deliver.Local.String(), a.Outcome, "%+v", a)
		require.Contains(t, a.Error, "cancelled")
	case <-time.After(10 * time.Second):
		t.Fatal("the request in flight was not answered at the stop")
	}
	_, err := rs.ask(t, Request{Subscriber: "slow"})
	require.True(t, errors.Is(err, ErrNoRelay), "after the stop: %v", err)
}

// A relay makes at most MaxConcurrent test requests at once: one more is
// answered at once that the relay is busy, and sends nothing.
func TestBusyRelayAnswersAtOnce(t *testing.T) {
	t.Parallel()
	rs := startRelaySide(t, true)
	rcv := newSink(t, http.StatusOK, "")
	rcv.mu.Lock()
	rcv.hold = true
	rcv.mu.Unlock()
	rs.add(t, "slow", rcv.URL, func(s *subscribers.Subscriber) { s.Timeout = subscribers.Duration(time.Minute) })

	var wg sync.WaitGroup
	for range MaxConcurrent {
		wg.Go(func() {
			a, err := rs.ask(t, Request{Subscriber: "slow"})
			if err != nil || !a.Accepted() {
				t.Errorf("a held request: %+v, %v", a, err)
			}
		})
	}
	testutil.Eventually(t, func() bool { got, _ := rcv.requests(); return len(got) == MaxConcurrent }, "the requests were not all sent")
	a, err := rs.ask(t, Request{Subscriber: "slow"})
	require.NoError(t, err)
	require.Contains(t, a.Error, "already")
	require.Empty(t, a.Outcome)
	require.Equal(t, "relay-under-test", a.Relay)
	close(rcv.release)
	wg.Wait()
	got, _ := rcv.requests()
	require.Len(t, got, MaxConcurrent)
}

// hostileReplies are reply subjects of relay's own streams, buckets and
// events, which a request may name (nats pub relay.api.sub.test --reply …).
var hostileReplies = []string{"retries.wait.victim.x", "bodies.1", "events.x", "events.relay.x", "$KV.relay_refill.victim",
	"deliveries.s00.victim", "dlq.victim.rejected", "attempts.x", "$JS.API.STREAM.PURGE.EVENTS"}

// A request whose reply subject is one of relay's own is neither made nor
// answered, even by a relay whose connection may publish anywhere (a
// cluster given no service user): nothing lands in a stream or a bucket,
// the receiver gets nothing, and a request asked from an inbox after them
// is answered as always.
func TestReplyOfRelaysOwnIsNeitherMadeNorAnswered(t *testing.T) {
	t.Parallel()
	rs := startRelaySide(t, true)
	rcv := newSink(t, http.StatusOK, "")
	rs.add(t, "victim", rcv.URL, nil)
	data, err := json.Marshal(Request{Subscriber: "victim"})
	require.NoError(t, err)
	for _, reply := range hostileReplies {
		require.NoError(t, rs.n.Conn.PublishRequest(Subject, reply, data))
	}
	require.NoError(t, rs.n.Conn.Publish(Subject, data)) // no reply at all

	// One responder takes requests in order: answered, this one comes
	// after those it dropped.
	a, err := rs.ask(t, Request{Subscriber: "victim"})
	require.NoError(t, err)
	require.True(t, a.Accepted(), "%+v", a)
	got, _ := rcv.requests()
	require.Len(t, got, 1, "only the request asked from an inbox is made")

	ctx := testutil.Context(t)
	for name := range rs.n.JS.StreamNames(ctx).Name() {
		s, err := rs.n.JS.Stream(ctx, name)
		require.NoError(t, err)
		info, err := s.Info(ctx)
		require.NoError(t, err)
		want := uint64(0)
		if name == "KV_"+streams.SubscribersBucket {
			want = 1 // the subscriber
		}
		require.Equal(t, want, info.State.Msgs, "%s holds an answer", name)
	}
}
