package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/internal/fanout"
	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

// The fault tests run what a platform team runs beside its cluster: real
// nats-server processes on loopback ports, the built relay binary, events
// published with PubAcks, a real receiver. Each logs, for the operator's
// record, what was published, delivered, delivered twice and dead-lettered,
// and how long the deliveries stopped.

// faultSink is a receiver that counts each webhook-id, and the requests
// for one id that were open at the same time (a delivery POSTed twice at
// once, which a relay must never do).
type faultSink struct {
	*httptest.Server
	delay time.Duration

	mu       sync.Mutex
	count    map[string]int
	open     map[string]int
	overlaps int
	requests int
	times    []time.Time
	first    map[string]time.Time
}

func newFaultSink(t *testing.T, delay time.Duration) *faultSink {
	t.Helper()
	s := &faultSink{delay: delay, count: map[string]int{}, open: map[string]int{}, first: map[string]time.Time{}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		_, _ = io.Copy(io.Discard, req.Body)
		id := req.Header.Get("webhook-id")
		s.mu.Lock()
		s.requests++
		s.open[id]++
		if s.open[id] > 1 {
			s.overlaps++
		}
		s.mu.Unlock()
		if s.delay > 0 {
			time.Sleep(s.delay)
		}
		s.mu.Lock()
		s.open[id]--
		s.count[id]++
		if s.count[id] == 1 {
			s.first[id] = time.Now()
		}
		s.times = append(s.times, time.Now())
		s.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(s.Close)
	return s
}

// distinct is the number of webhook-ids answered 2xx.
func (s *faultSink) distinct() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.count)
}

// arrivals returns when each webhook-id was first answered, and when every
// request was.
func (s *faultSink) arrivals() (first map[string]time.Time, all []time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.first), slices.Clone(s.times)
}

// tally is what the receiver saw: distinct ids, requests beyond the first
// per id, and requests for an id already open.
func (s *faultSink) tally() (distinct, duplicates, overlaps int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range s.count {
		duplicates += n - 1
	}
	return len(s.count), duplicates, s.overlaps
}

// duplicatedBefore counts the duplicated ids first answered before at.
func (s *faultSink) duplicatedBefore(at time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for id, c := range s.count {
		if c > 1 && s.first[id].Before(at) {
			n++
		}
	}
	return n
}

// longestPause is the longest time without an answered request after from.
func (s *faultSink) longestPause(from time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	var longest time.Duration
	last := from
	for _, at := range s.times {
		if at.Before(from) {
			continue
		}
		longest = max(longest, at.Sub(last))
		last = at
	}
	return longest
}

// faultRelay runs the built relay binary; its log is shown if the test fails.
func faultRelay(t *testing.T, name string, args ...string) *testutil.Process {
	t.Helper()
	logs := &testutil.Buffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s's log:\n%s", name, logs)
		}
	})
	cmd := exec.Command(buildRelay(t), append([]string{"run", "--metrics", "", "--lanes", "4", "--allow-private-targets"}, args...)...)
	cmd.Stderr = logs
	return testutil.StartProcess(t, cmd)
}

