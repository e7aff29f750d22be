package backlog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/internal/attempts"
	"github.com/relay-dev/relay/internal/clock"
	"github.com/relay-dev/relay/internal/deadletter"
	"github.com/relay-dev/relay/internal/opevent"
	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/streams"
)

// Tuning of the gauge. Each is a trade between how closely the bound is
// kept and what reading the streams costs.
const (
	// RefreshEvery is how often the gauge reads the streams: a subscriber
	// may pass its bound by what the relays queue for it in that time.
	RefreshEvery = time.Second
	// ShareFrom is how full DELIVERIES (in bytes, of its max_bytes) must
	// be before a subscriber over its fair share is shed: early enough that
	// the room left keeps the others' fan-out and relay's own moves (refill,
	// overflow, the retry mover) going.
	ShareFrom = 0.8
	// EvictFrom is how full DELIVERIES must be before the held backlog of
	// the subscriber furthest over its fair share is dead-lettered, oldest
	// first, down to its share: at that point the others' copies no longer
	// fit, and nothing else would make room while that subscriber stays
	// down (a burst faster than a refresh, or an operator who shrank the
	// stream below what it holds).
	EvictFrom = 0.95
	// countFrom is how full DELIVERIES must be before its per-subject
	// counts are read whatever the bounds: the fair share needs them from
	// ShareFrom on, and a read ahead of it sees the backlogs grow.
	countFrom = 0.5
	// retriesReadMax is the most messages RETRIES may hold for its
	// per-subject counts to be read: its subjects are one per parked
	// message, so the answer grows with them. Above it, parked and
	// scheduled deliveries are left out of the counts (logged once).
	retriesReadMax = 100_000
	// DrainReads is how many reads in a row must find a subscriber
	// draining (see [Gauge.draining]) before copies past its bound are
	// queued: a single fall is what shedding itself, or a delivery moving
	// between the two streams while they are read, makes.
	DrainReads = 3
)

// Verdict is what the fan-out does with one copy.
type Verdict uint8

const (
	// Queue stores the copy as usual.
	Queue Verdict = iota
	// Shed dead-letters the copy with reason backlog instead.
	Shed
)

// ErrConfig is returned by [New] for a config missing a required field.
var ErrConfig = errors.New("backlog: invalid config")

// Subscribers is the view the gauge reads the bounds from.
type Subscribers interface {
	// All returns every subscriber.
	All() []subscribers.Subscriber
}

// Config wires a [Gauge].
type Config struct {
	// JS reads the streams' state; required.
	JS jetstream.JetStream
	// Subscribers gives every subscriber's --max-backlog; required.
	Subscribers Subscribers
	// Every is how often the streams are read. Defaults to RefreshEvery.
	Every time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Metrics counts the dead letters of [Gauge.Evict]; may be nil.
	Metrics Metrics
	// Ops counts them for relay.delivery.dead; nil counts nothing.
	Ops *opevent.Publisher
	// Records gets a record of each copy evicted (relay trace); nil
	// records nothing.
	Records *attempts.Recorder
	// Clock tells whether a timed pause is still on. Defaults to
	// clock.Real.
	Clock clock.Clock
}

// Metrics is what the gauge reports to: *metrics.Metrics.
type Metrics interface {
	DeadLettered(subscriber string, reason deadletter.Reason)
}

// noMetrics reports nowhere.
type noMetrics struct{}

func (noMetrics) DeadLettered(string, deadletter.Reason) {}

