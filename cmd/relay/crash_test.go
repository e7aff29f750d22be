package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/internal/testutil"
)

// uniqueIDs counts the distinct webhook-ids a receiver got and the requests
// beyond the first for each (duplicates).
func uniqueIDs(r *webhookSink) (distinct, duplicates int) {
	seen := map[string]bool{}
	for _, d := range r.deliveries() {
		id := d.header.Get("webhook-id")
		if seen[id] {
			duplicates++
		}
		seen[id] = true
	}
	return len(seen), duplicates
}

// TestStopMidBurstThenRestartLosesNothing stops relay as SIGTERM does while
// it delivers a burst: it must exit 0, and a restart delivers every event.
func TestStopMidBurstThenRestartLosesNothing(t *testing.T) {
	t.Parallel()
	const events = 300
	n := testutil.StartRelayNATS(t)
	rcv := newReceiver(t)
	mustRelay(t, "sub", "add", "demo", "--nats", n.URL, "--url", rcv.URL, "--secret", testSecret)
	for i := range events {
		publish(t, n.JS, "burst", fmt.Sprintf("e%03d", i), []byte(`{}`))
	}
	r := startRelay(t, n.URL, "--allow-private-targets")
	testutil.Eventually(t, func() bool { return rcv.count() >= events/5 }, "first relay delivered nothing")
	if code := r.stop(); code != 0 {
		t.Fatalf("relay run exited %d on stop: %s", code, r.stderr.String())
	}
	stoppedAt := rcv.count()
	startRelay(t, n.URL, "--allow-private-targets")
	testutil.Eventually(t, func() bool { d, _ := uniqueIDs(rcv); return d == events }, "events lost across a stop")
	waitIdle(t, n.JS)
	_, dups := uniqueIDs(rcv)
	t.Logf("stopped after %d of %d deliveries; %d duplicates after the restart", stoppedAt, events, dups)
	if dups != 0 {
		t.Fatalf("a clean stop caused %d duplicate deliveries", dups)
	}
}

// buildRelay builds the real relay binary once for the tests that kill it.
func buildRelay(t *testing.T) string {
	t.Helper()
	return testutil.Build(t, "github.com/relay-dev/relay/cmd/relay")
}

// TestKillDashNineMidBurstThenRestartLosesNothing runs the real binary,
// kills it with SIGKILL while it has deliveries of a burst in flight, starts
// it again and publishes the rest of the burst: every event is delivered,
// and every request carries the webhook-id of a published event.
//
// The receiver, not the clock, places the kill: it answers a quarter of the
// burst, then holds every request unanswered, and relay is killed once one
// is held. Against a NATS server that survives (production: relay beside a
// cluster), the duplicates are then bounded by what the relay had in
// flight: one subscriber's --max-in-flight (the held requests, which must
// come again), plus acks still in the dead process's buffer. On the
// embedded server the kill takes the server down too, and it also forgets
// the consumer acks it had not yet written (nats-server writes consumer
// state at most every 100 ms): those deliveries come again, so the bound
// there is about 100 ms of deliveries, measured and logged.
func TestKillDashNineMidBurstThenRestartLosesNothing(t *testing.T) {
	t.Parallel()
	t.Run("relay beside a server", func(t *testing.T) {
		t.Parallel()
		n := testutil.StartRelayNATS(t)
		dups := killMidBurst(t, []string{"--nats", n.URL}, n.URL, false)
		if limit := 2 * subscribers.DefaultMaxInFlight; dups > limit {
			t.Fatalf("%d duplicates after kill -9, more than twice --max-in-flight (%d)", dups, limit)
		}
	})
	t.Run("embedded server", func(t *testing.T) {
		t.Parallel()
		listen := testutil.FreeAddr(t)
		killMidBurst(t, []string{"--data", t.TempDir(), "--listen", listen}, "nats://"+listen, true)
	})
}

