package subscribers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/internal/secrets"
	"github.com/relay-dev/relay/streams"
)

// errWatchEnded means the KV watch stopped delivering without being asked
// to, which happens when its connection is closed.
var errWatchEnded = errors.New("KV watch ended (connection closed)")

// errBucketReset means the bucket's last revision is older than the view's:
// the bucket was restored or created again, and the view is loaded again.
var errBucketReset = errors.New("its last revision is older than the view's (restored or created again): loading it again")

// Live is a continuously updated view of the relay_subscribers bucket, fed
// by a KV watch. The fan-out and the lanes read it on every message, so
// reads take no lock: they load an atomic pointer to an immutable snapshot,
// which the watch replaces as a whole on every change. Values returned by
// its methods belong to the snapshot and must not be modified.
//
// A value in the bucket that is not a valid subscriber (see [ErrCorrupt]),
// such as junk written with `nats kv put`, does not stop the watch: it is
// skipped, the last valid value of its key (if any) stays in effect, and the
// problem is reported by [Live.Invalid] until the key is written with a
// valid value or deleted.
//
// A burst of writes puts the view behind the bucket for a while (see
// [Live.Behind]). It catches up by itself: the watch is an ordered consumer
// with flow control, which nats.go fetches again from the last message it
// delivered when the client dropped some; and when nothing arrives from it
// for resyncAfter while the view is known to be behind, the view watches
// again from the last revision it holds (see [Live.Resyncs]); so it does
// when its watch ends while the connection is up. Every change after that
// revision comes again, deletes included, so a resync loses none, as long
// as the bucket still stores its marker. A bucket whose revisions are older
// than the view's (restored, or created again) is loaded again whole.
type Live struct {
	kv jetstream.KeyValue
	nc *nats.Conn
	// stream is the bucket's stream, which Sync asks for its next message;
	// direct says by a direct get (see chooseGet).
	stream string
	direct bool
	snap   atomic.Pointer[snapshot]
	done   chan struct{}
	err    error // written before done is closed
	log    *slog.Logger

	// known is the highest revision known to be stored in the bucket: from
	// what the watch says is still to come after each change, and from
	// Sync. The view is behind while its snapshot's rev is lower.
	known atomic.Uint64
	// behindSince is when the view was first seen behind, in Unix
	// nanoseconds; 0 while it is current.
	behindSince atomic.Int64
	// wanted is the highest revision a Sync has waited for: the watch
	// goroutine publishes as soon as it has folded it, however recent its
	// last snapshot.
	wanted atomic.Uint64
	// resyncs counts the watches started again from the view's revision.
	resyncs atomic.Uint64
	// ahead wakes the watch goroutine when Sync learns that the bucket is
	// ahead of the view, so that it keeps an eye on its progress.
	ahead chan struct{}
	// reload asks the watch goroutine to load the whole bucket again, when
	// Sync finds its revisions older than the view's.
	reload chan struct{}
	// watching, when set, is given each watch the view starts. Tests use
	// it to end a watch as a server may.
	watching func(jetstream.KeyWatcher)
	// drop, when set, discards the changes of the watch for which it
	// returns true, before they are folded in, as a slow consumer's
	// client drops messages. Tests use it to make the view lose what it
	// was sent.
	drop func(jetstream.KeyValueEntry) bool
}

// snapshot is one immutable state of the bucket.
type snapshot struct {
	all     []Subscriber
	enabled []Subscriber
	index   map[string]int // id -> position in all
	invalid map[string]error
	// sealed maps the subscribers whose credentials are sealed with a key
	// not given to the id of that key.
	sealed map[string]string
	// expiring lists the subscribers holding something that ends by
	// itself (a previous secret's grace, a pause), soonest first, so that
	// the janitor finds them without looking at every subscriber.
	expiring []expiring
	// filters finds the enabled subscribers an event type matches, and
	// disabledFilters the disabled ones, by their position in disabled.
	filters         filterIndex
	disabledFilters filterIndex
	disabled        []string
	rev             uint64        // the bucket's last revision folded in
	changed         chan struct{} // closed when a newer snapshot replaces this one
	// removals counts the subscribers the view has lost since it started
	// (a reload counts as one): see [Live.Removals].
	removals uint64
}

