package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/relay-dev/relay/internal/deadletter"
	"github.com/relay-dev/relay/internal/testutil"
)

// hostileReceiver is a raw TCP endpoint on loopback that reads each request
// and then misbehaves as misbehave says. It records the webhook-id of every
// request it read.
type hostileReceiver struct {
	ln   net.Listener
	quit chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	conn []net.Conn
	ids  []string
}

func newHostileReceiver(t *testing.T, misbehave func(h *hostileReceiver, c net.Conn, br *bufio.Reader)) *hostileReceiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &hostileReceiver{ln: ln, quit: make(chan struct{})}
	h.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			h.mu.Lock()
			h.conn = append(h.conn, c)
			h.mu.Unlock()
			h.wg.Go(func() {
				defer c.Close()
				br := bufio.NewReader(c)
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, req.Body)
				h.mu.Lock()
				h.ids = append(h.ids, req.Header.Get("webhook-id"))
				h.mu.Unlock()
				misbehave(h, c, br)
			})
		}
	})
	t.Cleanup(func() {
		close(h.quit)
		_ = ln.Close()
		h.mu.Lock()
		for _, c := range h.conn {
			_ = c.Close()
		}
		h.mu.Unlock()
		h.wg.Wait()
	})
	return h
}

func (h *hostileReceiver) url() string { return "http://" + h.ln.Addr().String() + "/hook" }

// requests returns the webhook-ids of the requests read so far.
func (h *hostileReceiver) requests() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.ids...)
}

// TestHostileSubscribersNeverStallTheirLane: one healthy subscriber and
// three hostile ones share the only lane (--lanes 1), 200 events each, all
// with --max-attempts 1. The healthy one gets every event while the others
// misbehave. Each request to the one that hangs (200 ms timeout) or answers
// garbage is retryable and becomes a max_attempts dead letter; after five
// such failures its circuit opens and the rest wait in its overflow, not
// charged an attempt, so only the first few die within the test. The one
// whose body trickles after its 200 delivers its events: a 2xx is decided by
// its status (internal/deliver's TestHostileSlowBody) and the timeout ends
// each request.
func TestHostileSubscribersNeverStallTheirLane(t *testing.T) {
	t.Parallel()
	const events = 200
	n := testutil.StartRelayNATS(t)
	healthy := newReceiver(t)
	untilClosed := func(_ *hostileReceiver, _ net.Conn, br *bufio.Reader) { _, _ = io.Copy(io.Discard, br) }
	hangs := newHostileReceiver(t, untilClosed)
	garbage := newHostileReceiver(t, func(h *hostileReceiver, c net.Conn, br *bufio.Reader) {
		if _, err := io.WriteString(c, "garbage\r\n\r\n"); err == nil {
			untilClosed(h, c, br)
		}
	})
	slowBody := newHostileReceiver(t, func(h *hostileReceiver, c net.Conn, _ *bufio.Reader) {
		if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n"); err != nil {
			return
		}
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-h.quit:
				return
			case <-tick.C:
			}
			if _, err := c.Write([]byte{'.'}); err != nil {
				return
			}
		}
	})

	mustRelay(t, "sub", "add", "healthy", "--nats", n.URL, "--url", healthy.URL, "--secret", testSecret, "--max-attempts", "1")
	for id, url := range map[string]string{"hangs": hangs.url(), "garbage": garbage.url(), "slowbody": slowBody.url()} {
		mustRelay(t, "sub", "add", id, "--nats", n.URL, "--url", url, "--secret", testSecret,
			"--max-attempts", "1", "--timeout", "200ms")
	}
	// The slow body's timeout is long enough for its headers to come
	// even on a loaded machine (its body never ends, so the timeout ends
	// every request all the same), with enough at once to take about two
	// seconds.
	mustRelay(t, "sub", "update", "slowbody", "--nats", n.URL, "--timeout", "1s", "--max-in-flight", "100")
	startRelay(t, n.URL, "--allow-private-targets", "--lanes", "1")
	for i := range events {
		publish(t, n.JS, "x", fmt.Sprintf("evt_%03d", i), []byte(`{}`))
	}

	testutil.Eventually(t, func() bool { return healthy.count() == events }, "the healthy subscriber did not get every event")
	ids := map[string]bool{}
	for _, d := range healthy.deliveries() {
		ids[d.header.Get("webhook-id")] = true
	}
	if len(ids) != events {
		t.Fatalf("the healthy subscriber got %d distinct events, want %d", len(ids), events)
	}

	for id, h := range map[string]*hostileReceiver{"hangs": hangs, "garbage": garbage} {
		var dead []deadletter.Entry
		var sent []string
		deadline := time.Now().Add(30 * time.Second)
		for {
			sent = h.requests()
			dead = dlqEntries(t, n.URL, "--subscriber", id)
			// Every request the receiver read is a dead letter. There may
			// be more dead letters than that: an attempt whose 200 ms ran
			// out before the receiver got round to reading it (64 dials at
			// once on a loaded machine) is an attempt all the same.
			deadIDs := map[string]bool{}
			for _, e := range dead {
				deadIDs[e.EventID] = true
			}
			missing := 0
			for ev := range distinct(sent) {
				if !deadIDs[ev] {
					missing++
				}
			}
			if len(sent) > 0 && missing == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d requests read, %d of them without a dead letter (%d dead letters)", id, len(sent), missing, len(dead))
			}
			time.Sleep(20 * time.Millisecond) // polling a condition
		}
		t.Logf("%s: %d requests read, %d dead letters; the rest wait behind its open circuit", id, len(sent), len(dead))
		for _, e := range dead {
			if e.Reason != deadletter.MaxAttempts || e.Attempts != 1 {
				t.Fatalf("%s: dead letter %s with reason %s after %d attempts, want max_attempts after 1", id, e.EventID, e.Reason, e.Attempts)
			}
		}
	}

	// Every event reached the slow-body subscriber and was delivered, or
	// (when even its headers came too late) died of its one attempt.
	var delivered, died int
	testutil.Eventually(t, func() bool {
		dead := dlqEntries(t, n.URL, "--subscriber", "slowbody")
		deadIDs := map[string]bool{}
		for _, e := range dead {
			if e.Reason != deadletter.MaxAttempts {
				t.Fatalf("slowbody: dead letter %s with reason %s", e.EventID, e.Reason)
			}
			deadIDs[e.EventID] = true
		}
		delivered, died = 0, len(deadIDs)
		for ev := range distinct(slowBody.requests()) {
			if !deadIDs[ev] {
				delivered++
			}
		}
		return delivered+died == events
	}, "the slow-body subscriber's events are not all delivered or dead")
	t.Logf("slowbody: %d delivered (a 2xx, its body cut at the timeout), %d dead", delivered, died)
	if delivered == 0 {
		t.Fatal("slowbody: no 2xx with a slow body was delivered")
	}
}

func distinct(ids []string) map[string]bool {
	m := map[string]bool{}
	for _, id := range ids {
		m[id] = true
	}
	return m
}
