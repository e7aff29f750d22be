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
//
// BODIES is a cache of what EVENTS holds: a body BODIES cannot give (not
// stored yet, purged, its stream deleted, its one replica down) is read
// from EVENTS. A body neither holds (both answered without it) is
// [ErrGone] at once; one that neither gives while one of them fails to
// answer is an error to try again, until it has been so for [GiveUp]: then
// it is [ErrUnreadable], and the delivery that waits for it is
// dead-lettered rather than handed back for ever.
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
	"time"

	"github.com/nats-io/nats.go"

	"github.com/relay-dev/relay/internal/clock"
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
	// GiveUp is how long a body may go unread, neither BODIES nor EVENTS
	// giving it while one of them fails to answer (no responders, a
	// timeout), before a read of it is [ErrUnreadable]. It is counted on
	// the Reader's clock from the first read of that body that failed so,
	// by this Reader, of reads less than GiveUp apart. A minute outlasts a leader election (4–9 s) several
	// times over, and the remaking of a deleted BODIES by the relay (within
	// 5 s, see package retention), after which BODIES answers again.
	GiveUp = time.Minute
)

// ErrGone is returned for an event whose body neither BODIES nor EVENTS
// holds any more: both answered, without it (purged by hand, deleted).
var ErrGone = errors.New("the body is in neither " + streams.Bodies + " nor " + streams.Events)

// ErrUnreadable is returned for an event whose body neither BODIES nor
// EVENTS has given for [GiveUp], one of them failing to answer.
var ErrUnreadable = errors.New("the body could be read from neither " + streams.Bodies + " nor " + streams.Events)

// notStored is a store's answer without the body: "not stored".
var notStored = errors.New("not stored")

// Reader reads and caches event bodies. Safe for concurrent use.
type Reader struct {
	nc    *nats.Conn
	max   int
	clock clock.Clock

	mu    sync.Mutex
	index map[uint64]*list.Element // of *cached, most recently used first
	lru   *list.List
	size  int
	reads []*read // the reads on their way
	// failing holds, by event sequence, the bodies whose last read failed
	// to answer: since when (see GiveUp). swept is when it was last
	// cleared of the bodies no read has asked for in GiveUp.
	failing map[uint64]failure
	swept   time.Time

	requests atomic.Int64
}

// cached is a body read, with the id of the event it is the body of.
type cached struct {
	seq  uint64
	id   string
	data []byte
}

// read is one read on its way, for the bodies of the n events from
// sequence from on, made for event id at from: a caller that wants one of
// those waits for it rather than ask again. data and err are the read's
// answer for from, set before done is closed.
type read struct {
	from, n uint64
	id      string
	done    chan struct{}
	data    []byte
	err     error
}

func (r *read) covers(seq uint64) bool { return seq >= r.from && seq < r.from+r.n }

// failure is a body whose reads fail to answer: since the first, and when
// the last was.
type failure struct{ since, last time.Time }