// expiring is a subscriber and the soonest time at which something it
// holds ends.
type expiring struct {
	id string
	at time.Time
}

// WatchOption changes how [Store.Watch] sets up a [Live] view.
type WatchOption func(*Live)

// WatchLog has the view log on log (default: slog.Default()): once when it
// has been behind the bucket for [BehindTolerance], once when it is current
// again, and each time it watches again.
func WatchLog(log *slog.Logger) WatchOption {
	return func(l *Live) { l.log = log }
}

// Watch starts a [Live] view of the bucket and returns once it holds every
// subscriber stored when it was called. It then follows every change until
// ctx is cancelled or the connection is closed, after which [Live.Done] is
// closed and the view keeps its last state.
func (s *Store) Watch(ctx context.Context, opts ...WatchOption) (*Live, error) {
	l := &Live{kv: s.kv, nc: s.nc, done: make(chan struct{}), ahead: make(chan struct{}, 1), reload: make(chan struct{}, 1),
		log: slog.Default()}
	for _, opt := range opts {
		opt(l)
	}
	return l, l.start(ctx, newLiveState(s.keys))
}

// start loads the bucket into st, then follows it on its own goroutine.
func (l *Live) start(ctx context.Context, st *liveState) error {
	w, err := l.kv.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("watching KV bucket %s: %w", streams.SubscribersBucket, err)
	}
	for loaded := false; !loaded; {
		select {
		case e, ok := <-w.Updates():
			switch {
			case !ok:
				stopWatcher(w)
				return fmt.Errorf("watching KV bucket %s: %w", streams.SubscribersBucket, errWatchEnded)
			case e == nil: // all values stored at the start have arrived
				loaded = true
			default:
				st.apply(e)
			}
		case <-ctx.Done():
			stopWatcher(w)
			return ctx.Err()
		}
	}
	if err := l.chooseGet(ctx); err != nil {
		stopWatcher(w)
		return err
	}
	l.snap.Store(st.snapshot())
	l.known.Store(st.rev)
	if l.watching != nil {
		l.watching(w)
	}
	go l.run(ctx, w, st)
	return nil
}

// chooseGet picks how Sync asks the bucket's stream for its next message:
// a direct get, which any replica answers without the JetStream API queue,
// when the stream has one replica and allows it; else the leader's message
// get, which sees every write acknowledged before it.
func (l *Live) chooseGet(ctx context.Context) error {
	status, err := l.kv.Status(ctx)
	if err != nil {
		return fmt.Errorf("reading bucket %s: %w", streams.SubscribersBucket, err)
	}
	bs, ok := status.(*jetstream.KeyValueBucketStatus)
	if !ok {
		return fmt.Errorf("bucket %s: no stream status", streams.SubscribersBucket)
	}
	cfg := bs.StreamInfo().Config
	l.direct = cfg.AllowDirect && cfg.Replicas <= 1
	l.stream = cfg.Name
	return nil
}

// follower is the state of the watch goroutine.
type follower struct {
	l  *Live
	st *liveState
	w  jetstream.KeyWatcher
	// unpublished says that st holds changes no snapshot has yet;
	// published is when the last snapshot was made, cost what it took.
	unpublished bool
	published   time.Time
	cost        time.Duration
	// progress is when the watch last delivered something; warned says
	// that the view's lag has been logged.
	progress time.Time
	warned   bool
	// publish fires when unpublished changes are due in a snapshot, check
	// while the view is behind, retry when a watch that could not be
	// started is tried again; each is nil while not armed.
	publish, check, retry *time.Timer
	// w is nil while no watch runs (one is to be retried). full says that
	// the next watch loads the whole bucket into an empty state; loading,
	// that the current one does, and nothing is published until its
	// initial values have all come. knownAt is known when the current
	// watch began: the end of its initial values lowers known only from it.
	full, loading bool
	knownAt       uint64
	// backoff is the wait before the next try of a watch that could not be
	// started; failing says that its failure has been logged.
	backoff time.Duration
	failing bool
}