// faultPublisher connects to every given node and publishes with PubAcks
// that time out, so that a publish lost with a node is sent again.
func faultPublisher(t *testing.T, urls string) jetstream.JetStream {
	t.Helper()
	nc := testutil.Connect(t, urls)
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// faultSubscriber adds a subscriber once the relay has created the bucket.
func faultSubscriber(t *testing.T, urls, url string, extra ...string) {
	t.Helper()
	args := append([]string{"sub", "add", "partner", "--nats", urls, "--url", url, "--secret", testSecret}, extra...)
	var last string
	if !testutil.Within(60*time.Second, func() bool {
		code, _, errOut := relayCmd(t, args...)
		last = errOut
		return code == 0
	}) {
		t.Fatalf("relay sub add: %s", last)
	}
}

// publishBurst publishes the events ids with async PubAcks in windows of
// 256, sending again, one by one until acked, any whose PubAck failed (a
// node lost mid-publish); progress is called after each publish.
func publishBurst(t *testing.T, js jetstream.JetStream, ids []string, progress func(i int)) {
	t.Helper()
	const window = 256
	body := []byte(`{"video":"v1"}`)
	var futures []jetstream.PubAckFuture
	var pending []string
	settle := func() {
		for i, f := range futures {
			select {
			case <-f.Ok():
			case <-f.Err():
				publishUntilAcked(t, js, "video.trending", pending[i], body)
			}
		}
		futures, pending = futures[:0], pending[:0]
	}
	for i, id := range ids {
		m := &nats.Msg{Subject: fanout.SubjectPrefix + "video.trending", Data: body, Header: nats.Header{}}
		m.Header.Set(jetstream.MsgIDHeader, id)
		f, err := js.PublishMsgAsync(m)
		if err != nil {
			settle()
			publishUntilAcked(t, js, "video.trending", id, body)
		} else {
			futures = append(futures, f)
			pending = append(pending, id)
		}
		if len(futures) == window {
			settle()
		}
		if progress != nil {
			progress(i)
		}
	}
	settle()
}

func burstIDs(prefix string, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%05d", prefix, i)
	}
	return ids
}

// deadLettered counts the DLQ's entries.
func deadLettered(t *testing.T, js jetstream.JetStream) uint64 {
	t.Helper()
	var msgs uint64
	// After a node's return the DLQ may wait for a leader a while.
	ctx := testutil.Context(t)
	ok := testutil.Within(2*time.Minute, func() bool {
		attempt, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		s, err := js.Stream(attempt, streams.DLQ)
		if err != nil {
			return false
		}
		si, err := s.Info(attempt)
		if err != nil {
			return false
		}
		msgs = si.State.Msgs
		return true
	})
	if !ok {
		t.Fatal("no DLQ stream info for two minutes")
	}
	return msgs
}

// waitDelivered waits until every id has been answered, failing with the
// receiver's state after limit.
func waitDelivered(t *testing.T, rcv *faultSink, want int, limit time.Duration) {
	t.Helper()
	if !testutil.Within(limit, func() bool { return rcv.distinct() >= want }) {
		d, dups, _ := rcv.tally()
		t.Fatalf("%d of %d events delivered after %v (%d duplicates)", d, want, limit, dups)
	}
}

// TestFaultKillDeliveriesLeaderMidBurst kills with SIGKILL the node that
// leads DELIVERIES in a 3-node R3 cluster while 5,000 events are published
// with PubAcks and delivered: every event arrives and none is dead-lettered.
// The relay (two of them, on all three URLs) reconnects, the stream elects
// a new leader, and what was in flight on the dead node comes again.
func TestFaultKillDeliveriesLeaderMidBurst(t *testing.T) {
	t.Parallel()
	const events = 5000
	c := testutil.StartClusterProcesses(t)
	urls := strings.Join(c.URLs(), ",")
	rcv := newFaultSink(t, 0)
	for i := range 2 {
		faultRelay(t, fmt.Sprintf("relay %d", i+1), "--nats", urls, "--replicas", "3", "--ack-wait", "10s")
	}
	faultSubscriber(t, urls, rcv.URL, "--rate", "0", "--max-in-flight", "32")
	js := faultPublisher(t, urls)

	var killed string
	var killedAt time.Time
	kill := func() {
		s, err := js.Stream(testutil.Context(t), streams.Deliveries)
		if err != nil {
			t.Fatalf("DELIVERIES: %v", err)
		}
		si, err := s.Info(testutil.Context(t))
		if err != nil || si.Cluster == nil || c.Node(si.Cluster.Leader) == nil {
			t.Fatalf("DELIVERIES' leader: %+v, %v", si, err)
		}
		killed = si.Cluster.Leader
		killedAt = time.Now()
		c.Node(killed).Kill()
	}
	start := time.Now()
	// Half the burst published, a quarter delivered: the kill lands while
	// events are both published and delivered.
	publishBurst(t, js, burstIDs("lead", events), func(i int) {
		if i == events/2 {
			testutil.Eventually(t, func() bool { return rcv.distinct() >= events/4 }, "nothing delivered")
			kill()
		}
	})
	waitDelivered(t, rcv, events, 2*time.Minute)
	done := time.Now()
	distinct, dups, overlaps := rcv.tally()
	dead := deadLettered(t, js)
	t.Logf("killed %s (DELIVERIES' leader) after %v: published %d, delivered %d, duplicates %d (%d at once), dead-lettered %d; longest pause in deliveries %v; all delivered %v after the kill",
		killed, killedAt.Sub(start).Round(time.Millisecond), events, distinct, dups, overlaps, dead,
		rcv.longestPause(killedAt).Round(time.Millisecond), done.Sub(killedAt).Round(time.Millisecond))
	if dead != 0 {
		t.Fatalf("%d events dead-lettered after the loss of a node", dead)
	}
}

