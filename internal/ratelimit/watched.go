package ratelimit

import "time"

// Watched returns a copy of the entries the watch of [Shared.Follow] holds,
// by subscriber id, and the server's time as this relay estimates it, so
// that the metrics can report every subscriber's pause, breaker and rate in
// force without reading the bucket. ok is false while the watch is not
// running or has not delivered the bucket's content yet: the entries may
// then be missing or stale, and none are returned.
func (s *Shared) Watched() (entries map[string]State, now time.Time, ok bool) {
	if !s.following.Load() {
		return nil, time.Time{}, false
	}
	s.mu.Lock()
	entries = make(map[string]State, len(s.latest))
	for id, e := range s.latest {
		entries[id] = e.state
	}
	s.mu.Unlock()
	return entries, s.estimateNow(), true
}

// PausedUntil is the end of the subscriber's pause in the entry the watch
// of [Shared.Follow] last delivered (the server's clock), zero when it holds
// none: whether a pause another relay stored outlasts one this relay knows
// of, read without a request to the bucket.
func (s *Shared) PausedUntil(id string) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.latest[id]; ok {
		return e.state.PausedUntil
	}
	return time.Time{}
}
