package ratelimit

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// entry is the last value of one key of the bucket, as the watch saw it.
type entry struct {
	state   State
	rev     uint64
	written time.Time // the entry's server timestamp
}

// blocks reports whether st holds a pause, an open circuit or a probe that
// has not ended at server time now.
func blocks(st State, now time.Time) bool {
	return now.Before(st.PausedUntil) || now.Before(st.OpenUntil) || now.Before(st.ProbeUntil)
}

// followRestart is how long Follow waits before it watches again after the
// watch failed.
const followRestart = time.Second

// Follow watches the relay_ratelimit bucket until ctx is cancelled, so that
// this relay learns every entry from one watch instead of reading the
// subscriber's entry each time a lease runs out: while it runs, an
// unlimited subscriber costs no KV operation at all, a rate-limited one
// only its lease writes (a stale entry loses the compare-and-set and is then
// read), and a pause or an open circuit stored by another relay ends this
// relay's lease within milliseconds rather than at its end. Until the watch
// has delivered the bucket's content, and while it is down, the limiter
// reads entries as it did without it. It returns nil once ctx is cancelled.
func (s *Shared) Follow(ctx context.Context, log *slog.Logger) error {
	if log == nil {
		log = slog.Default()
	}
	for {
		err := s.follow(ctx)
		s.following.Store(false)
		if ctx.Err() != nil {
			return nil
		}
		log.Warn("ratelimit: watch of the bucket ended, reading entries until it is back", "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(followRestart):
		}
	}
}

// Following reports whether the watch of Follow is running and has
// delivered the bucket's content, so that entries are learnt from it
// rather than read.
func (s *Shared) Following() bool { return s.following.Load() }

// follow runs one watch until it fails or ctx is cancelled.
func (s *Shared) follow(ctx context.Context) error {
	w, err := s.kv.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("%w: watching: %w", ErrBucket, err)
	}
	defer func() { _ = w.Stop() }()
	s.mu.Lock()
	clear(s.latest)
	s.mu.Unlock()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return fmt.Errorf("%w: the watch ended (connection closed)", ErrBucket)
			}
			if e == nil { // the bucket's content has arrived
				s.following.Store(true)
				continue
			}
			s.observed(e)
		}
	}
}

// observed folds one entry from the watch into what this relay knows, and
// ends the lease of a subscriber that the entry blocks.
func (s *Shared) observed(e jetstream.KeyValueEntry) {
	id := e.Key()
	if e.Operation() != jetstream.KeyValuePut {
		s.mu.Lock()
		delete(s.latest, id)
		s.mu.Unlock()
		return
	}
	var st State
	if err := json.Unmarshal(e.Value(), &st); err != nil {
		// Not ours (written by hand): the next read starts it over.
		s.mu.Lock()
		delete(s.latest, id)
		s.mu.Unlock()
		return
	}
	s.mu.Lock()
	prev, had := s.latest[id]
	if had && prev.rev >= e.Revision() {
		s.mu.Unlock()
		return
	}
	s.latest[id] = entry{state: st, rev: e.Revision(), written: e.Created()}
	sub := s.subs[id]
	s.mu.Unlock()
	if sub == nil {
		return
	}
	now := s.estimateNow()
	if blocks(st, now) && (!had || !blocks(prev.state, now) || prev.state.PausedUntil != st.PausedUntil || prev.state.OpenUntil != st.OpenUntil) {
		sub.interrupted.Store(true)
	}
}

// estimateNow is the server's time as last calibrated, without the
// recalibration serverNow may do.
func (s *Shared) estimateNow() time.Time {
	s.calMu.Lock()
	defer s.calMu.Unlock()
	return s.estimate()
}

// load brings sub up to the subscriber's entry: the one the watch last saw
// when it is running and fresh is false, else one read from the bucket. A
// key the watch does not hold is a full bucket, as a missing key is.
func (s *Shared) load(ctx context.Context, id string, sub *subscriber, l Limit, fresh bool) error {
	if fresh || !s.following.Load() {
		return s.read(ctx, id, sub, l)
	}
	s.mu.Lock()
	e, ok := s.latest[id]
	s.mu.Unlock()
	switch {
	case ok && e.rev > sub.rev:
		sub.state, sub.rev, sub.written = e.state, e.rev, e.written
	case !ok && sub.rev == 0:
		sub.state, sub.written = State{Tokens: l.capacity()}, s.serverNow(ctx)
	}
	return nil
}
