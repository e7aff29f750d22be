package fanout

import (
	"sync"
	"time"
)

// shedMemory remembers, by EVENTS sequence, what became of each copy of an
// event this relay fanned out and must fan out again (a copy refused for
// want of room, a PubAck lost), until the event is acked: which
// subscribers' copies it dead-lettered as backlog, and which it stored.
// Fanned out again, the event gets the same verdicts: a copy shed the first
// time is shed again (its dead letter's id makes the second a duplicate),
// never queued, which would make a delivery both sent and in the DLQ; and a
// copy stored the first time is not published again. DELIVERIES drops a
// copy published again as a duplicate only within its duplicate window (2
// minutes): an event tried again every 2 s for longer, while DELIVERIES is
// full, would store again, and deliver twice, the copies of it that had
// been stored and sent meanwhile. Any other copy is queued (its copy id
// makes the second a duplicate within the window).
//
// The memory is this relay's alone, so the event stays here until it is
// acked: held and renewed, and tried again by this relay (see settle), not
// handed back to JetStream, which would give it to any relay. It goes to
// another relay only when this one stops (an event it was trying again is
// handed back then) or stops renewing it (a crash, a connection lost for
// longer than the ack wait); there it is fanned out as new, and a copy
// this relay shed may be queued too: a known limit, since no JetStream
// request finds a dead letter by its Nats-Msg-Id.
type shedMemory struct {
	mu sync.Mutex
	m  map[uint64]shedRecord
	// entries counts the subscribers remembered over all events.
	entries int
}

type shedRecord struct {
	subs map[string]verdict
	at   time.Time
}

// verdict is what became of one copy of an event.
type verdict uint8

const (
	// shedVerdict: the copy was shed; its dead letter is not known stored.
	shedVerdict verdict = iota + 1
	// storedVerdict: the copy was stored in DELIVERIES (or RETRIES).
	storedVerdict
	// deadVerdict: the copy was shed and its dead letter stored: fanned
	// out again, neither is published again (past the DLQ's duplicate
	// window a second dead letter would be a second entry, and a second
	// delivery on replay).
	deadVerdict
)

// storedMost bounds the stored copies remembered over all events (an event
// to 10,000 subscribers handed back holds 10,000): past it, no more are
// remembered, and a copy published again relies on DELIVERIES' duplicate
// window, as on another relay.
const storedMost = 1_000_000

// shedMemoryMost bounds the events remembered; past it the oldest (whose
// events were most likely acked by another relay) are forgotten.
const shedMemoryMost = 65_536

// shedMemoryFor is how long an event is remembered at most: its ack wait
// is far shorter, and an event not acked by then went to another relay.
const shedMemoryFor = 10 * time.Minute

// record notes that seq's copy for subscriber was shed.
func (s *shedMemory) record(seq uint64, subscriber string, now time.Time) {
	s.note(seq, subscriber, shedVerdict, now)
}

// recordStored notes that seq's copy for subscriber was stored, for an
// event handed back; false when the memory is full and it was not.
func (s *shedMemory) recordStored(seq uint64, subscriber string, now time.Time) bool {
	return s.recordDone(seq, subscriber, storedVerdict, now)
}

// recordDead notes that seq's copy for subscriber was shed and its dead
// letter stored, for an event handed back; false when the memory is full
// and it was not (the dead letter, published again, then relies on the
// DLQ's duplicate window).
func (s *shedMemory) recordDead(seq uint64, subscriber string, now time.Time) bool {
	return s.recordDone(seq, subscriber, deadVerdict, now)
}

func (s *shedMemory) recordDone(seq uint64, subscriber string, v verdict, now time.Time) bool {
	s.mu.Lock()
	full := s.entries >= storedMost
	s.mu.Unlock()
	if full {
		return false
	}
	s.note(seq, subscriber, v, now)
	return true
}

func (s *shedMemory) note(seq uint64, subscriber string, v verdict, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[uint64]shedRecord{}
	}
	r, ok := s.m[seq]
	if !ok {
		if len(s.m) >= shedMemoryMost {
			s.pruneLocked(now)
		}
		r = shedRecord{subs: map[string]verdict{}, at: now}
		s.m[seq] = r
	}
	if _, had := r.subs[subscriber]; !had {
		s.entries++
	}
	r.subs[subscriber] = v
}

// shed reports whether seq's copy for subscriber was shed before.
func (s *shedMemory) shed(seq uint64, subscriber string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[seq].subs[subscriber] == shedVerdict
}

// done tells what of seq's copy for subscriber was stored before: the copy
// (storedVerdict), its dead letter (deadVerdict), or neither (0, or
// shedVerdict: shed, its dead letter not known stored).
func (s *shedMemory) done(seq uint64, subscriber string) verdict {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[seq].subs[subscriber]
}

// forget drops an event once it is acked.
func (s *shedMemory) forget(seq uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropLocked(seq)
}

func (s *shedMemory) dropLocked(seq uint64) {
	if r, ok := s.m[seq]; ok {
		s.entries -= len(r.subs)
		delete(s.m, seq)
	}
}

// pruneLocked forgets the events older than shedMemoryFor, and if that is
// not enough, the older half.
func (s *shedMemory) pruneLocked(now time.Time) {
	for seq, r := range s.m {
		if now.Sub(r.at) > shedMemoryFor {
			s.dropLocked(seq)
		}
	}
	if len(s.m) < shedMemoryMost {
		return
	}
	var newest uint64
	for seq := range s.m {
		newest = max(newest, seq)
	}
	for seq := range s.m {
		if seq < newest-uint64(shedMemoryMost/2) {
			s.dropLocked(seq)
		}
	}
}