// TestFaultNATSRestartUnderRelay takes away the single NATS server a relay
// runs beside (file storage) and starts it again: /readyz fails while it is
// down, the relay reconnects and recovers without a restart of its own, and
// every event published before and after is delivered. Once every ack is
// stored, a restart (SIGTERM) delivers nothing twice. A crash (SIGKILL) may
// forget state it had not yet written, and what that state covered comes
// again: its duplicates are counted, not refused.
func TestFaultNATSRestartUnderRelay(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		stop func(*testutil.ServerProcess)
		dups bool // duplicates allowed
	}{
		{"restart", (*testutil.ServerProcess).Stop, false},
		{"crash", (*testutil.ServerProcess).Kill, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			const events = 500
			n := testutil.StartServerProcess(t)
			rcv := newFaultSink(t, 0)
			metricsAddr := testutil.FreeAddr(t)
			relay := faultRelay(t, "relay", "--nats", n.URL, "--metrics", metricsAddr, "--ack-wait", "5s")
			ready := func() bool {
				resp, err := http.Get("http://" + metricsAddr + "/readyz")
				if err != nil {
					return false
				}
				_ = resp.Body.Close()
				return resp.StatusCode == http.StatusOK
			}
			faultSubscriber(t, n.URL, rcv.URL, "--rate", "0")
			testutil.Eventually(t, ready, "relay never ready")
			js := faultPublisher(t, n.URL)
			publishBurst(t, js, burstIDs("before", events), nil)
			waitDelivered(t, rcv, events, time.Minute)
			// Every ack stored: what the restart then sends again is the
			// server's doing, not acks still on their way.
			waitIdle(t, js)

			downAt := time.Now()
			tt.stop(n)
			testutil.Eventually(t, func() bool { return !ready() }, "/readyz still 200 with NATS down")
			notReadyAfter := time.Since(downAt)
			n.Start()
			upAt := time.Now()
			testutil.Eventually(t, ready, "/readyz not 200 again after NATS came back")
			readyAfter := time.Since(upAt)
			publishBurst(t, js, burstIDs("after", events), nil)
			waitDelivered(t, rcv, 2*events, time.Minute)
			select {
			case <-relay.Exited():
				t.Fatalf("relay exited when NATS went away: %v", relay.Err())
			default:
			}
			distinct, dups, _ := rcv.tally()
			t.Logf("NATS %s: /readyz 503 %v after it went down, 200 %v after it was back; published %d, delivered %d, duplicates %d, dead-lettered %d; all delivered %v after it was back",
				tt.name, notReadyAfter.Round(time.Millisecond), readyAfter.Round(time.Millisecond), 2*events, distinct, dups,
				deadLettered(t, js), time.Since(upAt).Round(time.Millisecond))
			if !tt.dups && dups != 0 {
				t.Fatalf("%d events delivered twice across a clean NATS restart", dups)
			}
		})
	}
}

