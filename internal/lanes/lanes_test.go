package lanes_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/internal/clock"
	"github.com/relay-dev/relay/internal/deliver"
	"github.com/relay-dev/relay/internal/lanes"
	"github.com/relay-dev/relay/internal/metrics"
	"github.com/relay-dev/relay/internal/ratelimit"
	"github.com/relay-dev/relay/internal/retry"
	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// arrivals records when each subscriber's requests arrived and answers
// them as the test says.
type arrivals struct {
	mu      sync.Mutex
	at      map[string][]time.Time
	ids     map[string][]string
	all     int
	respond map[string]func(n int, w http.ResponseWriter)
}

func (a *arrivals) handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := strings.TrimPrefix(r.URL.Path, "/")
		a.mu.Lock()
		a.at[id] = append(a.at[id], time.Now())
		a.ids[id] = append(a.ids[id], r.Header.Get("webhook-id"))
		a.all++
		n := len(a.at[id])
		respond := a.respond[id]
		a.mu.Unlock()
		if respond != nil {
			respond(n, w)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

// answer sets how a subscriber's n-th request (from 1) is answered.
func (a *arrivals) answer(id string, f func(n int, w http.ResponseWriter)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.respond[id] = f
}

func (a *arrivals) webhookIDs(id string) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.ids[id]...)
}

func (a *arrivals) times(id string) []time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]time.Time(nil), a.at[id]...)
}

// starts records when the lanes began each request, by subscriber (the
// URL path), and sends it with a plain http.Client: the moment a rule on
// sending is judged by, where an arrival also counts the host's delays
// between the relay and the receiver. It records when the lanes had each
// request's answer, or gave up on it, as well.
type starts struct {
	mu    sync.Mutex
	at    map[string][]time.Time
	ended map[string][]time.Time
}

func (s *starts) Do(req *http.Request) (*http.Response, error) {
	s.mu.Lock()
	if s.at == nil {
		s.at, s.ended = map[string][]time.Time{}, map[string][]time.Time{}
	}
	id := strings.TrimPrefix(req.URL.Path, "/")
	s.at[id] = append(s.at[id], time.Now())
	s.mu.Unlock()
	resp, err := http.DefaultClient.Do(req)
	s.mu.Lock()
	s.ended[id] = append(s.ended[id], time.Now())
	s.mu.Unlock()
	return resp, err
}

// ends is when the lanes had the answers to a subscriber's requests, or
// gave up on them.
func (s *starts) ends(id string) []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.ended[id]...)
}

func (s *starts) times(id string) []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.at[id]...)
}

func (a *arrivals) count(id string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.at[id])
}

func (a *arrivals) total() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.all
}

type bundle struct {
	// limits tune the relay's rate limiter; set before startLanes.
	limits ratelimit.Options
	// relayJS, when set, are the connections the relays started by
	// startLanes use in turn (one per cluster node); else n.JS.
	relayJS []jetstream.JetStream
	relays  int
	// maxAckPending of the lane consumers; 0 takes the default.
	maxAckPending int
	// maxRequests is the relays' --max-requests; 0 takes the default.
	maxRequests int
	// clock is the lanes' clock; nil takes the real one.
	clock clock.Clock
	// ackWait of the lane consumers; 0 takes the default.
	ackWait time.Duration
	// metrics are what the bundle's relays record.
	metrics *metrics.Metrics
	// logger, when set before startLanes, is the relays' logger; nil takes
	// the default.
	logger *slog.Logger
	// starts, when set before startLanes, records when the relays began
	// each request.
	starts *starts
	n      *testutil.NATS
	store  *subscribers.Store
	rcv    *httptest.Server
	arr    *arrivals
}

func setup(t *testing.T) *bundle {
	t.Helper()
	return newBundle(t, testutil.StartRelayNATS(t))
}

// setupCluster is setup on a 3-node cluster with R3 streams; each relay
// started connects to the next node.
func setupCluster(t *testing.T) *bundle {
	t.Helper()
	c := testutil.StartRelayCluster(t)
	var relayJS []jetstream.JetStream
	for i := range c.URLs {
		_, js := c.ConnectJS(t, i)
		relayJS = append(relayJS, js)
	}
	nc, js := c.ConnectJS(t, 0)
	b := newBundle(t, &testutil.NATS{URL: c.URLs[0], Conn: nc, JS: js})
	b.relayJS = relayJS
	return b
}

func newBundle(t *testing.T, n *testutil.NATS) *bundle {
	t.Helper()
	store, err := subscribers.Open(testutil.Context(t), n.JS)
	if err != nil {
		t.Fatal(err)
	}
	arr := &arrivals{at: map[string][]time.Time{}, ids: map[string][]string{}, respond: map[string]func(int, http.ResponseWriter){}}
	rcv := httptest.NewServer(arr.handler())
	t.Cleanup(rcv.Close)
	return &bundle{n: n, store: store, rcv: rcv, arr: arr, metrics: metrics.New()}
}