// run applies changes until ctx is cancelled or the watch ends.
func (l *Live) run(ctx context.Context, w jetstream.KeyWatcher, st *liveState) {
	defer close(l.done)
	f := &follower{l: l, st: st, w: w, published: time.Now(), progress: time.Now()}
	defer func() { stopWatcher(f.w) }()
	defer f.stopTimers()
	for {
		select {
		case <-ctx.Done():
			l.err = ctx.Err()
			return
		case e, ok := <-updates(f.w):
			if !ok {
				f.snapshot()
				if !f.lost(ctx) {
					l.err = cmp.Or(ctx.Err(), errWatchEnded)
					return
				}
				continue
			}
			f.fold(e)
			// Fold what is already queued before looking at the clock, so
			// that a burst of writes does not rebuild the view per write.
			caughtUp := f.caughtUp(e)
		batch:
			for range maxBatch {
				select {
				case e, ok = <-f.w.Updates():
					if !ok {
						break batch
					}
					f.fold(e)
					caughtUp = f.caughtUp(e)
				default:
					break batch
				}
			}
			if !ok {
				f.snapshot()
				if !f.lost(ctx) {
					l.err = cmp.Or(ctx.Err(), errWatchEnded)
					return
				}
				continue
			}
			f.settle(caughtUp)
		case <-timerC(f.publish):
			f.publish = nil
			f.snapshot()
		case <-timerC(f.check):
			f.check = nil
			f.inspect(ctx)
		case <-timerC(f.retry):
			f.retry = nil
			if l.nc.IsClosed() {
				l.err = errWatchEnded
				return
			}
			f.watchAgain(ctx, "subscribers: watching the bucket again")
		case <-l.reload:
			if !f.loading {
				f.full = true
				f.watchAgain(ctx, "subscribers: the bucket's revisions are older than the view's; loading it again")
			}
		case <-l.ahead:
			if f.unpublished && !f.loading && f.awaited() {
				f.snapshot()
			}
			f.watchProgress()
		}
	}
}

// updates is w's channel, nil (never ready) for no watch.
func updates(w jetstream.KeyWatcher) <-chan jetstream.KeyValueEntry {
	if w == nil {
		return nil
	}
	return w.Updates()
}

// lost handles a watch that ended without being asked to: unless ctx has
// ended or the connection is closed for good, it watches again, and reports
// whether it did (or will try).
func (f *follower) lost(ctx context.Context) bool {
	if ctx.Err() != nil || f.l.nc.IsClosed() {
		return false
	}
	stopWatcher(f.w)
	f.w = nil
	f.watchAgain(ctx, "subscribers: the watch of the bucket ended; watching again from the view's revision")
	return true
}

// timerC is t's channel, nil (never ready) for no timer.
func timerC(t *time.Timer) <-chan time.Time {
	if t == nil {
		return nil
	}
	return t.C
}

// stopTimers stops the timers armed.
func (f *follower) stopTimers() {
	for _, t := range []*time.Timer{f.publish, f.check, f.retry} {
		if t != nil {
			t.Stop()
		}
	}
}

// fold applies one change of the watch, and what it says of the changes
// still to come (its delta: the messages stored after it).
func (f *follower) fold(e jetstream.KeyValueEntry) {
	if e == nil {
		// The values stored when the watch started have all come: what
		// was known to be stored then and is not in the view is no longer
		// stored (a marker removed, say), unless known has moved since.
		f.l.known.CompareAndSwap(f.knownAt, f.st.rev)
		if f.loading {
			f.loading, f.unpublished = false, true
		}
		return
	}
	if f.l.drop != nil && f.l.drop(e) {
		return
	}
	f.progress = time.Now()
	f.st.apply(e)
	f.unpublished = true
	f.l.noteKnown(e.Revision() + e.Delta())
}