// TestFaultTwoRelaysOneStopped stops one of two relays with SIGTERM in the
// middle of a burst: it exits 0, the other finishes the work, and no event
// is ever POSTed twice at once (the stopped relay hands back only what it
// has not sent, and waits for what it has).
func TestFaultTwoRelaysOneStopped(t *testing.T) {
	t.Parallel()
	const events = 3000
	n := testutil.StartServerProcess(t)
	rcv := newFaultSink(t, 2*time.Millisecond)
	a := faultRelay(t, "relay a", "--nats", n.URL)
	faultRelay(t, "relay b", "--nats", n.URL)
	faultSubscriber(t, n.URL, rcv.URL, "--rate", "0", "--max-in-flight", "32")
	js := faultPublisher(t, n.URL)
	publishBurst(t, js, burstIDs("pair", events), nil)
	testutil.Eventually(t, func() bool { return rcv.distinct() >= events/3 }, "nothing delivered")
	stoppedAt := time.Now()
	if err := a.Stop(syscall.SIGTERM, 60*time.Second); err != nil {
		t.Fatalf("relay a on SIGTERM: %v", err)
	}
	stopTook := time.Since(stoppedAt)
	waitDelivered(t, rcv, events, time.Minute)
	distinct, dups, overlaps := rcv.tally()
	t.Logf("relay a stopped in %v after %d deliveries: published %d, delivered %d, duplicates %d, twice at once %d, dead-lettered %d; longest pause in deliveries %v",
		stopTook.Round(time.Millisecond), events/3, events, distinct, dups, overlaps, deadLettered(t, js),
		rcv.longestPause(stoppedAt).Round(time.Millisecond))
	if overlaps != 0 {
		t.Fatalf("%d requests for a webhook-id already being POSTed", overlaps)
	}
}

// TestFaultNodeDownLongerThanAckWait takes a node of a 3-node R3 cluster
// away (SIGKILL) for three times --ack-wait, in the middle of a burst, and
// brings it back: nothing is lost, none is dead-lettered, no event is
// POSTed twice at once, and the duplicates are counted and bounded.
func TestFaultNodeDownLongerThanAckWait(t *testing.T) {
	t.Parallel()
	const (
		events  = 3000
		ackWait = 2 * time.Second
	)
	c := testutil.StartClusterProcesses(t)
	urls := strings.Join(c.URLs(), ",")
	rcv := newFaultSink(t, time.Millisecond)
	// Each relay starts on a different node; both learn the others.
	for i := range 2 {
		faultRelay(t, fmt.Sprintf("relay %d", i+1), "--nats", c.Nodes[i].URL, "--replicas", "3", "--ack-wait", ackWait.String())
	}
	faultSubscriber(t, urls, rcv.URL, "--rate", "0")
	js := faultPublisher(t, strings.Join(c.URLs()[1:], ","))

	down := c.Nodes[0]
	var downAt time.Time
	publishBurst(t, js, burstIDs("part", events), func(i int) {
		if i == events/2 {
			testutil.Eventually(t, func() bool { return rcv.distinct() >= events/4 }, "nothing delivered")
			down.Kill()
			downAt = time.Now()
		}
	})
	// The outage is the scenario: it lasts three ack waits whatever else
	// happens meanwhile.
	time.Sleep(time.Until(downAt.Add(3 * ackWait)))
	down.Start()
	upAt := time.Now()
	waitDelivered(t, rcv, events, 2*time.Minute)
	distinct, dups, overlaps := rcv.tally()
	dead := deadLettered(t, js)
	t.Logf("%s down %v (ack wait %v): published %d, delivered %d, duplicates %d (%d at once), dead-lettered %d; longest pause in deliveries %v",
		down.Name, upAt.Sub(downAt).Round(time.Millisecond), ackWait, events, distinct, dups, overlaps, dead,
		rcv.longestPause(downAt).Round(time.Millisecond))
	if dead != 0 {
		t.Fatalf("%d events dead-lettered while a node was down", dead)
	}
	t.Logf("%d of the duplicated events were first delivered before the kill; where the copies are (DELIVERIES' last sequence above the events would be the fan-out running again):\n%s",
		rcv.duplicatedBefore(downAt), jetStreamState(js))
	if overlaps != 0 {
		t.Fatalf("%d requests for a webhook-id already being POSTed", overlaps)
	}
	// An ack sent while a lane's consumer has no leader is lost, and what
	// it acked comes again: the duplicates are the deliveries made during
	// the election (measured: 0-750 of this burst, about 5 s of deliveries
	// at most). More than half the burst would be a relay that re-sends
	// what it had settled.
	if limit := events / 2; dups > limit {
		t.Fatalf("%d duplicates, more than half the burst (%d)", dups, limit)
	}
}

