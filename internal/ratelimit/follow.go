package ratelimit

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/sourcegraph/conc"

	"github.com/relay-dev/relay/streams"
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
	// The watch hands over every entry stored before it began, then every
	// one after: once it has, it is fresh as of its start.
	began := s.opts.Clock.Now()
	w, err := s.kv.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("%w: watching: %w", ErrBucket, err)
	}
	defer func() { _ = w.Stop() }()
	s.mu.Lock()
	clear(s.latest)
	s.shown, s.pending = 0, nil
	s.mu.Unlock()
	var checks conc.WaitGroup
	checkCtx, stopChecks := context.WithCancel(ctx)
	checks.Go(func() { s.checkLoop(checkCtx) })
	defer func() { stopChecks(); checks.Wait() }()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return fmt.Errorf("%w: the watch ended (connection closed)", ErrBucket)
			}
			if e == nil { // the bucket's content has arrived
				s.fresh(began)
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
	s.fold(e)
	// Shown once folded: a check that finds it shown finds it in latest.
	s.showed(e.Revision())
}

// fold is observed for what this relay knows of the entry's subscriber.
func (s *Shared) fold(e jetstream.KeyValueEntry) {
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
	if sub.circuitChanged(st.OpenUntil, e.Revision()) {
		// Another relay opened or closed it (or this relay's watch shows
		// it first): the window starts afresh at the next outcome.
		sub.circuitMoved.Store(true)
		if st.OpenUntil.IsZero() {
			sub.closed.Store(true)
		}
	}
	now := s.estimateNow()
	if blocks(st, now) && (!had || !blocks(prev.state, now) || prev.state.PausedUntil != st.PausedUntil || prev.state.OpenUntil != st.OpenUntil) {
		sub.interrupted.Store(true)
	}
	if had && blocks(prev.state, now) && !blocks(st, now) {
		// Ended by a write, not by time: a probe's success on another
		// relay, or Reset. The limiter first, then the lanes, so that
		// the lanes find it ended when they ask.
		sub.lifted.Store(true)
		s.mu.Lock()
		s.lifted[id] = struct{}{}
		s.mu.Unlock()
		select {
		case s.liftc <- struct{}{}:
		default:
		}
	}
}

// Lifted is signalled when the watch has seen a subscriber's pause or open
// circuit end by a write (a probe's success on another relay, or [Reset])
// rather than by time: the lanes that wait it out take the subscribers
// with TakeLifted and send again at once.
func (s *Shared) Lifted() <-chan struct{} { return s.liftc }

// TakeLifted returns the subscribers whose pause or open circuit ended by
// a write since it was last called.
func (s *Shared) TakeLifted() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, 0, len(s.lifted))
	for id := range s.lifted {
		ids = append(ids, id)
	}
	clear(s.lifted)
	return ids
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
		sub.circuitSeen(e.state, e.rev)
		sub.state, sub.rev, sub.written = e.state, e.rev, e.written
	case !ok && sub.rev == 0:
		sub.state, sub.written = State{Tokens: l.capacity()}, s.serverNow(ctx)
	}
	return nil
}

// FreshFor is how old the proof that the watch is fresh may grow before
// an unlimited subscriber's lease is no longer renewed on the watch alone
// (see [Shared.stale]).
const FreshFor = time.Second

// How the watch's freshness is kept (see [Shared.stale]).
const (
	// freshAsk is how old the proof may grow, while an unlimited
	// subscriber's lease is renewed, before a check is asked for: at most
	// one check every freshAsk for them all.
	freshAsk = LeaseTTL
	// checkTimeout bounds one check, well within FreshFor: a check lost on
	// its way is followed by the next before the proof runs out.
	checkTimeout = FreshFor / 2
)