// caughtUp reports whether e was the last change stored when the server
// sent it.
func (f *follower) caughtUp(e jetstream.KeyValueEntry) bool {
	return e == nil || e.Delta() == 0
}

// settle publishes the changes folded when the view has caught up, or when
// the last snapshot is old enough; else it arms the publish timer.
func (f *follower) settle(caughtUp bool) {
	if !f.unpublished || f.loading {
		return
	}
	gap := max(publishGap, publishCostShare*f.cost)
	switch {
	case caughtUp || time.Since(f.published) >= gap || f.awaited():
		f.snapshot()
	case f.publish == nil:
		f.publish = time.NewTimer(gap - time.Since(f.published))
	}
	f.watchProgress()
}

// awaited reports whether the state folded holds a revision a Sync waits
// for and the view does not: a Sync gives up after a bounded wait, which a
// long gap between snapshots would outlast.
func (f *follower) awaited() bool {
	wanted := f.l.wanted.Load()
	return wanted > f.l.snap.Load().rev && f.st.rev >= wanted
}

// snapshot publishes the changes folded, and notes whether the view is
// behind the bucket.
func (f *follower) snapshot() {
	if f.unpublished {
		start := time.Now()
		next := f.st.snapshot()
		f.cost = time.Since(start)
		f.l.publish(next)
		f.published, f.unpublished = time.Now(), false
		if f.publish != nil {
			f.publish.Stop()
			f.publish = nil
		}
	}
	f.watchProgress()
}

// watchProgress marks when the view went behind the bucket, or logs that it
// is current again; while it is behind, the check timer runs.
func (f *follower) watchProgress() {
	l := f.l
	if l.Behind() == 0 {
		if since := l.behindSince.Swap(0); since != 0 && f.warned {
			l.log.Info("subscribers: the view is current again", "behind_for", time.Since(time.Unix(0, since)).Round(time.Millisecond),
				"subscribers", len(l.All()), "resyncs", l.resyncs.Load())
		}
		f.warned = false
		if f.check != nil {
			f.check.Stop()
			f.check = nil
		}
		return
	}
	l.behindSince.CompareAndSwap(0, time.Now().UnixNano())
	if f.check == nil {
		f.check = time.NewTimer(checkEvery)
	}
}

// inspect runs while the view is behind: it logs once that the view has
// been behind for BehindTolerance, and watches again when the watch has
// delivered nothing for resyncAfter.
func (f *follower) inspect(ctx context.Context) {
	l := f.l
	behind := l.Behind()
	if behind == 0 {
		f.watchProgress()
		return
	}
	if !f.warned && l.Lagging() {
		f.warned = true
		l.log.Warn("subscribers: the view is behind the bucket; the fan-out holds events until it is current",
			"behind", behind, "view_rev", l.snap.Load().rev, "bucket_rev", l.known.Load(), "subscribers", len(l.All()))
	}
	if time.Since(f.progress) >= resyncAfter && f.retry == nil {
		f.watchAgain(ctx, "subscribers: the watch of the bucket delivered nothing while the view was behind; watching again from the view's revision")
	}
	f.watchProgress()
}