// Gauge keeps, for one relay's fan-out, how many deliveries wait for each
// subscriber and how full DELIVERIES is. Safe for concurrent use; a nil
// Gauge queues everything.
type Gauge struct {
	cfg Config
	log *slog.Logger

	mu sync.Mutex
	// counts is each subscriber's waiting deliveries at the last read; nil
	// when the last read found no subscriber that could be near its bound,
	// and skipped them.
	counts map[string]uint64
	// held is each subscriber's deliveries in its overflow at the last
	// read: a subscriber with none is keeping up (its copies leave as
	// fast as its lane takes them), and is never shed for its share.
	held map[string]uint64
	// idle holds the subscribers paused or disabled at the last read: no
	// relay sends to them, so their held backlog is evicted first.
	idle map[string]bool
	// draining holds the subscribers that keep up, with how many
	// deliveries left them over the last interval: not idle, and for
	// DrainReads reads in a row their waiting count fell by more than the
	// copies this relay shed for them meanwhile, so that what left them
	// (delivered, dead-lettered) outpaced what came, shed or not: a count
	// that falls because copies are shed is not draining. Past its bound
	// such a subscriber is queued up to its bound plus that departure,
	// one interval's drain (see [Gauge.Admit]). drainRuns counts the
	// reads in a row; shed the copies this relay shed (or evicted), by
	// subscriber, since the read in progress began. counted is set when the last
	// read counted both streams, which a judgement needs of both reads.
	draining         map[string]uint64
	drainRuns        map[string]int
	shed, shedBefore map[string]uint64
	counted          bool
	// since counts the copies this relay queued for each subscriber since
	// the read began, and before those of the read before: a subscriber
	// found in neither nor in counts has no claim on the stream's room.
	since, before map[string]uint64
	// What a subscriber has waiting besides the last read's count, in
	// three parts that never overlap the read (see [Gauge.waitingLocked]):
	// inflight, the copies this relay queued whose PubAck has not come
	// back (not stored, or stored too late for any read to have seen);
	// settled, those whose PubAck came back since the read in progress
	// (or the last one) began; settledBefore, during a read, those that
	// came back since the read before began, which the read in progress
	// will count and the last one did not. Counting copies from their
	// queueing to their PubAck keeps the bound however many PubAcks are
	// outstanding: a read only shows what is stored.
	inflight, settled, settledBefore map[string]uint64
	// drained is, by subscriber, the share of what it had at a read (its
	// count then and the copies settled until the next read began) that
	// the next read no longer found: delivered. It is the last such
	// figure, kept through reads that had no copy of it to judge by. A
	// subscriber that keeps up drains nearly all, and its settled copies
	// count as waiting only in the proportion it did not drain, or one
	// taking 150 events a second would count up to 150 waiting, delivered
	// long ago, on the eve of each read; one that takes nothing (down)
	// drains none, and its settled copies all count. A subscriber never
	// judged yet, or paused now, drains none.
	drained map[string]float64
	// unread is DELIVERIES' and RETRIES' messages at the last read when it
	// skipped the per-subject counts (counts nil): no subscriber had more.
	unread uint64
	// kick asks Run for a read now: a copy found a subscriber that may be
	// at its bound, where the last read did not count.
	kick chan struct{}
	// reading is set while a read is in progress, and margin is then the
	// least room left (bound less waiting, this copy counted) by a copy
	// admitted meanwhile without counts: the read may not have seen it.
	// If the read does not count either, and found as many messages as
	// that room, it asks for the next read at once, as Admit would have
	// done after it.
	reading bool
	margin  uint64
	// bytes and maxBytes are DELIVERIES' at the last read (maxBytes <= 0:
	// unbounded, no fair share), msgs its messages; sinceBytes what this
	// relay queued since.
	bytes, maxBytes, sinceBytes int64
	msgs, sinceMsgs             uint64
	// claimants is how many subscribers had deliveries waiting at the
	// last read or were queued copies since the read before it: those
	// among whom the stream's room is shared.
	claimants int
	// retriesSkipped is set once RETRIES was too large to count, for the
	// log to say so once.
	retriesSkipped bool
}

// New returns a gauge; run it with [Gauge.Run].
func New(cfg Config) (*Gauge, error) {
	if cfg.JS == nil || cfg.Subscribers == nil {
		return nil, ErrConfig
	}
	if cfg.Every <= 0 {
		cfg.Every = RefreshEvery
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = noMetrics{}
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real
	}
	return &Gauge{cfg: cfg, log: log, since: map[string]uint64{}, shed: map[string]uint64{},
		inflight: map[string]uint64{}, settled: map[string]uint64{}, kick: make(chan struct{}, 1)}, nil
}

