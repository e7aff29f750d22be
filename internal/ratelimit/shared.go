package ratelimit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/internal/clock"
	"github.com/relay-dev/relay/streams"
)

// Options tune a Shared limiter. Zero fields take the defaults.
type Options struct {
	// Clock defaults to clock.Real.
	Clock clock.Clock
	// MaxPause bounds a pause (--max-pause). Defaults to 1h.
	MaxPause time.Duration
	// FailureThreshold is the Consecutive of a subscriber's [Breaker] that
	// gives none. Defaults to DefaultConsecutive.
	FailureThreshold int
	// Cooldown is the first cool-down of an open breaker; each one in a row
	// doubles, up to MaxCooldown. Default DefaultCooldown and
	// DefaultMaxCooldown.
	Cooldown, MaxCooldown time.Duration
	// ProbeTimeout is how long a claimed probe keeps other relays from
	// probing; past it the probing relay is taken for dead. Defaults to 1m.
	ProbeTimeout time.Duration
	// CalibrateEvery is how often the server's clock is read again, which
	// corrects a host clock that was stepped. Defaults to 30s; negative
	// never recalibrates (tests that drive Clock by hand).
	CalibrateEvery time.Duration
	// Notify, when set, is told of the pauses and circuit changes this
	// relay's writes made.
	Notify Notifier
}

// probeRecheck is how often a relay looks whether another relay's probe
// closed the breaker.
const probeRecheck = 500 * time.Millisecond

// maxOps bounds the KV requests one relay has on their way to the bucket.
// Every subscriber's scheduler asks its own limiter, so 10,000 subscribers
// due at once would send as many requests together: on a server slowed by a
// loaded host they waited out their timeouts in its queue, were sent again,
// and none got through (nothing delivered for 30 s). Queued here instead,
// they go as fast as the server answers, and none waits in its queue long
// enough to time out.
const maxOps = 64

// maxCAS bounds the compare-and-set retries of one call; past it the call
// reports a short wait (Reserve) or gives up quietly (Observe), never an
// error, since another relay's write is what beat it.
const maxCAS = 8

// Shared is the Limiter every relay on a cluster shares through the
// relay_ratelimit KV bucket.
type Shared struct {
	kv     jetstream.KeyValue
	stream jetstream.Stream
	nc     *nats.Conn
	opts   Options
	// leader is set when the bucket is replicated, or allows no direct get:
	// a freshness check asks its stream's leader (see [Shared.check]).
	leader bool

	mu   sync.Mutex
	subs map[string]*subscriber
	// latest holds the entries the watch saw (see Follow), valid while
	// following is set.
	latest    map[string]entry
	following atomic.Bool
	// shown is the highest revision the watch has handed over, and pending
	// the checks whose revision it has not reached yet, oldest first (see
	// [Shared.check]); both under mu.
	shown   uint64
	pending []proof
	// freshAt is when, by the local clock, the watch is known to have
	// handed over every entry stored until; need is when a caller wants it
	// known until, and ask wakes the check that proves it (see
	// [Shared.check]). Both are nanoseconds since epoch, the limiter's
	// start, so that they keep the clock's monotonic reading.
	epoch         time.Time
	freshAt, need atomic.Int64
	ask           chan struct{}

	// The server's clock as last read: calServer at the local instant
	// calLocal. Elapsed time is measured on the local monotonic clock from
	// calLocal, so a step of the host's wall clock changes nothing.
	calMu     sync.Mutex
	calServer time.Time
	calLocal  time.Time
	// calTop bounds the server's clock at calLocal from above: the time
	// read plus the read's round trip (the server stamped it within the
	// round trip), or an earlier reading's bound if that was tighter. A
	// pause is stored from it, so that it lasts its whole Retry-After on
	// every relay, however late this relay's estimate (see serverLatest).
	calTop time.Time

	// lifted holds the subscribers whose pause or open circuit the watch
	// saw end by a write (a probe's success on another relay, or Reset),
	// for the lanes to take (see [Shared.TakeLifted]); under mu. liftc
	// wakes them.
	lifted map[string]struct{}
	liftc  chan struct{}

	writes, conflicts, reads, checks atomic.Int64

	// ops holds a token per KV request on its way (see maxOps).
	ops chan struct{}
}