// killMidBurst publishes half a burst, kills relay -9 while the receiver
// holds some of its requests, restarts it, publishes the other half, and
// waits for every event; it returns the duplicate requests. serverDies says
// that the kill takes the NATS server down with relay (the embedded one).
func killMidBurst(t *testing.T, natsArgs []string, url string, serverDies bool) int {
	t.Helper()
	const (
		events = 400
		// answered is how many requests the receiver answers before it
		// holds the others.
		answered = events / 4
		// patience bounds every wait. Each takes well under a few seconds
		// even on a slow machine; the bound is there so that a stuck
		// relay fails the test with its state instead of hanging it.
		patience = time.Minute
	)
	bin := buildRelay(t)
	rcv := newCrashSink(t)
	logs := &testutil.Buffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("relay's log:\n%s", logs)
		}
	})
	start := func() *testutil.Process {
		args := append([]string{"run", "--metrics", "", "--lanes", "4", "--allow-private-targets",
			"--ack-wait", "2s"}, natsArgs...)
		cmd := exec.Command(bin, args...)
		cmd.Stderr = logs
		return testutil.StartProcess(t, cmd)
	}
	burst := make([]string, events)
	for i := range burst {
		burst[i] = fmt.Sprintf("k%03d", i)
	}
	relay := start()
	var js jetstream.JetStream
	state := func() string {
		s := rcv.summary(burst)
		if js != nil {
			s += "\n" + jetStreamState(js)
		}
		return s
	}
	// await waits until cond holds. It fails at once if the running relay
	// exits (its log says why), and after patience with the state.
	await := func(what string, cond func() bool) {
		t.Helper()
		exited := false
		ok := testutil.Within(patience, func() bool {
			if cond() {
				return true
			}
			select {
			case <-relay.Exited():
				exited = true
				return true
			default:
				return false
			}
		})
		switch {
		case exited:
			t.Fatalf("waiting for %s: relay run exited: %v\n%s", what, relay.Err(), state())
		case !ok:
			t.Fatalf("waiting for %s: not within %v\n%s", what, patience, state())
		}
	}

	var nc *nats.Conn
	await("NATS to accept connections", func() bool {
		var err error
		nc, err = nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
		return err == nil
	})
	t.Cleanup(nc.Close)
	var err error
	js, err = jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testutil.Context(t)
	await("relay to create its fan-out consumer", func() bool {
		_, err := js.Consumer(ctx, "EVENTS", "fanout")
		return err == nil
	})
	mustRelay(t, "sub", "add", "demo", "--nats", url, "--url", rcv.URL, "--secret", testSecret)

	// The running relay picks the new subscriber up within a second, and
	// an event fanned out before that is not for it: probe until one is
	// delivered, so that the burst is.
	published := map[string]bool{}
	var lastProbe time.Time
	await("a first delivery", func() bool {
		if time.Since(lastProbe) >= 100*time.Millisecond {
			id := fmt.Sprintf("warm%d", len(published))
			publishUntilAcked(t, js, "warmup", id, []byte(`{}`))
			published[id] = true
			lastProbe = time.Now()
		}
		return rcv.deliveredCount() > 0
	})

	for _, id := range burst {
		published[id] = true
	}
	rcv.holdAfter(answered)
	for _, id := range burst[:events/2] {
		publishUntilAcked(t, js, "burst", id, []byte(`{}`))
	}
	await("a delivery held in flight", func() bool { return rcv.heldCount() > 0 })
	relay.Kill()
	killedAt, held := rcv.deliveredCount(), rcv.heldCount()
	if serverDies {
		// Let the client see the connection drop before it publishes
		// again: a publish written on the dead connection is lost with
		// its PubAck (publishUntilAcked would send it again, but only
		// after waiting for that PubAck).
		if !testutil.Within(patience, func() bool { return !nc.IsConnected() }) {
			t.Fatal("the client did not see the embedded server die with relay")
		}
	}
	rcv.answerAll()

	relay = start()
	if serverDies {
		await("the client to reconnect to the restarted server", nc.IsConnected)
	}
	for _, id := range burst[events/2:] {
		publishUntilAcked(t, js, "burst", id, []byte(`{}`))
	}
	await("every event to be delivered", func() bool { return len(rcv.missing(burst)) == 0 })
	// Every delivery has left DELIVERIES, acked: no duplicate is still
	// on its way when they are counted.
	waitIdle(t, js)
	if err := relay.Stop(os.Interrupt, patience); err != nil {
		t.Fatalf("relay run after the restart did not stop cleanly: %v", err)
	}
	for _, id := range rcv.attemptIDs() {
		if !published[id] {
			t.Fatalf("a request carried webhook-id %q, which no published event has", id)
		}
	}
	dups := rcv.duplicates()
	t.Logf("killed after %d requests answered, with %d held; %d duplicate requests for %d events",
		killedAt, held, dups, len(published))
	return dups
}