func (b *bundle) addSubscriber(t *testing.T, id string, rate float64, burst int) subscribers.Subscriber {
	t.Helper()
	return b.put(t, subscribers.Subscriber{ID: id, Rate: rate, Burst: burst})
}

// put stores a subscriber delivering to the bundle's receiver.
func (b *bundle) put(t *testing.T, sub subscribers.Subscriber) subscribers.Subscriber {
	t.Helper()
	sub.URL = b.rcv.URL + "/" + sub.ID
	sub.Secrets = []string{secret}
	if err := b.store.Put(testutil.Context(t), sub); err != nil {
		t.Fatal(err)
	}
	got, err := b.store.Get(testutil.Context(t), sub.ID)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// startLanes runs the lanes until the test ends, or until the stop it
// returns is called (which waits for them to have stopped; later calls do
// nothing).
func (b *bundle) startLanes(t testing.TB, shared int) (stop func()) {
	t.Helper()
	js := b.n.JS
	if len(b.relayJS) > 0 {
		js = b.relayJS[b.relays%len(b.relayJS)]
	}
	b.relays++
	store, err := subscribers.Open(testutil.Context(t), js)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	live, err := store.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	opts := []deliver.Option{deliver.WithAllowPrivate(true)}
	if b.starts != nil {
		opts = append(opts, deliver.WithDoer(b.starts))
	}
	client, err := deliver.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	limiter, err := ratelimit.NewShared(ctx, js, b.limits)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 3)
	go func() { done <- limiter.Follow(ctx, nil) }()
	go func() {
		done <- lanes.Run(ctx, lanes.Config{
			JS: js, Subscribers: live, SharedLanes: shared, Client: client, Limiter: limiter,
			MaxAckPending: b.maxAckPending, MaxRequests: b.maxRequests, Clock: b.clock, Metrics: b.metrics, AckWait: b.ackWait,
			Disable: store.Disable, Logger: b.logger,
		})
	}()
	go func() {
		done <- retry.Move(ctx, retry.MoverConfig{JS: js, Subscribers: live, SharedLanes: shared})
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			for range 3 {
				if err := <-done; err != nil {
					t.Errorf("lanes: %v", err)
				}
			}
			<-live.Done()
		})
	}
	t.Cleanup(stop)
	return stop
}

// defaultAckWait is the lanes' ack wait, which the bundles keep.
const defaultAckWait = time.Minute

// letGo is how many deliveries the bundle's relays let go unsent: NATS
// confirmed none of their keep-alives for three quarters of an ack wait (on
// a host loaded enough that the server answers nothing for that long), and
// they come back when their ack wait ends. A test that judges the time its
// deliveries took cannot judge a run that had any.
func (b *bundle) letGo(t testing.TB) int {
	t.Helper()
	return b.counter(t, "relay_deliveries_let_go_total")
}

// stalls is how many times a lane of the bundle's relays was reported
// stalled (see relay_lane_stalls_total).
func (b *bundle) stalls(t testing.TB) int {
	t.Helper()
	return b.counter(t, "relay_lane_stalls_total")
}

// counter is the value of the bundle's counter name, which has no labels.
func (b *bundle) counter(t testing.TB, name string) int {
	t.Helper()
	fams, err := b.metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name {
			return int(f.GetMetric()[0].GetCounter().GetValue())
		}
	}
	t.Fatal("no " + name)
	return 0
}

// enqueue publishes count deliveries for sub straight onto DELIVERIES, as
// the fan-out would, with the given extra headers.
func (b *bundle) enqueue(t testing.TB, sub subscribers.Subscriber, shared, count int, hdr ...string) {
	t.Helper()
	for i := range count {
		m := &nats.Msg{
			Subject: "deliveries." + sub.Lane(shared) + "." + sub.ID,
			Header:  nats.Header{streams.HeaderEventID: []string{fmt.Sprintf("%s-%d", sub.ID, i)}},
			Data:    []byte(`{}`),
		}
		for j := 0; j+1 < len(hdr); j += 2 {
			m.Header.Set(hdr[j], hdr[j+1])
		}
		_, err := b.n.JS.PublishMsgAsync(m)
		if errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
			// A loaded host answers slower than the client's stall wait
			// (several enqueues add up to its 4,000 pending): wait for
			// the PubAcks, then again.
			b.flush(t)
			_, err = b.n.JS.PublishMsgAsync(m)
		}
		if err != nil {
			t.Fatal(err)
		}
		if i%1000 == 999 {
			// A busy machine stalls a long async burst: wait for the
			// PubAcks a thousand at a time.
			b.flush(t)
		}
	}
}