// subscriber is what one relay remembers of one subscriber.
type subscriber struct {
	mu    sync.Mutex
	lease int // tokens left in the lease; math.MaxInt when unlimited
	// The lease's tokens are spent until leaseEnds, local time (see grant).
	leaseEnds time.Time
	// awaitRev, when not zero, is the revision of a late lease's own write:
	// the lease is not spent before the watch has shown it (see grant).
	awaitRev uint64
	// Known blocks, in local time, from the last entry read or written.
	pausedUntil time.Time
	openUntil   time.Time
	probing     bool // this relay holds the probe
	// interrupted is set by the watch when another relay stored a pause or
	// an open circuit: the lease ends at the next Reserve.
	interrupted atomic.Bool
	// closed is set by the watch when another relay closed the circuit:
	// the open circuit known locally ends at the next Reserve.
	closed atomic.Bool
	// lifted is set by the watch when an entry that blocked the subscriber
	// was replaced by one that does not (Reset, or another relay's probe):
	// the pause and open circuit known locally end at the next Reserve.
	lifted    atomic.Bool
	successes int // successes in the current AIMD window
	// win counts this relay's outcomes for the breaker and the share in
	// flight (see [Shared.Observe]); circuitMoved is set by the watch
	// when another relay opened or closed the circuit, which starts it
	// afresh.
	win          window
	circuitMoved atomic.Bool
	// gen is the circuit's generation as this relay knows it: it moves on
	// each time an entry read, written or watched opens or closes the
	// circuit (see [subscriber.circuitChanged]). A request is stamped with
	// it (Decision.Gen), and an outcome of an older one is not counted:
	// requests hanging against a dead receiver that time out after the
	// probe closed the circuit say nothing of the receiver since. circuit
	// and circuitRev, under circMu (never held across I/O), are the
	// circuit's OpenUntil (zero: closed) and the revision of the entry it
	// was last seen in.
	gen        atomic.Uint64
	circMu     sync.Mutex
	circuit    time.Time
	circuitRev uint64
	// allowed is win.allowed as of the last outcome counted (its float64
	// bits), for [Shared.InFlight] to read without sub.mu: the lanes ask it
	// under their scheduler's lock, and Observe holds sub.mu across its
	// compare-and-set. allowedAt is the bucket it was judged in, and
	// span the bucket's span in nanoseconds: read later, a share judged
	// before a whole window without outcomes recovers by the buckets
	// since (see [recovered]), as the next outcome would find it.
	allowed   atomic.Uint64
	allowedAt atomic.Int64
	span      atomic.Int64
	// The last entry seen, for compare-and-set without a read.
	state   State
	rev     uint64
	written time.Time // server time of that entry
}