// watchAgain stops the watch and starts another, logging why: from the
// revision after the view's, so that every change since, deletes included,
// comes again; or, when full, of the whole bucket into an empty state. A
// watch that cannot be started now is tried again after a backoff that
// doubles up to resyncRetryMax, its failure logged once.
func (f *follower) watchAgain(ctx context.Context, why string) {
	l := f.l
	if f.retry != nil {
		f.retry.Stop()
		f.retry = nil
	}
	var opts []jetstream.WatchOpt
	from := uint64(1)
	if !f.full {
		from = f.st.rev + 1
		opts = append(opts, jetstream.ResumeFromRevision(from))
	}
	knownAt := l.known.Load()
	w, err := l.kv.WatchAll(ctx, opts...)
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		if !f.failing {
			f.failing = true
			l.log.Warn("subscribers: cannot watch the bucket; trying again", "from_rev", from, "err", err)
		}
		f.backoff = min(max(2*f.backoff, resyncRetry), resyncRetryMax)
		f.retry = time.NewTimer(f.backoff)
		return
	}
	f.failing, f.backoff = false, 0
	stopWatcher(f.w)
	f.w, f.knownAt, f.progress = w, knownAt, time.Now()
	if f.full {
		f.full, f.loading, f.unpublished = false, true, false
		removals := f.st.removals
		f.st = newLiveState(f.st.keys)
		f.st.removals = removals + 1 // what the reload drops is lost all at once
	}
	if l.watching != nil {
		l.watching(w)
	}
	n := l.resyncs.Add(1)
	l.log.Warn(why, "from_rev", from, "behind", l.Behind(), "resyncs", n)
}

// noteKnown records that the bucket stores revision rev.
func (l *Live) noteKnown(rev uint64) {
	for {
		cur := l.known.Load()
		if rev <= cur || l.known.CompareAndSwap(cur, rev) {
			return
		}
	}
}

// Behind returns how many revisions the bucket is known to hold past the
// view's: 0 when the view is current, as far as this relay knows. It is
// learnt from the watch (each change says how many are stored after it)
// and from [Live.Sync], without a request of its own.
func (l *Live) Behind() uint64 {
	known, rev := l.known.Load(), l.snap.Load().rev
	if known <= rev {
		return 0
	}
	return known - rev
}

// Lagging reports whether the view has been behind the bucket for longer
// than [BehindTolerance], or has stopped following it ([Live.Done]).
func (l *Live) Lagging() bool {
	select {
	case <-l.done:
		return true // it follows the bucket no more
	default:
	}
	since := l.behindSince.Load()
	return since != 0 && l.Behind() > 0 && time.Since(time.Unix(0, since)) > BehindTolerance
}

// Resyncs returns how many times the view has watched the bucket again:
// because its watch had stopped delivering while it was behind, or had
// ended, or because the bucket's revisions were older than the view's.
func (l *Live) Resyncs() uint64 {
	return l.resyncs.Load()
}

// publish makes next the current snapshot, then wakes those waiting on the
// previous one's Changed channel, so that they read next or newer.
func (l *Live) publish(next *snapshot) {
	prev := l.snap.Swap(next)
	close(prev.changed)
}

// Removals counts the subscribers the view has lost since it started: it
// changes whenever one is removed (or the bucket is loaded again), and only
// then. What keeps state per subscriber checks its ids against the view
// when it has changed, not every subscriber every few seconds.
func (l *Live) Removals() uint64 { return l.snap.Load().removals }

// Get returns the subscriber with the given id, and whether there is one.
// Its slices and map are shared with the view and must not be modified.
func (l *Live) Get(id string) (Subscriber, bool) {
	snap := l.snap.Load()
	i, ok := snap.index[id]
	if !ok {
		return Subscriber{}, false
	}
	return snap.all[i], true
}

// Lookup is Get without the copy: the subscriber it points to belongs to
// the view and must not be modified. For the paths that run per delivery.
func (l *Live) Lookup(id string) (*Subscriber, bool) {
	snap := l.snap.Load()
	i, ok := snap.index[id]
	if !ok {
		return nil, false
	}
	return &snap.all[i], true
}

// All returns every subscriber, disabled ones included, sorted by ID. The
// slice is shared with the view and must not be modified.
func (l *Live) All() []Subscriber {
	return l.snap.Load().all
}

