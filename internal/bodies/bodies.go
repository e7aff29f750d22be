// Package bodies reads the bodies of events by their EVENTS sequence, for
// deliveries that carry that sequence (Relay-Event-Seq) rather than a copy
// of the body.
//
// A fan-out to a hundred subscribers would otherwise store a hundred copies
// of each body in DELIVERIES: 1.6 MB per 16 KB event. The fan-out stores a
// body shared by several deliveries once, in BODIES on bodies.<sequence>
// (relay's own stream, which an operator's purge or age limit of EVENTS
// does not touch), and each relay reads it once for all the deliveries of
// the event it sends: a [Reader] keeps the bodies it read in a cache
// bounded by bytes, makes one request for the many deliveries that ask for
// the same event at once, and reads ahead (the events after it, which the
// next deliveries usually want) in the same request.
package bodies

import (
	"cmp"
	"container/list"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"

	"github.com/relay-dev/relay/streams"
)

// Tuning: what one read brings, and what the cache keeps.
const (
	// ReadAhead is how many events one read asks for: the one wanted and
	// those after it.
	ReadAhead = 64
	// ReadBytes bounds one read (the server stops after the event that
	// reaches it).
	ReadBytes = 1 << 20
	// CacheBytes is the default bound on the bodies a Reader keeps.
	CacheBytes = 64 << 20
)

// ErrGone is returned for an event whose body neither BODIES nor EVENTS
// holds any more: purged by hand, or deleted.
var ErrGone = errors.New("bodies: the body is in neither " + streams.Bodies + " nor " + streams.Events)

// Reader reads and caches event bodies. Safe for concurrent use.
type Reader struct {
	nc  *nats.Conn
	max int

	mu    sync.Mutex
	index map[uint64]*list.Element // of *cached, most recently used first
	lru   *list.List
	size  int
	reads []*read // the reads on their way

	requests atomic.Int64
}

type cached struct {
	seq  uint64
	data []byte
}

// read is one request on its way, for the n events from sequence from on:
// a caller that wants one of those waits for it rather than ask again.
type read struct {
	from, n uint64
	done    chan struct{}
}

func (r *read) covers(seq uint64) bool { return seq >= r.from && seq < r.from+r.n }

// New returns a Reader on nc keeping at most cacheBytes of bodies
// (CacheBytes when zero or less).
func New(nc *nats.Conn, cacheBytes int) *Reader {
	if cacheBytes <= 0 {
		cacheBytes = CacheBytes
	}
	return &Reader{nc: nc, max: cacheBytes, index: make(map[uint64]*list.Element), lru: list.New()}
}

// Requests is how many reads the Reader has sent to NATS.
func (r *Reader) Requests() int64 { return r.requests.Load() }

// Size is the bytes of bodies the Reader keeps.
func (r *Reader) Size() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.size
}

// Body returns the body of the event stored at seq in EVENTS, exactly as it
// was published; [ErrGone] when EVENTS no longer holds it. The slice is
// shared: the caller must not change it.
func (r *Reader) Body(ctx context.Context, seq uint64) ([]byte, error) {
	r.mu.Lock()
	if data, ok := r.hitLocked(seq); ok {
		r.mu.Unlock()
		return data, nil
	}
	var waiting *read
	for _, rd := range r.reads {
		if rd.covers(seq) {
			waiting = rd
			break
		}
	}
	r.mu.Unlock()
	if waiting == nil {
		return r.fetch(ctx, seq, false)
	}
	select {
	case <-waiting.done:
	case <-ctx.Done():
		return nil, fmt.Errorf("bodies: reading event %d: %w", seq, ctx.Err())
	}
	r.mu.Lock()
	data, ok := r.hitLocked(seq)
	r.mu.Unlock()
	if ok {
		return data, nil
	}
	// Not brought (that read stopped at its bytes, or failed), or evicted
	// already: read it alone.
	return r.fetch(ctx, seq, true)
}

// hitLocked returns a cached body; r.mu is held.
func (r *Reader) hitLocked(seq uint64) ([]byte, bool) {
	e, ok := r.index[seq]
	if !ok {
		return nil, false
	}
	r.lru.MoveToFront(e)
	return e.Value.(*cached).data, true
}

// fetch reads the bodies of the events from seq on (seq alone when alone)
// from BODIES into the cache and returns seq's body. One BODIES does not
// hold (not stored yet: the fan-out stores it just before the deliveries
// that carry its sequence, but another stream may take the deliveries
// first) is read from EVENTS; ErrGone when neither holds it.
func (r *Reader) fetch(ctx context.Context, seq uint64, alone bool) ([]byte, error) {
	rd := &read{from: seq, n: ReadAhead, done: make(chan struct{})}
	if alone {
		rd.n = 1
	}
	r.mu.Lock()
	r.reads = append(r.reads, rd)
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		for i, x := range r.reads {
			if x == rd {
				r.reads = append(r.reads[:i], r.reads[i+1:]...)
				break
			}
		}
		r.mu.Unlock()
		close(rd.done)
	}()
	subjects := make([]string, rd.n)
	for i := range subjects {
		subjects[i] = streams.BodySubject(seq + uint64(i))
	}
	r.requests.Add(1)
	got, _, err := streams.GetBatch(ctx, r.nc, streams.Bodies,
		streams.DirectGet{MultiLast: subjects, Batch: len(subjects), MaxBytes: ReadBytes})
	var data []byte
	found := false
	r.mu.Lock()
	for _, m := range got {
		at, ok := eventSeq(m.Subject)
		if !ok {
			continue
		}
		r.putLocked(at, m.Data)
		if at == seq {
			data, found = m.Data, true
		}
	}
	r.mu.Unlock()
	if found {
		return data, nil
	}
	r.requests.Add(1)
	events, _, eerr := streams.GetBatch(ctx, r.nc, streams.Events, streams.DirectGet{Seq: seq, Batch: 1})
	switch {
	case len(events) > 0 && events[0].Seq == seq:
		r.mu.Lock()
		r.putLocked(seq, events[0].Data)
		r.mu.Unlock()
		return events[0].Data, nil
	case err != nil || eerr != nil:
		return nil, fmt.Errorf("bodies: reading the body of event %d: %w", seq, cmp.Or(err, eerr))
	default:
		return nil, fmt.Errorf("%w: event %d", ErrGone, seq)
	}
}

// eventSeq reads the EVENTS sequence of a BODIES subject.
func eventSeq(subject string) (uint64, bool) {
	tok, ok := streams.SubjectToken(subject, 1)
	if !ok {
		return 0, false
	}
	seq, err := strconv.ParseUint(tok, 10, 64)
	return seq, err == nil
}

// putLocked caches a body, evicting the least recently used ones past the
// bound; r.mu is held.
func (r *Reader) putLocked(seq uint64, data []byte) {
	if _, ok := r.index[seq]; ok {
		return
	}
	r.index[seq] = r.lru.PushFront(&cached{seq: seq, data: data})
	r.size += len(data)
	for r.size > r.max && r.lru.Len() > 0 {
		oldest := r.lru.Back()
		c := r.lru.Remove(oldest).(*cached)
		delete(r.index, c.seq)
		r.size -= len(c.data)
	}
}