// Run reads the streams every cfg.Every until ctx ends. A read that fails
// leaves the last figures in force (the bound is kept less closely, no copy
// is lost) and is logged.
func (g *Gauge) Run(ctx context.Context) error {
	t := time.NewTicker(g.cfg.Every)
	defer t.Stop()
	for {
		if err := g.Refresh(ctx); err != nil && ctx.Err() == nil {
			g.log.Warn("backlog: reading the queues' lengths", "err", err)
		} else if _, err := g.Evict(ctx); err != nil && ctx.Err() == nil {
			g.log.Warn("backlog: making room in DELIVERIES", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-g.kick:
		}
	}
}

// Refresh reads the streams once. [Gauge.Run] calls it; tests call it to
// see a state at once.
func (g *Gauge) Refresh(ctx context.Context) error {
	g.mu.Lock()
	g.reading, g.margin = true, math.MaxUint64
	sinceBefore := g.since
	g.since = map[string]uint64{}
	shedBefore := g.shed
	g.shed = map[string]uint64{}
	bytesBefore, msgsBefore := g.sinceBytes, g.sinceMsgs
	g.sinceBytes, g.sinceMsgs = 0, 0
	// From here the read may see what is stored: settled copies start
	// again, those of the last interval kept until the read is in.
	g.settledBefore, g.settled = g.settled, map[string]uint64{}
	queued := make(map[string]uint64, len(g.inflight)+len(g.settledBefore))
	for id, n := range g.inflight {
		queued[id] += n
	}
	for id, n := range g.settledBefore {
		queued[id] += n
	}
	g.mu.Unlock()
	r, err := g.read(ctx, queued)
	g.mu.Lock()
	defer g.mu.Unlock()
	g.reading = false
	if err != nil {
		// Keep what was queued in the counts until a read succeeds.
		for id, n := range sinceBefore {
			g.since[id] += n
		}
		for id, n := range g.settledBefore {
			g.settled[id] += n
		}
		g.settledBefore = nil
		for id, n := range shedBefore {
			g.shed[id] += n
		}
		g.sinceBytes += bytesBefore
		g.sinceMsgs += msgsBefore
		// Nothing is known of the pace now: no copy past a bound goes
		// until reads in a row show the subscriber draining again.
		g.draining, g.drainRuns, g.counted = nil, nil, false
		return err
	}
	g.drained = drainedOf(g.drained, g.counts, g.settledBefore, r.counts, r.subscribers)
	g.settledBefore = nil
	g.unread = 0
	if r.counts == nil {
		g.unread = r.msgs + r.retriesMsgs
		if g.unread >= g.margin {
			g.kickLocked()
		}
	}
	g.draining, g.drainRuns = drainingOf(g.counts, g.counted, r, sinceBefore, shedBefore, g.drainRuns)
	g.counted = r.countedAll
	g.counts, g.held, g.idle, g.bytes, g.maxBytes, g.msgs = r.counts, r.held, r.idle, r.bytes, r.maxBytes, r.msgs
	g.before = sinceBefore
	g.claimants = len(r.counts)
	for id := range sinceBefore {
		if r.counts[id] == 0 {
			g.claimants++
		}
	}
	for id := range g.since {
		if r.counts[id] == 0 && sinceBefore[id] == 0 {
			g.claimants++
		}
	}
	if r.retriesSkipped && !g.retriesSkipped {
		g.log.Warn("backlog: RETRIES holds too many messages to count per subscriber; the bound counts DELIVERIES only",
			"messages", r.retriesMsgs, "limit", retriesReadMax)
	}
	g.retriesSkipped = r.retriesSkipped
	return nil
}

// drainedOf updates drained (see [Gauge.drained]) with what one read
// shows: by subscriber, the share of what it had (prev, its count at the
// read before, and added, the copies settled between the two reads'
// starts) that the read, now, no longer finds. A read that did not count
// subscribers shows nothing. A copy stored before a read whose PubAck came
// after its start is in both prev and added, which makes the share a
// little larger than it is. Subscribers no longer in the view (of n) are
// forgotten.
func drainedOf(drained map[string]float64, prev, added, now map[string]uint64, n int) map[string]float64 {
	if now == nil || len(added) == 0 {
		return drained
	}
	if drained == nil {
		drained = make(map[string]float64, len(added))
	}
	for id, a := range added {
		total, left := prev[id]+a, now[id]
		drained[id] = 0
		if left < total {
			drained[id] = float64(total-left) / float64(total)
		}
	}
	if len(drained) > 2*n+64 {
		// Mostly subscribers removed: the next judgement will do.
		clear(drained)
	}
	return drained
}

// drainingOf judges, by a read r and the counts of the read before
// (prev, which counted both streams when prevAll), which subscribers
// drain (see [Gauge.draining]): taking deliveries (not paused nor
// disabled) and, for DrainReads reads in a row, fewer waiting than at the
// read before by more than the copies this relay shed for them (shed).
// The counts are the streams', so every relay's copies are in both: what
// left a subscriber is its fall plus what was queued meanwhile, at least
// queued, this relay's. It returns the subscribers that drain, with what
// left each, and the runs so far. A read or a read before that did not
// count both streams ends every run: a count without RETRIES falls by
// what RETRIES holds.
func drainingOf(prev map[string]uint64, prevAll bool, r reading, queued, shed map[string]uint64, runs map[string]int) (map[string]uint64, map[string]int) {
	if prev == nil || !prevAll || r.counts == nil || !r.countedAll {
		return nil, nil
	}
	var out map[string]uint64
	next := map[string]int{}
	for id, n := range r.counts {
		p := prev[id]
		if r.idle[id] || p <= n || p-n <= shed[id] {
			continue
		}
		next[id] = runs[id] + 1
		if next[id] >= DrainReads {
			if out == nil {
				out = map[string]uint64{}
			}
			out[id] = p - n + queued[id]
		}
	}
	return out, next
}

// reading is what one read of the streams found.
type reading struct {
	// subscribers is how many the view held.
	subscribers       int
	counts, held      map[string]uint64
	idle              map[string]bool
	bytes, maxBytes   int64
	msgs, retriesMsgs uint64
	retriesSkipped    bool
	// countedAll is set when counts holds both streams' subjects.
	countedAll bool
}

// read takes the streams' state: their infos, and their per-subject counts
// when some subscriber may be near its bound or DELIVERIES is filling.
// queued is, by subscriber, what this relay has queued that the last read
// did not count: a subscriber may be that much nearer its bound than the
// streams show.
func (g *Gauge) read(ctx context.Context, queued map[string]uint64) (reading, error) {
	var r reading
	deliveries, err := g.cfg.JS.Stream(ctx, streams.Deliveries)
	if err != nil {
		return r, fmt.Errorf("backlog: %s: %w", streams.Deliveries, err)
	}
	info := deliveries.CachedInfo()
	r.bytes, r.maxBytes, r.msgs = int64(info.State.Bytes), info.Config.MaxBytes, info.State.Msgs
	retries, err := g.cfg.JS.Stream(ctx, streams.Retries)
	if err != nil {
		return r, fmt.Errorf("backlog: %s: %w", streams.Retries, err)
	}
	r.retriesMsgs = retries.CachedInfo().State.Msgs
	all := g.cfg.Subscribers.All()
	r.subscribers = len(all)
	now := g.cfg.Clock.Now()
	r.idle = map[string]bool{}
	// Whether some subscriber could be at its bound: all the streams
	// hold, and what this relay queued for it that they may not show yet.
	reachable := false
	for _, s := range all {
		reachable = reachable || r.msgs+r.retriesMsgs+queued[s.ID] >= uint64(s.Backlog())
		if s.Disabled || s.PausedAt(now) {
			r.idle[s.ID] = true
		}
	}
	filling := r.maxBytes > 0 && float64(r.bytes) >= countFrom*float64(r.maxBytes)
	if !reachable && !filling {
		// No subscriber can be near its bound: nothing to count.
		return r, nil
	}
	r.counts, r.held = map[string]uint64{}, map[string]uint64{}
	if err := countSubjects(ctx, deliveries, streams.DeliveriesFilter, r.counts, r.held); err != nil {
		return r, err
	}
	// RETRIES' subjects are one per parked message: read them only when
	// they could take some subscriber to its bound.
	near := false
	for _, s := range all {
		near = near || r.counts[s.ID]+r.retriesMsgs+queued[s.ID] >= uint64(s.Backlog())
	}
	if !near {
		// No subscriber is near its bound: none is judged by this read.
		return r, nil
	}
	if r.retriesMsgs > retriesReadMax {
		r.retriesSkipped = true
		return r, nil
	}
	if r.retriesMsgs > 0 {
		if err := countSubjects(ctx, retries, "retries.>", r.counts, nil); err != nil {
			return r, err
		}
	}
	r.countedAll = true
	return r, nil
}

// countSubjects adds the per-subject counts of a stream to counts, by
// subscriber: the third token of deliveries.<lane>.<id>,
// retries.wait.<id>.<unique>, retries.at.<id>.<unique> and
// retries.due.<id>; and those of deliveries.overflow.<id> to held too.
func countSubjects(ctx context.Context, s jetstream.Stream, filter string, counts, held map[string]uint64) error {
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return fmt.Errorf("backlog: counting %s: %w", filter, err)
	}
	for subject, n := range info.State.Subjects {
		id, ok := streams.SubjectToken(subject, 2)
		if !ok || n == 0 {
			continue
		}
		counts[id] += n
		if held != nil && strings.HasPrefix(subject, streams.OverflowPrefix) {
			held[id] += n
		}
	}
	return nil
}