// TestComposeTopologyWithProcesses runs docker-compose.yml's topology as
// processes on loopback: three clustered nats-server nodes, two relays
// given all three URLs and --replicas 3, and `relay listen` as the receiver
// that verifies every signature. Every event published reaches the
// receiver, signed, and both relays serve /readyz.
func TestComposeTopologyWithProcesses(t *testing.T) {
	t.Parallel()
	const events = 200
	c := testutil.StartClusterProcesses(t)
	clusterUp := time.Now()
	urls := strings.Join(c.URLs(), ",")
	var metricsAddrs []string
	for i := range 2 {
		addr := testutil.FreeAddr(t)
		metricsAddrs = append(metricsAddrs, addr)
		faultRelay(t, fmt.Sprintf("relay %d", i+1), "--nats", urls, "--replicas", "3", "--metrics", addr)
	}
	listenAddr := testutil.FreeAddr(t)
	out := &testutil.Buffer{}
	listen := exec.Command(buildRelay(t), "listen", "--addr", listenAddr, "--secret", testSecret)
	listen.Stdout = out
	listen.Stderr = out
	testutil.StartProcess(t, listen)
	testutil.Eventually(t, func() bool { return strings.Contains(out.String(), "listening on") }, "relay listen did not start: %s", out)

	faultSubscriber(t, urls, "http://"+listenAddr+"/hooks", "--events", "video.*")
	js := faultPublisher(t, urls)
	publishBurst(t, js, burstIDs("topo", events), nil)
	verified := func() int {
		ids := map[string]bool{}
		for _, line := range strings.Split(out.String(), "\n") {
			if _, rest, ok := strings.Cut(line, "webhook-id: "); ok && strings.Contains(line, "signature: ok") {
				ids[strings.Fields(rest)[0]] = true
			}
		}
		return len(ids)
	}
	if !testutil.Within(time.Minute, func() bool { return verified() >= events }) {
		t.Fatalf("relay listen verified %d of %d deliveries:\n%s", verified(), events, out)
	}
	// Both relays serve /readyz: the one that did not deliver may still be
	// starting, behind the other's creation of the replicated streams.
	for _, addr := range metricsAddrs {
		var last string
		if !testutil.Within(time.Minute, func() bool {
			resp, err := http.Get("http://" + addr + "/readyz")
			if err != nil {
				last = err.Error()
				return false
			}
			_ = resp.Body.Close()
			last = resp.Status
			return resp.StatusCode == http.StatusOK
		}) {
			t.Fatalf("/readyz of the relay on %s: %s", addr, last)
		}
		t.Logf("relay on %s ready %v after the cluster", addr, time.Since(clusterUp).Round(time.Millisecond))
	}
	if strings.Contains(out.String(), "signature: bad") {
		t.Fatalf("relay listen saw an invalid signature:\n%s", out)
	}
}