func (b *bundle) flush(t testing.TB) {
	t.Helper()
	select {
	case <-b.n.JS.PublishAsyncComplete():
	case <-testutil.Context(t).Done():
		t.Fatal("publish did not complete")
	}
}

// TestThrottledSubscriberNeverDelaysItsLaneMates is the isolation rule of
// docs/delivery-rules.md at the scale it was designed for: 1,000 subscribers on 16 shared
// lanes, one of them limited to 1 request/s with a backlog of a minute. Every
// other subscriber's deliveries complete while the throttled one still has
// most of its backlog, and the throttled one is never sent more than
// burst + rate × T.
func TestThrottledSubscriberNeverDelaysItsLaneMates(t *testing.T) {
	t.Parallel()
	const (
		shared  = 16
		others  = 999
		each    = 3
		backlog = 60
	)
	b := setup(t)
	slow := b.addSubscriber(t, "slow", 1, 1)
	var subs []subscribers.Subscriber
	for i := range others {
		subs = append(subs, b.addSubscriber(t, fmt.Sprintf("sub%04d", i), 0, 0))
	}
	// The throttled subscriber's backlog goes first, so its lane-mates'
	// messages arrive behind it.
	b.enqueue(t, slow, shared, backlog)
	for _, s := range subs {
		b.enqueue(t, s, shared, each)
	}
	b.flush(t)
	start := time.Now()
	b.startLanes(t, shared)

	testutil.Eventually(t, func() bool { return b.arr.total()-b.arr.count("slow") == others*each },
		"lane-mates not drained: %d of %d", b.arr.total()-b.arr.count("slow"), others*each)
	elapsed := time.Since(start)
	got := b.arr.count("slow")
	t.Logf("%d deliveries to %d subscribers in %v while the 1 req/s subscriber got %d of %d",
		others*each, others, elapsed.Round(time.Millisecond), got, backlog)
	if got >= backlog {
		t.Fatalf("the throttled subscriber finished its backlog (%d) before its lane-mates", got)
	}
	checkCap(t, b.arr, "slow", 1, 1)
}

// checkCap checks that in every window between two arrivals, at most
// burst + rate × T requests arrived (plus one for the arrival that closes
// the window, measured at the receiver).
func checkCap(t *testing.T, arr *arrivals, id string, rate float64, burst int) {
	t.Helper()
	arr.mu.Lock()
	at := append([]time.Time(nil), arr.at[id]...)
	arr.mu.Unlock()
	for i := range at {
		for j := i; j < len(at); j++ {
			window := at[j].Sub(at[i]).Seconds()
			allowed := float64(burst) + rate*window + 1
			if n := float64(j - i + 1); n > allowed {
				t.Fatalf("%s: %v requests within %.3fs, cap %v", id, n, window, allowed)
			}
		}
	}
}

// A subscriber holds about two seconds of its work, at least max-in-flight
// messages, and at most its share of the lane: the lane's MaxAckPending,
// less a reserve for lane-mates that get busy, split between the busy ones.
func TestHoldLimit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		sub   subscribers.Subscriber
		busy  int
		drain float64
		want  int
	}{
		{"fast and alone: most of the lane", subscribers.Subscriber{MaxInFlight: 64}, 1, 64_000, 17_500},
		{"fast beside three busy lane-mates", subscribers.Subscriber{MaxInFlight: 64}, 4, 64_000, 4_375},
		{"1 per second holds max-in-flight", subscribers.Subscriber{Rate: 1, MaxInFlight: 16}, 1, 1, 16},
		{"1000 per second holds two seconds", subscribers.Subscriber{Rate: 1000, MaxInFlight: 16}, 1, 1000, 2000},
		{"unlimited beside a busy lane-mate: ten seconds of its pace", subscribers.Subscriber{MaxInFlight: 16}, 2, 100, 1000},
		{"slow unlimited beside a busy lane-mate: 16 in flight at 10 s each", subscribers.Subscriber{MaxInFlight: 16}, 2, 1.6, 16},
		{"unlimited and alone: its share, whatever its pace", subscribers.Subscriber{MaxInFlight: 16}, 1, 1.6, 17_500},
		{"a share never falls below one", subscribers.Subscriber{Rate: 1000, MaxInFlight: 16}, 100_000, 1000, 1},
	}
	for _, tt := range tests {
		if got := lanes.HoldLimit(&tt.sub, 20_000, tt.busy, tt.drain); got != tt.want {
			t.Errorf("%s: HoldLimit = %d, want %d", tt.name, got, tt.want)
		}
	}
}