// Enabled returns the subscribers that are not disabled, sorted by ID: the
// ones the fan-out delivers to. The slice is shared with the view and must
// not be modified.
func (l *Live) Enabled() []Subscriber {
	return l.snap.Load().enabled
}

// Matching returns the enabled subscribers that want events of eventType
// ([Subscriber.Matches]), sorted by ID. It looks only at the filters that
// can match, so its cost grows with the matches and the event type's
// tokens, not with the number of subscribers. The subscribers pointed to
// belong to the view and must not be modified.
func (l *Live) Matching(eventType string) []*Subscriber {
	snap := l.snap.Load()
	var buf [16]int
	idx := snap.filters.match(eventType, buf[:0])
	if len(idx) == 0 {
		return nil
	}
	out := make([]*Subscriber, len(idx))
	for i, j := range idx {
		out[i] = &snap.enabled[j]
	}
	return out
}

// MatchingDisabled returns the ids of the disabled subscribers whose
// --events match eventType: they get no copy of the event, and the fan-out
// records them so that relay trace can say why.
func (l *Live) MatchingDisabled(eventType string) []string {
	snap := l.snap.Load()
	if len(snap.disabled) == 0 {
		return nil
	}
	var buf [16]int
	idx := snap.disabledFilters.match(eventType, buf[:0])
	if len(idx) == 0 {
		return nil
	}
	out := make([]string, len(idx))
	for i, j := range idx {
		out[i] = snap.disabled[j]
	}
	return out
}

// Invalid returns, by key, why values in the bucket were skipped; each error
// wraps [ErrCorrupt]. It is empty, not nil, when every value is valid. The
// map is shared with the view and must not be modified.
func (l *Live) Invalid() map[string]error {
	return l.snap.Load().invalid
}

// Sealed returns, by subscriber id, the id of the key that the credentials
// of a subscriber are sealed with when this view was not given it: the
// subscribers held as [Subscriber.PausedAt] says. It is empty, not nil,
// when there is none. The map is shared with the view and must not be
// modified.
func (l *Live) Sealed() map[string]string {
	return l.snap.Load().sealed
}

// expiring returns the subscribers that hold a previous secret or a timed
// pause, soonest end first. The slice is shared with the view and must not
// be modified.
func (l *Live) expiring() []expiring {
	return l.snap.Load().expiring
}

// Changed returns a channel that is closed at the next change of the view.
// To follow changes without missing one, take the channel first, then read
// the view, then wait on the channel, and start again. The channel is not
// closed when the watch stops, so wait on [Live.Done] as well.
func (l *Live) Changed() <-chan struct{} {
	return l.snap.Load().changed
}

// Done returns a channel that is closed when the watch has stopped, because
// its context was cancelled or its connection was closed. The view then
// keeps its last state.
func (l *Live) Done() <-chan struct{} {
	return l.done
}

// Err returns nil while the watch runs and, once [Live.Done] is closed, why
// it stopped: the context's error, or an error saying that the watch ended
// because its connection was closed.
func (l *Live) Err() error {
	select {
	case <-l.done:
		return l.err
	default:
		return nil
	}
}

