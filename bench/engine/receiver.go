package main

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// receiver answers every webhook with 204 at once and records, per
// subscriber (the URL path), the first arrival of each webhook-id, the
// request count and the longest gap between two consecutive arrivals. It
// keeps no body.
type receiver struct {
	mu   sync.Mutex
	subs map[string]*tally
}

type tally struct {
	requests int
	first    map[string]time.Time // webhook-id → first arrival
	start    time.Time            // first arrival
	last     time.Time            // latest arrival
	gap      time.Duration        // longest time between two consecutive arrivals
	gapAt    time.Duration        // its start, after the first arrival
	gapAfter int                  // distinct webhook-ids arrived before it
}

func newReceiver() *receiver { return &receiver{subs: map[string]*tally{}} }

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	_, _ = io.Copy(io.Discard, req.Body)
	id := strings.TrimPrefix(req.URL.Path, "/")
	hook := req.Header.Get("webhook-id")
	r.mu.Lock()
	now := time.Now() // under the lock: arrivals are recorded in order
	t := r.subs[id]
	if t == nil {
		t = &tally{first: map[string]time.Time{}, start: now}
		r.subs[id] = t
	} else if g := now.Sub(t.last); g > t.gap {
		t.gap, t.gapAt, t.gapAfter = g, t.last.Sub(t.start), len(t.first)
	}
	t.last = now
	t.requests++
	if _, ok := t.first[hook]; !ok {
		t.first[hook] = now
	}
	r.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// snapshot is a copy of a subscriber's tally, without the per-id times.
type snapshot struct {
	requests, distinct int
	start, last        time.Time
	gap, gapAt         time.Duration
	gapAfter           int
}

func (r *receiver) snapshot(id string) snapshot {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.subs[id]
	if t == nil {
		return snapshot{}
	}
	return snapshot{requests: t.requests, distinct: len(t.first), start: t.start, last: t.last,
		gap: t.gap, gapAt: t.gapAt, gapAfter: t.gapAfter}
}

// distinctWithPrefix sums the distinct webhook-ids of the subscribers whose
// id starts with prefix.
func (r *receiver) distinctWithPrefix(prefix string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for id, t := range r.subs {
		if strings.HasPrefix(id, prefix) {
			n += len(t.first)
		}
	}
	return n
}

// arrival is when webhook-id hook first reached subscriber id.
func (r *receiver) arrival(id, hook string) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.subs[id]
	if t == nil {
		return time.Time{}, false
	}
	at, ok := t.first[hook]
	return at, ok
}

// forget drops what was recorded for id.
func (r *receiver) forget(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.subs, id)
}

// writeCounts classifies the messages published on the relay's streams, as
// a plain NATS subscriber on deliveries.> and retries.> sees them. Every
// publish is seen, also one that JetStream then drops as a duplicate; the
// figures of record are the streams' sequences, these say what they were.
type writeCounts struct {
	copies     int64 // deliveries.<lane>.<id> with the fan-out's Nats-Msg-Id <event id>.<id>
	puts       int64 // deliveries.overflow.<id>
	bringBacks int64 // deliveries.<lane>.<id> with Nats-Msg-Id refill-<seq>
	other      int64 // any other publish on deliveries.> (a retry moved back, a replay)
	parks      int64 // retries.wait.>
	due        int64 // retries.due.> (if the server's schedule firing is visible to subscribers)
	retries    int64 // any other publish on retries.>
	dropped    int   // messages this counter missed (slow consumer)
}

func (a writeCounts) minus(b writeCounts) writeCounts {
	return writeCounts{
		copies: a.copies - b.copies, puts: a.puts - b.puts, bringBacks: a.bringBacks - b.bringBacks,
		other: a.other - b.other, parks: a.parks - b.parks, due: a.due - b.due, retries: a.retries - b.retries,
		dropped: a.dropped - b.dropped,
	}
}

type writeCounter struct {
	eventPrefix                                      string
	copies, puts, bringBacks, other, parks, due, ret atomic.Int64
	subs                                             []*nats.Subscription
}

// countWrites subscribes on nc to deliveries.> and retries.>; event ids
// published by this program start with eventPrefix.
func countWrites(nc *nats.Conn, eventPrefix string) (*writeCounter, error) {
	c := &writeCounter{eventPrefix: eventPrefix}
	d, err := nc.Subscribe("deliveries.>", c.delivery)
	if err != nil {
		return nil, err
	}
	r, err := nc.Subscribe("retries.>", c.retry)
	if err != nil {
		_ = d.Unsubscribe()
		return nil, err
	}
	c.subs = []*nats.Subscription{d, r}
	for _, s := range c.subs {
		_ = s.SetPendingLimits(-1, -1)
	}
	return c, nc.Flush()
}

func (c *writeCounter) delivery(m *nats.Msg) {
	if strings.HasPrefix(m.Subject, overflowPrefix) {
		c.puts.Add(1)
		return
	}
	id := m.Header.Get(nats.MsgIdHdr)
	switch {
	case strings.HasPrefix(id, "refill-"):
		c.bringBacks.Add(1)
	case strings.HasPrefix(id, c.eventPrefix):
		c.copies.Add(1)
	default:
		c.other.Add(1)
	}
}

func (c *writeCounter) retry(m *nats.Msg) {
	switch {
	case strings.HasPrefix(m.Subject, "retries.wait."):
		c.parks.Add(1)
	case strings.HasPrefix(m.Subject, "retries.due."):
		c.due.Add(1)
	default:
		c.ret.Add(1)
	}
}

func (c *writeCounter) counts() writeCounts {
	w := writeCounts{
		copies: c.copies.Load(), puts: c.puts.Load(), bringBacks: c.bringBacks.Load(), other: c.other.Load(),
		parks: c.parks.Load(), due: c.due.Load(), retries: c.ret.Load(),
	}
	for _, s := range c.subs {
		n, _ := s.Dropped()
		w.dropped += n
	}
	return w
}

func (c *writeCounter) stop() {
	for _, s := range c.subs {
		_ = s.Unsubscribe()
	}
}