// stale reports whether an unlimited subscriber's lease must not be renewed
// on the watch alone. A rate-limited subscriber needs no such proof: its
// next lease is a compare-and-set, which fails on an entry a pause changed,
// whatever the watch shows. An unlimited one asks the bucket nothing, so
// the watch is all it knows: its lease is renewed on the watch only while
// the watch is known to have handed over every entry stored until FreshFor
// ago, which a check proves again every freshAsk while such leases are
// renewed (one request a relay, whatever the number of subscribers and
// requests). Past that (after an idle second, a watch behind, a server slow
// to answer the check), each renewal reads the subscriber's entry, as it
// does while the watch is down: a pause then holds every relay within
// FreshFor and a lease of being stored, however far behind its watch. It
// never waits: the checks are the check loop's.
func (s *Shared) stale() bool {
	age := s.age()
	if age > freshAsk {
		s.askFor(s.opts.Clock.Now().Add(-freshAsk))
	}
	return age > FreshFor
}

// since is t in nanoseconds since the limiter's epoch.
func (s *Shared) since(t time.Time) int64 { return int64(t.Sub(s.epoch)) }

// age is how long ago the watch was last known fresh.
func (s *Shared) age() time.Duration {
	return time.Duration(s.since(s.opts.Clock.Now()) - s.freshAt.Load())
}

// fresh records that the watch has handed over every entry stored until at.
func (s *Shared) fresh(at time.Time) {
	raise(&s.freshAt, s.since(at))
}

// askFor asks the check loop to prove the watch fresh until t, unless a
// check asked since is on its way or done.
func (s *Shared) askFor(t time.Time) {
	raise(&s.need, s.since(t))
	select {
	case s.ask <- struct{}{}:
	default: // a check is already asked for
	}
}

// raise sets v to n if n is larger, and reports whether it did.
func raise(v *atomic.Int64, n int64) bool {
	for {
		old := v.Load()
		if n <= old {
			return false
		}
		if v.CompareAndSwap(old, n) {
			return true
		}
	}
}

// proof is a check the watch has not caught up with: once it shows rev,
// it is fresh as of asked.
type proof struct {
	rev   uint64
	asked time.Time
}

// maxPending bounds the checks that wait for the watch: a watch more than
// that many checks behind is more than FreshFor behind, and the oldest
// proofs are of no more use.
const maxPending = 16

// showed records a revision the watch handed over, and the freshness of the
// checks that waited for it.
func (s *Shared) showed(rev uint64) {
	s.mu.Lock()
	s.shown = max(s.shown, rev)
	var at time.Time
	for len(s.pending) > 0 && s.pending[0].rev <= s.shown {
		at = s.pending[0].asked
		s.pending = s.pending[1:]
	}
	s.mu.Unlock()
	if !at.IsZero() {
		s.fresh(at)
	}
}

// checkLoop makes the checks askFor asks for, one at a time, until ctx
// ends. A check asked at or after the time a caller needs covers it, so
// callers that wait together cost one check, and checks follow one another
// no faster than the server answers them.
func (s *Shared) checkLoop(ctx context.Context) {
	var checked int64 // when the last check was asked
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.ask:
		}
		if checked >= s.need.Load() {
			continue
		}
		checked = s.since(s.opts.Clock.Now())
		s.check(ctx)
	}
}

// check asks the bucket's stream for its last revision: once the watch
// has handed it over, the watch is fresh as of when the check was asked
// (subscribers.Live.Sync does the same for the subscriber view). A check
// that fails proves nothing, and the next ask tries again.
func (s *Shared) check(ctx context.Context) {
	asked := s.opts.Clock.Now()
	s.checks.Add(1)
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	last, found, err := streams.SeqOf(ctx, s.nc, "KV_"+streams.RateLimitBucket, streams.DirectGet{LastBySubj: ">"}, s.leader)
	if err != nil {
		return
	}
	s.mu.Lock()
	shown := !found || s.shown >= last
	if !shown {
		if len(s.pending) == maxPending {
			s.pending = s.pending[1:]
		}
		s.pending = append(s.pending, proof{rev: last, asked: asked})
	}
	s.mu.Unlock()
	if shown {
		s.fresh(asked)
	}
}
