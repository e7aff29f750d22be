package fanout

import (
	"sync"
	"time"
)

// shedMemory remembers, by EVENTS sequence, which subscribers' copies of an
// event this relay dead-lettered as backlog, until the event is acked. An
// event handed back (a copy refused for want of room, a PubAck lost) is
// fanned out again: the same verdict must be given again, or a copy shed the
// first time would be queued the second (a delivery both sent and in the
// DLQ), and a copy queued the first time shed the second. A remembered
// subscriber is shed again (its dead letter's id makes the second a
// duplicate); any other is queued (its copy id makes the second a
// duplicate). An event handed to another relay is queued there: the memory
// is this relay's alone.
type shedMemory struct {
	mu sync.Mutex
	m  map[uint64]shedRecord
}

type shedRecord struct {
	subs map[string]bool
	at   time.Time
}

// shedMemoryMost bounds the events remembered; past it the oldest (whose
// events were most likely acked by another relay) are forgotten.
const shedMemoryMost = 65_536

// shedMemoryFor is how long an event is remembered at most: its ack wait
// is far shorter, and an event not acked by then went to another relay.
const shedMemoryFor = 10 * time.Minute

// record notes that seq's copy for subscriber was shed.
func (s *shedMemory) record(seq uint64, subscriber string, now time.Time) {
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
		r = shedRecord{subs: map[string]bool{}, at: now}
		s.m[seq] = r
	}
	r.subs[subscriber] = true
}

// shed reports whether seq's copy for subscriber was shed before.
func (s *shedMemory) shed(seq uint64, subscriber string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[seq].subs[subscriber]
}

// forget drops an event once it is acked.
func (s *shedMemory) forget(seq uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, seq)
}

// pruneLocked forgets the events older than shedMemoryFor, and if that is
// not enough, the older half.
func (s *shedMemory) pruneLocked(now time.Time) {
	for seq, r := range s.m {
		if now.Sub(r.at) > shedMemoryFor {
			delete(s.m, seq)
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
			delete(s.m, seq)
		}
	}
}