// New returns a Reader on nc keeping at most cacheBytes of bodies
// (CacheBytes when zero or less), counting [GiveUp] on clk (the real clock
// when nil).
func New(nc *nats.Conn, cacheBytes int, clk clock.Clock) *Reader {
	if cacheBytes <= 0 {
		cacheBytes = CacheBytes
	}
	return &Reader{nc: nc, max: cacheBytes, clock: cmp.Or[clock.Clock](clk, clock.Real),
		index: make(map[uint64]*list.Element), lru: list.New(), failing: make(map[uint64]failure)}
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
// EVENTS holds it any more, [ErrUnreadable] when neither has given it for
// [GiveUp], and another error (to try again) when one of them did not
// answer. A body stored for another event at that sequence (EVENTS
// deleted and made again) is never returned. The slice is shared: the
// caller must not change it.
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
			rd := &read{from: seq, n: 1, id: id, done: make(chan struct{})}
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
			return nil, fmt.Errorf("reading the body of event %d: %w", seq, ctx.Err())
		}
		if waiting.from == seq && waiting.n == 1 {
			// A read of this body alone: its answer is this caller's (kept
			// with the read: the cache may have evicted it since).
			if waiting.id == id {
				return waiting.data, waiting.err
			}
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
// deliveries, but the two streams store apart) from EVENTS. When BODIES
// does not answer (deleted, its replica down), the events of the read are
// read from EVENTS instead, ahead as from BODIES.
func (r *Reader) fetch(ctx context.Context, rd *read, id string) (data []byte, err error) {
	defer func() {
		rd.data, rd.err = data, err
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
	data, inBodies := r.readBodies(ctx, req, seq, id)
	if inBodies == nil {
		return data, r.settled(seq, nil)
	}
	n := uint64(1)
	switch {
	case rd.n > 1 && errors.Is(inBodies, notStored):
		req = streams.DirectGet{MultiLast: subjects[:1], Batch: 1}
		if data, inBodies = r.readBodies(ctx, req, seq, id); inBodies == nil {
			return data, r.settled(seq, nil)
		}
	case rd.n > 1:
		n = rd.n // BODIES did not answer: EVENTS gives the read ahead.
	}
	data, inEvents := r.readEvents(ctx, seq, n, id)
	switch {
	case inEvents == nil:
		return data, r.settled(seq, nil)
	case errors.Is(inBodies, notStored) && errors.Is(inEvents, notStored):
		return nil, r.settled(seq, fmt.Errorf("%w: event %d (%s): %s: %v; %s: %v", ErrGone, seq, id, streams.Bodies, inBodies, streams.Events, inEvents))
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("reading the body of event %d: %w", seq, ctx.Err())
	}
	since := r.failed(seq)
	if waited := r.clock.Now().Sub(since); waited >= GiveUp {
		return nil, fmt.Errorf("%w for %s: event %d (%s): %s: %v; %s: %v", ErrUnreadable, waited.Round(time.Second), seq, id,
			streams.Bodies, inBodies, streams.Events, inEvents)
	}
	return nil, fmt.Errorf("reading the body of event %d: %s: %w; %s: %w", seq, streams.Bodies, inBodies, streams.Events, inEvents)
}

// settled forgets that the body at seq failed to be read, now that a read
// answered (with it, or without it in both streams), and returns err.
func (r *Reader) settled(seq uint64, err error) error {
	r.mu.Lock()
	delete(r.failing, seq)
	r.mu.Unlock()
	return err
}

// failed notes that a read of the body at seq failed to answer, and
// returns since when its reads have: since the first of those that
// followed one another less than GiveUp apart (a delivery handed back is
// read again within seconds). The bodies no read has asked for in GiveUp
// (their deliveries settled, or went to another relay) are forgotten,
// once every GiveUp.
func (r *Reader) failed(seq uint64) time.Time {
	now := r.clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if now.Sub(r.swept) >= GiveUp {
		r.swept = now
		for s, f := range r.failing {
			if now.Sub(f.last) >= GiveUp {
				delete(r.failing, s)
			}
		}
	}
	f, ok := r.failing[seq]
	if !ok || now.Sub(f.last) >= GiveUp {
		f.since = now
	}
	f.last = now
	r.failing[seq] = f
	return f.since
}

// readBodies sends one read of BODIES, caches the bodies it brings and
// returns the one of event id at seq; notStored when BODIES answered
// without it, another error when it did not answer.
func (r *Reader) readBodies(ctx context.Context, req streams.DirectGet, seq uint64, id string) ([]byte, error) {
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
	switch {
	case found:
		return data, nil
	case err != nil:
		return nil, err
	}
	return nil, notStored
}

// readEvents reads the events of the n sequences from seq on from EVENTS
// in one request, caches their bodies and returns the one of event id at
// seq; notStored when EVENTS answered without it (or with another event
// there), another error when it did not answer.
func (r *Reader) readEvents(ctx context.Context, seq, n uint64, id string) ([]byte, error) {
	r.requests.Add(1)
	req := streams.DirectGet{Seq: seq, Batch: int(n)}
	if n > 1 {
		req.MaxBytes = ReadBytes
	}
	got, _, err := streams.GetBatch(ctx, r.nc, streams.Events, req)
	var data []byte
	found := false
	r.mu.Lock()
	for _, m := range got {
		if m.Seq >= seq+n {
			break
		}
		of := fanout.EventID(m.Header, m.Seq)
		r.putLocked(m.Seq, of, m.Data)
		if m.Seq == seq && of == id {
			data, found = m.Data, true
		}
	}
	r.mu.Unlock()
	switch {
	case found:
		return data, nil
	case err != nil && len(got) == 0:
		return nil, err
	}
	// The first message from seq on is another event's, or none is.
	return nil, notStored
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