// NewShared opens the relay_ratelimit bucket, which `relay run` creates.
func NewShared(ctx context.Context, js jetstream.JetStream, opts Options) (*Shared, error) {
	kv, err := js.KeyValue(ctx, streams.RateLimitBucket)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBucket, err)
	}
	stream, err := js.Stream(ctx, "KV_"+streams.RateLimitBucket)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBucket, err)
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real
	}
	if opts.MaxPause <= 0 {
		opts.MaxPause = time.Hour
	}
	if opts.FailureThreshold <= 0 {
		opts.FailureThreshold = DefaultConsecutive
	}
	if opts.Cooldown <= 0 {
		opts.Cooldown = DefaultCooldown
	}
	if opts.MaxCooldown <= 0 {
		opts.MaxCooldown = DefaultMaxCooldown
	}
	if opts.ProbeTimeout <= 0 {
		opts.ProbeTimeout = time.Minute
	}
	if opts.CalibrateEvery == 0 {
		opts.CalibrateEvery = 30 * time.Second
	}
	cfg := stream.CachedInfo().Config
	s := &Shared{kv: kv, stream: stream, nc: js.Conn(), opts: opts, subs: make(map[string]*subscriber), latest: make(map[string]entry),
		ops: make(chan struct{}, maxOps), ask: make(chan struct{}, 1), leader: cfg.Replicas > 1 || !cfg.AllowDirect,
		lifted: make(map[string]struct{}), liftc: make(chan struct{}, 1)}
	s.epoch = opts.Clock.Now()
	if err := s.calibrate(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// Stats counts the KV operations, for benchmarks and `relay status`.
type Stats struct {
	Reads, Writes, Conflicts int64
	// Checks counts the requests that proved the watch fresh for
	// unlimited subscribers (see FreshFor): one at a time, at most one
	// every LeaseTTL.
	Checks int64
	// Subscribers is how many subscribers this relay holds a lease or
	// flow state of, Watched how many entries of the bucket it holds from
	// its watch: both follow the subscriber set (see [Shared.Forget]).
	Subscribers, Watched int
}

// Stats returns the KV operations made so far, and the sizes of what this
// relay holds.
func (s *Shared) Stats() Stats {
	s.mu.Lock()
	subs, watched := len(s.subs), len(s.latest)
	s.mu.Unlock()
	return Stats{Reads: s.reads.Load(), Writes: s.writes.Load(), Conflicts: s.conflicts.Load(), Checks: s.checks.Load(),
		Subscribers: subs, Watched: watched}
}

// Forget drops what this relay holds of the subscribers keep says are
// gone: their leases and flow state, and the bucket's entries its watch
// saw (the bucket's own 24 h expiry deletes no entry the watch would
// see). An entry that pauses or opens the circuit now is kept until it
// no longer does: a subscriber added again under its id within its pause
// is still held, even when it is unlimited (which asks the bucket
// nothing). The lanes call it as they forget their own.
func (s *Shared) Forget(keep func(id string) bool) {
	now := s.estimateNow()
	s.mu.Lock()
	defer s.mu.Unlock()
	for id := range s.subs {
		if !keep(id) {
			delete(s.subs, id)
		}
	}
	for id, e := range s.latest {
		if !keep(id) && !blocks(e.state, now) {
			delete(s.latest, id)
		}
	}
	for id := range s.lifted {
		if !keep(id) {
			delete(s.lifted, id)
		}
	}
}

// calibrate reads the server's clock from a stream info response. The
// time it gives is a lower bound of the server's at the moment the response
// arrives (the server stamped it before), so the server time relay
// estimates is never ahead of the real one.
func (s *Shared) calibrate(ctx context.Context) error {
	sent := s.opts.Clock.Now()
	info, err := s.stream.Info(ctx)
	if err != nil {
		return fmt.Errorf("%w: reading the server's time: %w", ErrBucket, err)
	}
	now := s.opts.Clock.Now()
	s.calMu.Lock()
	defer s.calMu.Unlock()
	top := info.TimeStamp.Add(now.Sub(sent))
	if !s.calLocal.IsZero() {
		// A reading slowed by a stall bounds the clock loosely: the
		// tighter bound of the last one, carried forward, stays.
		if last := s.calTop.Add(now.Sub(s.calLocal)); last.Before(top) {
			top = laterOf(last, info.TimeStamp)
		}
	}
	s.calServer, s.calLocal, s.calTop = info.TimeStamp, now, top
	return nil
}

// serverNow estimates the server's time, recalibrating when it is due.
func (s *Shared) serverNow(ctx context.Context) time.Time {
	s.calMu.Lock()
	due := s.opts.CalibrateEvery > 0 && s.opts.Clock.Now().Sub(s.calLocal) > s.opts.CalibrateEvery
	s.calMu.Unlock()
	if due {
		_ = s.calibrate(ctx) // on failure the old reading stays
	}
	s.calMu.Lock()
	defer s.calMu.Unlock()
	return s.estimate()
}

// estimate is the server time now; s.calMu is held.
func (s *Shared) estimate() time.Time {
	return s.calServer.Add(s.opts.Clock.Now().Sub(s.calLocal))
}

// serverLatest is a time the server's clock has not passed yet: the estimate's
// upper bound (see calTop), never below the estimate (which entries' times
// may have raised) nor more than maxClockSpread above it, so that a
// reading of the clock made through a stall lengthens no pause by more.
func (s *Shared) serverLatest() time.Time {
	s.calMu.Lock()
	defer s.calMu.Unlock()
	est := s.estimate()
	top := s.calTop.Add(s.opts.Clock.Now().Sub(s.calLocal))
	return laterOf(est, earlierOf(top, est.Add(maxClockSpread)))
}

// maxClockSpread is the most a pause is lengthened by the spread between
// the estimate of the server's clock and its upper bound.
const maxClockSpread = time.Second

// learn tightens the estimate with an entry's timestamp: the entry was
// written before it was read, so the server's time is at least that.
func (s *Shared) learn(written time.Time) {
	s.calMu.Lock()
	defer s.calMu.Unlock()
	if est := s.estimate(); written.After(est) {
		s.calServer = s.calServer.Add(written.Sub(est))
	}
}

// local converts a server time to this relay's clock, keeping the local
// clock's monotonic reading so that later comparisons ignore wall steps.
func (s *Shared) local(server time.Time) time.Time {
	if server.IsZero() {
		return server
	}
	s.calMu.Lock()
	defer s.calMu.Unlock()
	return s.opts.Clock.Now().Add(server.Sub(s.estimate()))
}

func (s *Shared) subscriber(id string) *subscriber {
	s.mu.Lock()
	defer s.mu.Unlock()
	sub, ok := s.subs[id]
	if !ok {
		sub = &subscriber{}
		// From 1: an outcome without a generation (0) is always counted.
		sub.gen.Store(1)
		s.subs[id] = sub
	}
	return sub
}

// read loads a subscriber's entry into sub; a missing key is a full bucket.
func (s *Shared) read(ctx context.Context, id string, sub *subscriber, l Limit) error {
	s.reads.Add(1)
	e, err := s.kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		sub.state, sub.rev, sub.written = State{Tokens: l.capacity()}, 0, s.serverNow(ctx)
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w: reading %s: %w", ErrBucket, id, err)
	}
	var st State
	if err := json.Unmarshal(e.Value(), &st); err != nil {
		// A value written by hand that is not ours: start over from a full
		// bucket rather than stall the subscriber.
		st = State{Tokens: l.capacity()}
	}
	s.learn(e.Created())
	sub.circuitSeen(st, e.Revision())
	sub.state, sub.rev, sub.written = st, e.Revision(), e.Created()
	return nil
}

