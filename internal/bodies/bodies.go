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

	"github.com/relay-dev/relay/internal/fanout"
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

// cached is a body read, with the id of the event it is the body of.
type cached struct {
	seq  uint64
	id   string
	data []byte
}

// read is one read on its way, for the bodies of the n events from
// sequence from on: a caller that wants one of those waits for it rather
// than ask again. err is the read's answer for from, set before done is
// closed.
type read struct {
	from, n uint64
	done    chan struct{}
	err     error
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

// Requests is how many requests the Reader has sent to NATS.
func (r *Reader) Requests() int64 { return r.requests.Load() }

// Size is the bytes of bodies the Reader keeps.
func (r *Reader) Size() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.size
}

// Body returns the body of the event stored at seq in EVENTS whose event
// id is id, exactly as it was published; [ErrGone] when neither BODIES nor
// EVENTS holds it any more. A body stored for another event at that
// sequence (EVENTS deleted and made again) is never returned. The slice is
// shared: the caller must not change it.
//
// However many callers want one body at once, one read is on its way for
// it: a caller waits for a read that covers its sequence, and reads only
// when none does; after a read that did not bring its body, it reads that
// body alone once, and takes the answer of a read of it alone as final.
func (r *Reader) Body(ctx context.Context, seq uint64, id string) ([]byte, error) {
	ahead := true
	for {
		r.mu.Lock()
		if data, ok := r.hitLocked(seq, id); ok {
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
		if waiting == nil {
			rd := &read{from: seq, n: 1, done: make(chan struct{})}
			if ahead {
				rd.n = ReadAhead
			}
			r.reads = append(r.reads, rd)
			r.mu.Unlock()
			return r.fetch(ctx, rd, id)
		}
		r.mu.Unlock()
		select {
		case <-waiting.done:
		case <-ctx.Done():
			return nil, fmt.Errorf("bodies: reading the body of event %d: %w", seq, ctx.Err())
		}
		if waiting.from == seq && waiting.n == 1 {
			// A read of this body alone: its answer is this caller's.
			r.mu.Lock()
			data, ok := r.hitLocked(seq, id)
			r.mu.Unlock()
			if ok {
				return data, nil
			}
			return nil, cmp.Or(waiting.err, fmt.Errorf("%w: event %d", ErrGone, seq))
		}
		ahead = false
	}
}

// hitLocked returns a cached body of event id; r.mu is held.
func (r *Reader) hitLocked(seq uint64, id string) ([]byte, bool) {
	e, ok := r.index[seq]
	if !ok {
		return nil, false
	}
	c := e.Value.(*cached)
	if c.id != id {
		return nil, false
	}
	r.lru.MoveToFront(e)
	return c.data, true
}

// fetch makes the read rd and returns the body of event id at rd.from.
// A read ahead asks BODIES for the bodies of rd.n events in one request
// (the server stops at ReadBytes, in the order it stored them); a body it
// did not bring is then read alone from BODIES, and one BODIES does not
// hold (not stored yet: the fan-out stores a body just before its
// deliveries, but the two streams store apart) from EVENTS.
func (r *Reader) fetch(ctx context.Context, rd *read, id string) (data []byte, err error) {
	defer func() {
		rd.err = err
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
	seq := rd.from
	subjects := make([]string, rd.n)
	for i := range subjects {
		subjects[i] = streams.BodySubject(seq + uint64(i))
	}
	req := streams.DirectGet{MultiLast: subjects, Batch: len(subjects), MaxBytes: ReadBytes}
	data, found, err := r.readBodies(ctx, req, seq, id)
	if found || err != nil {
		return data, err
	}
	if rd.n > 1 {
		req = streams.DirectGet{MultiLast: subjects[:1], Batch: 1}
		if data, found, err = r.readBodies(ctx, req, seq, id); found || err != nil {
			return data, err
		}
	}
	r.requests.Add(1)
	events, _, err := streams.GetBatch(ctx, r.nc, streams.Events, streams.DirectGet{Seq: seq, Batch: 1})
	if err != nil {
		return nil, fmt.Errorf("bodies: reading the body of event %d: %w", seq, err)
	}
	if len(events) == 0 || events[0].Seq != seq || fanout.EventID(events[0].Header, seq) != id {
		return nil, fmt.Errorf("%w: event %d (%s)", ErrGone, seq, id)
	}
	r.mu.Lock()
	r.putLocked(seq, id, events[0].Data)
	r.mu.Unlock()
	return events[0].Data, nil
}

// readBodies sends one read of BODIES, caches the bodies it brings and
// returns the one of event id at seq, if it brought it.
func (r *Reader) readBodies(ctx context.Context, req streams.DirectGet, seq uint64, id string) ([]byte, bool, error) {
	r.requests.Add(1)
	got, _, err := streams.GetBatch(ctx, r.nc, streams.Bodies, req)
	var data []byte
	found := false
	r.mu.Lock()
	for _, m := range got {
		at, ok := eventSeq(m.Subject)
		if !ok {
			continue
		}
		of := m.Header.Get(streams.HeaderEventID)
		r.putLocked(at, of, m.Data)
		if at == seq && of == id {
			data, found = m.Data, true
		}
	}
	r.mu.Unlock()
	if err != nil && !found {
		return nil, false, fmt.Errorf("bodies: reading the body of event %d: %w", seq, err)
	}
	return data, found, nil
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

// putLocked caches a body, in place of one cached for another event at its
// sequence, evicting the least recently used past the bound; r.mu is held.
func (r *Reader) putLocked(seq uint64, id string, data []byte) {
	if e, ok := r.index[seq]; ok {
		c := e.Value.(*cached)
		if c.id == id {
			return
		}
		r.lru.Remove(e)
		delete(r.index, seq)
		r.size -= len(c.data)
	}
	r.index[seq] = r.lru.PushFront(&cached{seq: seq, id: id, data: data})
	r.size += len(data)
	for r.size > r.max && r.lru.Len() > 0 {
		oldest := r.lru.Back()
		c := r.lru.Remove(oldest).(*cached)
		delete(r.index, c.seq)
		r.size -= len(c.data)
	}
}