// crashSink is the webhook endpoint of the kill -9 test. It answers 200
// until told to hold; from then on it leaves every request unanswered, as a
// slow receiver does, so that relay has deliveries in flight when it is
// killed. A held request is an attempt, not a delivery: the receiver never
// accepted it, so it must come again.
type crashSink struct {
	*httptest.Server
	mu        sync.Mutex
	attempts  []string       // webhook-id of every request, in arrival order
	delivered map[string]int // 200 answers by webhook-id
	budget    int            // 200 answers left before holding; -1: no limit
	held      int
	release   chan struct{} // closed when held requests may return
	released  bool
}

func newCrashSink(t *testing.T) *crashSink {
	t.Helper()
	r := &crashSink{delivered: map[string]int{}, budget: -1, release: make(chan struct{})}
	r.Server = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.Close)
	t.Cleanup(r.answerAll) // first: Close waits for the held requests
	return r
}

func (r *crashSink) serve(w http.ResponseWriter, req *http.Request) {
	_, _ = io.Copy(io.Discard, req.Body)
	id := req.Header.Get("webhook-id")
	r.mu.Lock()
	r.attempts = append(r.attempts, id)
	hold := r.budget == 0
	if hold {
		r.held++
	} else {
		if r.budget > 0 {
			r.budget--
		}
		r.delivered[id]++
	}
	r.mu.Unlock()
	if !hold {
		w.WriteHeader(http.StatusOK)
		return
	}
	select {
	case <-req.Context().Done(): // relay is gone
	case <-r.release:
	}
	w.WriteHeader(http.StatusServiceUnavailable)
}

// holdAfter makes the sink hold every request after n more 200 answers.
func (r *crashSink) holdAfter(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.budget = n
}

// answerAll lets the held requests return (unaccepted) and answers every
// later request with 200.
func (r *crashSink) answerAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.budget = -1
	if !r.released {
		r.released = true
		close(r.release)
	}
}

func (r *crashSink) heldCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.held
}

// deliveredCount is the number of requests answered 200.
func (r *crashSink) deliveredCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.delivered {
		n += c
	}
	return n
}

// missing returns the ids that no request answered 200 carried.
func (r *crashSink) missing(ids []string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.missingLocked(ids)
}

func (r *crashSink) missingLocked(ids []string) []string {
	var out []string
	for _, id := range ids {
		if r.delivered[id] == 0 {
			out = append(out, id)
		}
	}
	return out
}

func (r *crashSink) attemptIDs() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.attempts)
}

// duplicates is the number of requests beyond the first for each
// webhook-id, held ones included.
func (r *crashSink) duplicates() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[string]bool{}
	dups := 0
	for _, id := range r.attempts {
		if seen[id] {
			dups++
		}
		seen[id] = true
	}
	return dups
}

// summary says what the sink got, for the message of a failing test.
func (r *crashSink) summary(want []string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	missing := r.missingLocked(want)
	if len(missing) > 20 {
		missing = append(missing[:20], "…")
	}
	return fmt.Sprintf("receiver: %d requests, %d webhook-ids delivered, %d held; not delivered: %v",
		len(r.attempts), len(r.delivered), r.held, missing)
}

// jetStreamState describes the relay's streams and consumers, for the
// message of a failing test or a fault test's log.
func jetStreamState(js jetstream.JetStream) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var b strings.Builder
	for name := range js.StreamNames(ctx).Name() {
		s, err := js.Stream(ctx, name)
		if err != nil {
			continue
		}
		info, _ := s.Info(ctx)
		if info != nil {
			fmt.Fprintf(&b, "stream %s: msgs %d, first %d, last %d\n", name, info.State.Msgs, info.State.FirstSeq, info.State.LastSeq)
		}
		for ci := range s.ListConsumers(ctx).Info() {
			fmt.Fprintf(&b, "  consumer %s: pending %d, ack pending %d, redelivered %d, delivered %d, ack floor %d\n",
				ci.Name, ci.NumPending, ci.NumAckPending, ci.NumRedelivered, ci.Delivered.Stream, ci.AckFloor.Stream)
		}
	}
	return b.String()
}