// Sync waits until the view holds every change stored in the bucket before
// Sync was called. The fan-out calls it before it copies an event stored
// after the last call began, so that a subscriber added before the event
// was published is never missed because this relay's watch had not caught
// up yet.
//
// It asks the bucket's stream for its last message, and waits until the
// view holds that revision. That is one small request, answered by the
// stream itself (a direct get, or the leader's message get when the bucket
// is replicated, since a follower may answer a direct get before it has
// applied the latest write), never a stream info through the JetStream API
// queue, and its cost does not grow with the number of subscribers. Writes
// made after Sync was called are not waited for: a steady stream of them
// cannot hold it.
//
// The watch delivers a change within milliseconds, but a burst of writes
// can put it seconds behind: Sync then waits, until ctx ends. A revision
// removed from the stream before the watch reached it (`nats kv purge
// --deletes` removes delete markers) never comes: when the view has not
// moved for syncWait, Sync asks for the first revision stored after the
// view's, and returns if there is none. A later one than awaited does not
// end the wait: the bucket keeps one value per key, so it may be the write
// that replaced the revision the view lacks, and Sync waits for it instead.
func (l *Live) Sync(ctx context.Context) error {
	last, found, err := l.get(ctx, streams.DirectGet{LastBySubj: ">"})
	if err != nil || !found {
		return syncError(err)
	}
	if last < l.snap.Load().rev {
		select {
		case l.reload <- struct{}{}:
		default:
		}
		return fmt.Errorf("bucket %s: %w", streams.SubscribersBucket, errBucketReset)
	}
	if l.snap.Load().rev < last {
		l.noteAhead(last)
	}
	stalled := time.NewTimer(syncWait)
	defer stalled.Stop()
	for snap := l.snap.Load(); snap.rev < last; snap = l.snap.Load() {
		select {
		case <-snap.changed:
			stalled.Reset(syncWait)
		case <-stalled.C:
			next, found, err := l.get(ctx, streams.DirectGet{Seq: snap.rev + 1, NextBySubj: ">"})
			if err != nil {
				return syncError(err)
			}
			if !found {
				// Nothing the view lacks is stored: it is not behind on
				// its account.
				l.known.CompareAndSwap(last, snap.rev)
				return nil
			}
			if next > last {
				// The bucket keeps one value per key: what the view lacks
				// up to last may have been replaced by next, a later write
				// of the same key. Wait for next.
				last = next
				l.noteAhead(last)
			}
			stalled.Reset(syncWait)
		case <-l.done:
			return cmp.Or(l.err, errWatchEnded)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// noteAhead records that the bucket stores rev, past the view's, and that a
// Sync waits for it, and wakes the watch goroutine to keep an eye on its
// progress.
func (l *Live) noteAhead(rev uint64) {
	l.noteKnown(rev)
	for {
		cur := l.wanted.Load()
		if rev <= cur || l.wanted.CompareAndSwap(cur, rev) {
			break
		}
	}
	select {
	case l.ahead <- struct{}{}:
	default:
	}
}

// syncError wraps an error of a request Sync made; nil stays nil.
func syncError(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("reading bucket %s: %w", streams.SubscribersBucket, err)
}

// syncWait is how long Sync waits for the view to move before it asks
// whether what it waits for is still stored.
const syncWait = 250 * time.Millisecond

// get returns the sequence of the bucket's message that req asks for, and
// whether there is one: by a direct get, or the leader's message get (see
// chooseGet).
func (l *Live) get(ctx context.Context, req streams.DirectGet) (uint64, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, syncRequestTimeout)
	defer cancel()
	return streams.SeqOf(ctx, l.nc, l.stream, req, !l.direct)
}

// syncRequestTimeout bounds one request of Sync.
const syncRequestTimeout = 2 * time.Second

// liveState is the mutable state the watch goroutine folds changes into,
// and from which it builds snapshots.
type liveState struct {
	subs map[string]Subscriber
	// ids are the keys of subs as of the last snapshot, sorted; fresh are
	// those added since and gone those removed since, merged into ids at
	// the next snapshot: a burst of new subscribers costs one sort of the
	// new ones and one pass over the others, not an insertion each.
	ids     []string
	fresh   map[string]struct{}
	gone    map[string]struct{}
	invalid map[string]error
	rev     uint64
	// removals counts the subscribers removed since the view started.
	removals uint64
	// keys opens the sealed credentials of the values read.
	keys *secrets.Keyring
}

func newLiveState(keys *secrets.Keyring) *liveState {
	return &liveState{subs: map[string]Subscriber{}, fresh: map[string]struct{}{}, gone: map[string]struct{}{},
		invalid: map[string]error{}, keys: keys}
}

// put stores sub under id.
func (st *liveState) put(id string, sub Subscriber) {
	if _, ok := st.subs[id]; !ok {
		if _, ok := st.gone[id]; ok {
			delete(st.gone, id) // still in ids
		} else {
			st.fresh[id] = struct{}{}
		}
	}
	st.subs[id] = sub
}

// remove drops id.
func (st *liveState) remove(id string) {
	if _, ok := st.subs[id]; !ok {
		return
	}
	delete(st.subs, id)
	st.removals++
	if _, ok := st.fresh[id]; ok {
		delete(st.fresh, id) // not in ids yet
	} else {
		st.gone[id] = struct{}{}
	}
}

// sortedIDs merges the ids added and removed since the last snapshot into
// ids, and returns them.
func (st *liveState) sortedIDs() []string {
	if len(st.fresh) == 0 && len(st.gone) == 0 {
		return st.ids
	}
	fresh := slices.Sorted(maps.Keys(st.fresh))
	ids := make([]string, 0, len(st.subs))
	i := 0
	for _, id := range st.ids {
		if _, ok := st.gone[id]; ok {
			continue
		}
		for ; i < len(fresh) && fresh[i] < id; i++ {
			ids = append(ids, fresh[i])
		}
		ids = append(ids, id)
	}
	ids = append(ids, fresh[i:]...)
	st.ids = ids
	clear(st.fresh)
	clear(st.gone)
	return ids
}

// apply folds one change of the bucket into the state.
func (st *liveState) apply(e jetstream.KeyValueEntry) {
	if e == nil {
		return
	}
	st.rev = max(st.rev, e.Revision())
	key := e.Key()
	switch e.Operation() {
	case jetstream.KeyValuePut:
		sub, _, err := decode(key, e.Value(), st.keys)
		if err != nil {
			st.invalid[key] = err
			return
		}
		st.put(key, sub)
		delete(st.invalid, key)
	case jetstream.KeyValueDelete, jetstream.KeyValuePurge:
		st.remove(key)
		delete(st.invalid, key)
	}
}

// snapshot builds an immutable copy of the state.
func (st *liveState) snapshot() *snapshot {
	ids := st.sortedIDs()
	all := make([]Subscriber, len(ids))
	for i, id := range ids {
		all[i] = st.subs[id]
	}
	snap := &snapshot{
		all:      all,
		enabled:  make([]Subscriber, 0, len(all)),
		index:    make(map[string]int, len(all)),
		invalid:  maps.Clone(st.invalid),
		sealed:   map[string]string{},
		rev:      st.rev,
		changed:  make(chan struct{}),
		removals: st.removals,
	}
	for i, sub := range all {
		snap.index[sub.ID] = i
		if !sub.Disabled {
			snap.filters.add(len(snap.enabled), sub.Events)
			snap.enabled = append(snap.enabled, sub)
		} else {
			snap.disabledFilters.add(len(snap.disabled), sub.Events)
			snap.disabled = append(snap.disabled, sub.ID)
		}
		if sub.sealedWith != "" {
			// Nothing of it can be rewritten here: the janitor leaves it.
			snap.sealed[sub.ID] = sub.sealedWith
			continue
		}
		if at, ok := sub.expiry(); ok {
			snap.expiring = append(snap.expiring, expiring{id: sub.ID, at: at})
		}
	}
	slices.SortFunc(snap.expiring, func(a, b expiring) int { return a.at.Compare(b.at) })
	return snap
}

// stopWatcher stops a KV watch and drains its channel until the client
// closes it. The client delivers into the channel from its own goroutine and
// blocks when it is full; draining lets that goroutine finish instead of
// leaking.
func stopWatcher(w jetstream.KeyWatcher) {
	if w == nil {
		return
	}
	_ = w.Stop() // fails only when the subscription is already closed
	for range w.Updates() {
	}
}