// write stores st at the revision sub last saw; false on a lost race.
func (s *Shared) write(ctx context.Context, id string, sub *subscriber, st State) (bool, error) {
	raw, err := json.Marshal(st)
	if err != nil {
		return false, err
	}
	// Whatever the write counts is counted up to st.At, which is no earlier
	// than this: the next refill starts from st.At, and the round trip of
	// the write is not lost to it.
	sent := s.serverNow(ctx)
	s.writes.Add(1)
	var rev uint64
	if sub.rev == 0 {
		rev, err = s.kv.Create(ctx, id, raw)
	} else {
		rev, err = s.kv.Update(ctx, id, raw, sub.rev)
	}
	if err != nil {
		if isRevisionMismatch(err) {
			s.conflicts.Add(1)
			return false, nil
		}
		return false, fmt.Errorf("%w: writing %s: %w", ErrBucket, id, err)
	}
	sub.circuitSeen(st, rev)
	sub.state, sub.rev = st, rev
	sub.written = sent
	return true, nil
}

// op waits for a turn among the maxOps KV requests on their way, and
// returns the func that ends it.
func (s *Shared) op(ctx context.Context) (func(), error) {
	select {
	case s.ops <- struct{}{}:
		return func() { <-s.ops }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// isRevisionMismatch recognises a lost compare-and-set: Create reports
// ErrKeyExists, Update ErrKeyRevisionMismatch (code 10071 on a
// single-replica bucket, 10164 on a replicated one).
func isRevisionMismatch(err error) bool {
	return errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch)
}

// backoff sleeps a few milliseconds of jitter after a lost race, so that
// contending relays do not retry in lockstep.
func (s *Shared) backoff(ctx context.Context, try int) {
	d := time.Duration(rand.Int64N(int64(time.Millisecond) << min(try, 4)))
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// blocked reports a pause or an open circuit known locally.
func (sub *subscriber) blocked(now time.Time) (Decision, bool) {
	if now.Before(sub.pausedUntil) {
		return Decision{Verdict: Paused, Wait: sub.pausedUntil.Sub(now)}, true
	}
	if now.Before(sub.openUntil) {
		return Decision{Verdict: CircuitOpen, Wait: sub.openUntil.Sub(now)}, true
	}
	return Decision{}, false
}

// Reserve implements Limiter. A Go is stamped with the circuit's
// generation (see [subscriber.gen]).
func (s *Shared) Reserve(ctx context.Context, id string, l Limit) (Decision, error) {
	sub := s.subscriber(id)
	sub.mu.Lock()
	defer sub.mu.Unlock()
	d, err := s.reserve(ctx, id, sub, l)
	if err == nil && d.Verdict == Go {
		d.Gen = sub.gen.Load()
	}
	return d, err
}

// reserve is Reserve with sub.mu held.
func (s *Shared) reserve(ctx context.Context, id string, sub *subscriber, l Limit) (Decision, error) {
	now := s.opts.Clock.Now()
	if sub.interrupted.Swap(false) {
		sub.lease = 0
	}
	if sub.closed.Swap(false) {
		sub.openUntil = time.Time{}
	}
	if sub.lifted.Swap(false) {
		sub.pausedUntil, sub.openUntil = time.Time{}, time.Time{}
	}
	if d, ok := sub.blocked(now); ok {
		return d, nil
	}
	if sub.probing {
		// This relay's probe is on the wire; nothing else goes until its
		// outcome is known.
		return Decision{Verdict: CircuitOpen, Wait: LeaseTTL}, nil
	}
	if sub.lease > 0 && sub.awaitRev > 0 {
		if d, wait := s.awaitWatch(id, sub, now); wait {
			return d, nil
		}
	}
	if sub.lease > 0 && now.Before(sub.leaseEnds) {
		sub.lease--
		return Decision{}, nil
	}
	for try := range maxCAS {
		d, done, err := s.reserveOnce(ctx, id, sub, l, try)
		if err != nil || done {
			return d, err
		}
		s.backoff(ctx, try)
	}
	return Decision{Verdict: Token, Wait: time.Duration(rand.Int64N(int64(10 * time.Millisecond)))}, nil
}

// reserveOnce is one compare-and-set of Reserve, in a turn among the KV
// requests on their way (see maxOps): the tokens are counted once the turn
// has come, so that the wait for it is not part of a lease's round trip.
// An unlimited subscriber whose entry the watch holds, while the watch is
// known fresh (see [Shared.stale]), makes no request (but the rare probe)
// and takes no turn: the KV requests of rate-limited ones never hold it up.
// done is false when another relay's write won.
func (s *Shared) reserveOnce(ctx context.Context, id string, sub *subscriber, l Limit, try int) (d Decision, done bool, err error) {
	judged := s.opts.Clock.Now()
	// What the watch holds is all an unlimited subscriber's lease is judged
	// on: unless the watch is known fresh, the entry is read instead.
	fresh := try > 0 || !s.following.Load() || (l.Unlimited() && s.stale())
	if !l.Unlimited() || fresh {
		release, err := s.op(ctx)
		if err != nil {
			return Decision{}, true, fmt.Errorf("%w: %s: %w", ErrBucket, id, err)
		}
		defer release()
	}
	if err := s.load(ctx, id, sub, l, fresh); err != nil {
		return Decision{}, true, err
	}
	d, st, write, c := s.decide(ctx, sub, l)
	if d.Verdict != Go {
		return d, true, nil
	}
	if !write {
		// An unlimited lease runs from when its entry was judged, however
		// long the rest took.
		c.asked = judged
		return s.grant(sub, l, d, c), true, nil
	}
	ok, err := s.write(ctx, id, sub, st)
	if err != nil {
		return Decision{}, true, err
	}
	if !ok {
		return Decision{}, false, nil
	}
	return s.grant(sub, l, d, c), true, nil
}

// counted is when a lease's tokens were counted, by the local clock: the
// refill they come from ends there, and the lease's window starts there.
type counted struct {
	asked time.Time
}

// decide looks at the entry just read and says whether a request may go,
// and what to write if so.
func (s *Shared) decide(ctx context.Context, sub *subscriber, l Limit) (Decision, State, bool, counted) {
	st := sub.state
	server := s.serverNow(ctx)
	c := counted{asked: s.opts.Clock.Now()}
	sub.pausedUntil = s.local(st.PausedUntil)
	sub.openUntil = time.Time{}
	if server.Before(st.PausedUntil) {
		return Decision{Verdict: Paused, Wait: st.PausedUntil.Sub(server)}, st, false, c
	}
	probe := false
	switch st.CircuitAt(server) {
	case Open:
		sub.openUntil = s.local(st.OpenUntil)
		return Decision{Verdict: CircuitOpen, Wait: st.OpenUntil.Sub(server)}, st, false, c
	case HalfOpen:
		if server.Before(st.ProbeUntil) {
			// Another relay's probe is on the wire; its answer usually comes
			// within a request timeout, so look again soon rather than at
			// ProbeUntil, which only covers a prober that died.
			return Decision{Verdict: CircuitOpen, Wait: min(st.ProbeUntil.Sub(server), probeRecheck)}, st, false, c
		}
		st.ProbeUntil = server.Add(s.opts.ProbeTimeout)
		probe = true
	}
	if l.Unlimited() {
		return Decision{Probe: probe}, st, probe, c
	}
	rate := EffectiveRate(st, l)
	n := LeaseSize(rate, l)
	if probe {
		n = 1
	}
	from := refillFrom(st, sub.written)
	tokens := Refill(st.Tokens, from, server, rate, l)
	if tokens < float64(n)-epsilon {
		return Decision{Verdict: Token, Wait: WaitFor(tokens, n, rate)}, st, false, c
	}
	st.Tokens = tokens - float64(n)
	st.At = laterOf(from, server)
	return Decision{Probe: probe}, st, true, c
}

// grant turns a successful write into a lease. Its tokens were counted up
// to the moment the relay asked, and the next refill starts there, so the
// round trip of the compare-and-set costs no refill: they are spent from
// that moment until LeaseTTL later, which bounds the cap's slack to one
// lease. A lease whose answer came after that window (a round trip longer
// than LeaseTTL) is spent from its answer on instead, and this relay's next
// refill starts from the answer too: what was counted during the round
// trip is given up, so that spending late never adds to the cap's slack.
//
// A late lease is also the one a pause can overtake: another relay may
// store a pause after this lease's write and long before its answer is
// read (a host starved of CPU, a slow link), and the watch that would tell
// of it may be further behind than the answer. So while the watch follows
// the bucket, a late lease is not spent before the watch has shown its own
// write: a pause stored after it comes next on the same watch, and ends
// the lease as soon as it is shown (see [Shared.observed]). The relay so
// stops within its watch's delay of the pause, which on a slow link is
// about half a round trip: no relay can learn of it sooner. (Waiting for
// a proof that the watch holds everything stored until the answer would
// take one more round trip, past the window, and the window cannot move
// later without adding to the cap's slack: other relays refill from the
// lease's count.) Waiting takes nothing from the window but time: it still
// ends LeaseTTL after the answer, what is left then is given up, and the
// next refill starts from the wait's end, so that waiting never adds to the
// slack either.
func (s *Shared) grant(sub *subscriber, l Limit, d Decision, c counted) Decision {
	now := s.opts.Clock.Now()
	sub.leaseEnds = c.asked.Add(LeaseTTL)
	sub.awaitRev = 0
	switch {
	case d.Probe:
		sub.lease = 0
		sub.probing = true
		return d
	case l.Unlimited():
		sub.lease = math.MaxInt
		return d
	}
	sub.lease = LeaseSize(EffectiveRate(sub.state, l), l)
	if !now.Before(sub.leaseEnds) {
		sub.leaseEnds = now.Add(LeaseTTL)
		sub.written = laterOf(sub.written, s.estimateNow())
		if s.following.Load() {
			sub.awaitRev = sub.rev
			return Decision{Verdict: Token, Wait: awaitWatchPoll}
		}
	}
	sub.lease--
	return d
}

// awaitWatchPoll is how often a late lease looks whether the watch has
// shown its write (see grant).
const awaitWatchPoll = 5 * time.Millisecond

// awaitWatch looks whether the watch has shown a late lease's own write.
// Once it has, the lease is spent as any other, unless the entry the watch
// holds now blocks the subscriber (the pause that overtook it): then the
// lease is dropped, and the next look reads the entry and holds. wait is
// true, with the decision to return, while the watch has not shown it and
// the lease's window is open; once the window has closed, or the watch
// stopped, the lease is given up.
func (s *Shared) awaitWatch(id string, sub *subscriber, now time.Time) (Decision, bool) {
	s.mu.Lock()
	e, ok := s.latest[id]
	s.mu.Unlock()
	switch {
	case ok && e.rev >= sub.awaitRev:
		sub.awaitRev = 0
		if blocks(e.state, s.estimateNow()) {
			sub.lease = 0
		}
		// Its tokens are spent from now on: the next refill starts here
		// too, or what it counts during the wait would be spent beside
		// them, over the cap's one lease of slack.
		sub.written = laterOf(sub.written, s.estimateNow())
		return Decision{}, false
	case now.Before(sub.leaseEnds) && s.following.Load():
		return Decision{Verdict: Token, Wait: min(awaitWatchPoll, sub.leaseEnds.Sub(now))}, true
	}
	sub.awaitRev, sub.lease = 0, 0
	return Decision{}, false
}

// count adds an attempt's outcome to this relay's window of the
// subscriber, and reports whether it opens the circuit: a failure that
// makes the window trip its breaker while the circuit is not known open
// here already. The window starts afresh whenever the circuit opened or
// closed since (see [subscriber.circuitSeen]). sub.mu is held.
func (s *Shared) count(sub *subscriber, l Limit, r Result, now time.Time) bool {
	if sub.circuitMoved.Swap(false) {
		sub.win.reset()
	}
	if !r.Success && !r.Failure {
		return false
	}
	if r.Gen != 0 && r.Gen != sub.gen.Load() && !r.Probe {
		// A request sent before the circuit last opened or closed.
		return false
	}
	b := l.Breaker.WithDefaults(s.opts.FailureThreshold)
	span := b.bucketSpan()
	sub.win.add(int64(now.Sub(s.epoch)/span), span, b, r.Failure)
	sub.allowed.Store(math.Float64bits(sub.win.allowed))
	sub.allowedAt.Store(sub.win.head)
	sub.span.Store(int64(span))
	return r.Failure && !r.Probe && now.Compare(sub.openUntil) >= 0 && sub.win.trips(b)
}

// circuitSeen starts the window afresh when an entry read or written
// opens or closes the circuit this relay last knew of: the outcomes
// before it would count against the receiver after it (the failures that
// opened it would reopen it on the first failure after a probe closed it).
// An entry that shows the circuit closed also ends the open circuit known
// locally, which would otherwise hold this relay until its own cool-down
// ends. sub.mu is held.
func (sub *subscriber) circuitSeen(st State, rev uint64) {
	if sub.circuitChanged(st.OpenUntil, rev) {
		sub.win.reset()
		sub.circuitMoved.Store(false)
	}
	if st.OpenUntil.IsZero() {
		sub.openUntil = time.Time{}
	}
}

// circuitChanged records the circuit of the entry at revision rev, open
// until until (zero: closed), and reports whether it opened or closed
// since the one this relay last saw: then the generation moves on. An
// entry older than the last one seen (the watch behind a read) changes
// nothing.
func (sub *subscriber) circuitChanged(until time.Time, rev uint64) bool {
	sub.circMu.Lock()
	defer sub.circMu.Unlock()
	if rev != 0 && rev <= sub.circuitRev {
		return false
	}
	sub.circuitRev = max(sub.circuitRev, rev)
	if until.Equal(sub.circuit) {
		return false
	}
	sub.circuit = until
	sub.gen.Add(1)
	return true
}

// InFlight implements Limiter: most, or fewer while this relay's window of
// the subscriber holds enough failures to degrade it (see DegradeFrom).
// It takes no lock but the moment's of the subscriber map: the share in
// flight is read from sub.allowed, never from under sub.mu, which
// Observe holds across its KV requests. A subscriber degraded and then
// sent nothing recovers as time passes, not only with outcomes: a whole
// window after its last one, by DegradeStep a bucket.
func (s *Shared) InFlight(id string, most int) int {
	s.mu.Lock()
	sub := s.subs[id]
	s.mu.Unlock()
	if sub == nil {
		return most
	}
	allowed := math.Float64frombits(sub.allowed.Load())
	if span := sub.span.Load(); allowed != 0 && span > 0 {
		quiet := int64(s.opts.Clock.Now().Sub(s.epoch))/span - sub.allowedAt.Load()
		allowed = recovered(allowed, quiet-WindowBuckets)
	}
	return inFlightOf(allowed, most)
}

// Observe implements Limiter. Successes of a healthy subscriber cost no KV
// operation, nor do failures that do not open the circuit, nor a throttle
// within DecreaseWindow of a decrease this relay already knows of; a pause,
// any other throttle, a failure that opens the circuit or a probe's, and
// the first success after the circuit opened or a throttle each cost one
// compare-and-set.
//
// The breaker's count is each relay's own: every success and failure goes
// into this relay's window of the subscriber (see [Breaker]), in memory,
// and only the verdict is shared: the relay whose window trips stores the
// open circuit, which every relay then honours, and the probe and the
// cool-down are the entry's as before. Counting locally is safe because
// the relays' requests to one subscriber are samples of the same receiver:
// a share of failures over a window is the same on each relay, within
// chance, and a receiver that is down fails every request of every relay,
// so the first relay to count it opens the circuit for all. What is lost
// is the sum: with R relays sharing a subscriber, each sees about 1/R of
// its requests, so one busy over the cluster may be thin on each relay,
// judged by its run of failures; a run of Consecutive among a window of
// successes is chance at that pace, so a thin window's run counts only
// with the share of failures at FailureRate too (see [window.trips]),
// and a receiver that fails everything still opens it on the first
// relay's Consecutive-th failure.
func (s *Shared) Observe(ctx context.Context, id string, l Limit, r Result) error {
	sub := s.subscriber(id)
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if r.Probe {
		sub.probing = false
	}
	now := s.opts.Clock.Now()
	trip := s.count(sub, l, r, now)
	if r.PauseFor > 0 {
		// Stop spending at once; the other relays learn of it from their
		// watch (Follow), or at the end of their lease without one.
		until := now.Add(min(r.PauseFor, s.opts.MaxPause))
		if until.After(sub.pausedUntil) {
			sub.pausedUntil = until
		}
		sub.lease = 0
	}
	if r.Throttled {
		sub.lease = 0
	}
	if s.throttleOnly(ctx, sub, l, r) {
		// A 429 of a window whose decrease is already stored: the rate stays
		// where that decrease put it, and successes count afresh.
		sub.successes = 0
		return nil
	}
	if r.Success {
		sub.successes++
		if !s.successChanges(sub, l) && !r.Probe && r.PauseFor <= 0 {
			return nil
		}
	} else if !trip && !r.Throttled && r.PauseFor <= 0 && !r.Probe {
		return nil
	}
	tries := maxCAS
	if r.PauseFor > 0 {
		// A pause known to this relay alone would let the others send:
		// keep trying harder to store it.
		tries = 8 * maxCAS
	}
	for try := range tries {
		release, err := s.op(ctx)
		if err != nil {
			return fmt.Errorf("%w: %s: %w", ErrBucket, id, err)
		}
		done, err := s.observeOnce(ctx, id, sub, l, r, trip, try)
		release()
		if err != nil || done {
			return err
		}
		s.backoff(ctx, try)
	}
	return nil
}

// observeOnce is one compare-and-set of Observe, in a turn of the KV
// requests; done is false when another relay's write won.
func (s *Shared) observeOnce(ctx context.Context, id string, sub *subscriber, l Limit, r Result, trip bool, try int) (done bool, err error) {
	if try > 0 || sub.rev == 0 {
		if err := s.load(ctx, id, sub, l, try > 0); err != nil {
			return true, err
		}
	}
	prev := sub.state
	st, changed, restart := s.apply(ctx, sub, l, r, trip)
	if !changed {
		// Nothing to write: a later pause is already stored (wait for
		// that one), or a throttle found its window's decrease made.
		if restart {
			sub.successes = 0
		}
		if until := s.local(st.PausedUntil); until.After(sub.pausedUntil) {
			sub.pausedUntil = until
		}
		return true, nil
	}
	ok, err := s.write(ctx, id, sub, st)
	if err != nil || !ok {
		return err != nil, err
	}
	if s.opts.Notify != nil {
		notify(s.opts.Notify, id, prev, st, r)
	}
	if restart {
		sub.successes = 0
	}
	sub.pausedUntil = s.local(st.PausedUntil)
	if st.CircuitAt(s.serverNow(ctx)) == Open {
		sub.openUntil = s.local(st.OpenUntil)
		sub.lease = 0
	}
	return true, nil
}

// notify tells n what the write of after over before changed: a pause
// stored or moved later, a circuit opened, a circuit closed. The times are
// the entry's (the server's clock), so that every relay names a change
// alike.
func notify(n Notifier, id string, before, after State, r Result) {
	if r.PauseFor > 0 && after.PausedUntil.After(before.PausedUntil) {
		n.Paused(id, after.PausedUntil, r.Status)
	}
	if after.Opens > before.Opens {
		n.CircuitOpened(id, after.OpenUntil, after.Opens, r.Status)
	}
	if before.Opens > 0 && after.Opens == 0 {
		n.CircuitClosed(id, before.OpenUntil)
	}
}

// throttleOnly reports whether r is a throttle with nothing to write: no
// pause, failure, success or probe comes with it, and the rate has nothing
// to lower (an unlimited subscriber) or was lowered within DecreaseWindow,
// as the entry last seen says. That entry may be stale, but DecreasedAt
// only moves forward, so a stale entry can hide a recent decrease, never
// invent one: a throttle it does not settle goes on to the compare-and-set,
// which judges it again on the entry as stored.
func (s *Shared) throttleOnly(ctx context.Context, sub *subscriber, l Limit, r Result) bool {
	if !r.Throttled || r.Success || r.Failure || r.Probe || r.PauseFor > 0 {
		return false
	}
	return l.Unlimited() || !sub.state.DecreaseDue(s.serverNow(ctx))
}

// successChanges reports whether a success that is not a probe must be
// written: it clears the failures of a closed breaker, or ends a window of
// successes while the adaptive rate is below the configured one. While the
// circuit is open or half-open only the probe's success closes it: the
// requests on the wire when it opened still answer, and one of them
// succeeding says nothing of the receiver the cool-down waits out.
func (s *Shared) successChanges(sub *subscriber, l Limit) bool {
	st := sub.state
	if !st.OpenUntil.IsZero() {
		return false
	}
	if st.Failures > 0 {
		return true
	}
	rate := EffectiveRate(st, l)
	return !l.Unlimited() && rate < l.Rate && sub.successes >= SuccessWindow(rate)
}

// apply computes the entry after an outcome, on the state last read. It
// reports whether the entry changed, and whether a window of successes
// starts afresh once it is written (not before: a lost race re-applies the
// outcome to a fresh read and must still see the window).
func (s *Shared) apply(ctx context.Context, sub *subscriber, l Limit, r Result, trip bool) (st State, changed, restart bool) {
	st = sub.state
	server := s.serverNow(ctx)
	before := st
	if !l.Unlimited() {
		// Keep the bucket's content as of now, since the write moves the
		// entry's timestamp.
		from := refillFrom(st, sub.written)
		st.Tokens = Refill(st.Tokens, from, server, EffectiveRate(st, l), l)
		st.At = laterOf(from, server)
	}
	if r.PauseFor > 0 {
		// From the latest the server's time can be, not the estimate: an
		// estimate behind the server's clock would end the pause that much
		// early on a relay whose estimate is closer. --max-pause bounds it
		// from the estimate.
		until := earlierOf(s.serverLatest().Add(r.PauseFor), server.Add(s.opts.MaxPause))
		if until.After(st.PausedUntil) {
			st.PausedUntil = until
		}
	}
	if r.Throttled && !l.Unlimited() {
		// One decrease per window over all relays: DecreasedAt is in the
		// shared entry, and a lost race re-applies this on a fresh read, so
		// of two relays throttled in one window only the first halves.
		// At the floor the time is still recorded, so that the other
		// throttles of its window cost no write.
		if st.DecreaseDue(server) {
			st.Rate = Decrease(EffectiveRate(st, l), l)
			st.DecreasedAt = server
		}
		restart = true
	}
	switch {
	case r.Probe && !r.Success && !r.Failure:
		// A probe handed back unused: another relay may probe at once.
		st.ProbeUntil = time.Time{}
	case r.Success:
		if r.Probe || st.OpenUntil.IsZero() {
			// Only the probe closes an open or half-open circuit (see
			// successChanges).
			st.Failures, st.Opens, st.OpenUntil, st.ProbeUntil = 0, 0, time.Time{}, time.Time{}
		}
		if rate := EffectiveRate(st, l); !l.Unlimited() && rate < l.Rate && sub.successes >= SuccessWindow(rate) {
			st.Rate = Increase(rate, l)
			if st.Rate >= l.Rate {
				st.Rate = 0
			}
			restart = true
		}
	case r.Failure:
		reopen := r.Probe && st.CircuitAt(server) == HalfOpen
		if reopen || (trip && st.CircuitAt(server) == Closed) {
			// What opened it, for relay status: the failures of the
			// window that tripped (or one more, for a failed probe).
			st.Failures = max(st.Failures+1, sub.win.failed, sub.win.streak)
			if !reopen {
				st.Failures = max(sub.win.failed, sub.win.streak)
			}
			st.OpenUntil = server.Add(Cooldown(st.Opens, s.opts.Cooldown, s.opts.MaxCooldown))
			st.Opens++
			st.ProbeUntil = time.Time{}
		}
	}
	return st, st != before, restart
}

// earlierOf is the earlier of a and b, as laterOf is the later.
func earlierOf(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func laterOf(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