// Admit decides what becomes of one copy of size bytes for sub, and counts
// it as waiting when it is queued. why says, for a shed copy, what its
// dead letter's Relay-Last-Error says.
func (g *Gauge) Admit(sub *subscribers.Subscriber, size int) (v Verdict, why string) {
	if g == nil {
		return Queue, ""
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	waiting := g.waitingLocked(sub.ID, !sub.PausedAt(g.cfg.Clock.Now()))
	bound := uint64(sub.Backlog())
	if extra := g.draining[sub.ID]; waiting >= bound && waiting >= bound+extra {
		// A subscriber that drains its backlog is not shed at its bound,
		// but at its bound plus what it drained in an interval: the bound
		// is for one that cannot take its traffic.
		g.shed[sub.ID]++
		return Shed, fmt.Sprintf("%d deliveries wait for subscriber %s, its --max-backlog is %d", waiting, sub.ID, bound)
	}
	if g.counts == nil && waiting+1+g.unread >= bound {
		// The last read did not count this subscriber's own: with this
		// copy it may be at its bound or not. The copy goes, and a read
		// now says, before the next one comes.
		g.kickLocked()
	}
	if g.counts == nil && g.reading {
		g.margin = min(g.margin, bound-waiting-1)
	}
	if full, share := g.shareLocked(sub.ID); full >= ShareFrom && g.held[sub.ID] > 0 && float64(waiting) >= share {
		g.shed[sub.ID]++
		return Shed, fmt.Sprintf("DELIVERIES is %.0f%% full and %d deliveries wait for subscriber %s, its fair share is %.0f",
			100*full, waiting, sub.ID, share)
	}
	g.countLocked(sub.ID, size)
	return Queue, ""
}

// kickLocked asks Run for a read now, unless one is asked already.
func (g *Gauge) kickLocked() {
	select {
	case g.kick <- struct{}{}:
	default:
	}
}

// Count counts a copy queued without judging it: one of an event fanned out
// again, some of whose copies were stored the first time. Shedding such a
// copy could dead-letter a delivery that is queued already, so an event
// handed back is never shed; the bound may be passed by the copies of the
// events that are.
func (g *Gauge) Count(id string, size int) {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.countLocked(id, size)
}

func (g *Gauge) countLocked(id string, size int) {
	if !g.claims(id) {
		g.claimants++
	}
	g.inflight[id]++
	g.since[id]++
	g.sinceBytes += int64(size)
	g.sinceMsgs++
}

// shareLocked returns how full DELIVERIES is (0 when it is unbounded) and
// a subscriber's fair share of it, in messages: ShareFrom of the stream's
// room, in messages of the size it holds on average, split among the
// claimants (the subscriber counted among them).
func (g *Gauge) shareLocked(id string) (full, share float64) {
	used := g.bytes + g.sinceBytes
	if g.maxBytes <= 0 || used <= 0 {
		return 0, math.Inf(1)
	}
	claimants := g.claimants
	if !g.claims(id) {
		claimants++
	}
	room := float64(g.msgs+g.sinceMsgs+1) * float64(g.maxBytes) / float64(used)
	return float64(used) / float64(g.maxBytes), ShareFrom * room / float64(max(claimants, 1))
}

// claims reports whether a subscriber is among the claimants already.
func (g *Gauge) claims(id string) bool {
	return g.counts[id] > 0 || g.before[id] > 0 || g.since[id] > 0
}

// Settled tells the gauge that the PubAck of a copy it counted (by
// [Gauge.Admit] or [Gauge.Count]) came back, or that its publish failed:
// from now on a read shows it, if it is stored. stored is false when the
// copy is known not to be (JetStream refused it, or it was never sent): it
// then waits nowhere, and no longer counts. A copy whose PubAck timed out
// may be stored, and counts as one that is.
func (g *Gauge) Settled(id string, stored bool) {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.inflight[id] == 0 {
		return
	}
	if g.inflight[id]--; g.inflight[id] == 0 {
		delete(g.inflight, id)
	}
	if stored {
		g.settled[id]++
	}
}

// Waiting returns how many deliveries wait for a subscriber as this gauge
// knows it (see [Gauge.waitingLocked]).
func (g *Gauge) Waiting(id string) uint64 {
	if g == nil {
		return 0
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.waitingLocked(id, true)
}

// waitingLocked is the last read's count of a subscriber's waiting
// deliveries (zero when the read did not count them), plus what this relay
// queued that the read cannot have seen: the copies still without a
// PubAck, and those whose PubAck came back since the read began, less the
// share of them a subscriber that keeps up has delivered already (see
// [Gauge.drained]) when it is taking deliveries. A copy stored just before
// a read whose PubAck comes back just after may be counted twice until the
// next read.
func (g *Gauge) waitingLocked(id string, taking bool) uint64 {
	unread := g.settled[id] + g.settledBefore[id]
	if d := g.drained[id]; taking && d > 0 {
		unread -= uint64(float64(unread) * d)
	}
	return g.counts[id] + g.inflight[id] + unread
}
