package subscribers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
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
var errWatchEnded = errors.New("subscribers: KV watch ended (connection closed)")

// maxBatch bounds how many queued changes are folded into one snapshot, so
// that a stream of writes still publishes snapshots as it goes.
const maxBatch = 1024

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
	// filters finds the enabled subscribers an event type matches.
	filters filterIndex
	rev     uint64        // the bucket's last revision folded in
	changed chan struct{} // closed when a newer snapshot replaces this one
}

// expiring is a subscriber and the soonest time at which something it
// holds ends.
type expiring struct {
	id string
	at time.Time
}

// Watch starts a [Live] view of the bucket and returns once it holds every
// subscriber stored when it was called. It then follows every change until
// ctx is cancelled or the connection is closed, after which [Live.Done] is
// closed and the view keeps its last state.
func (s *Store) Watch(ctx context.Context) (*Live, error) {
	w, err := s.kv.WatchAll(ctx)
	if err != nil {
		return nil, fmt.Errorf("subscribers: watching KV bucket %s: %w", streams.SubscribersBucket, err)
	}
	st := newLiveState(s.keys)
	for loaded := false; !loaded; {
		select {
		case e, ok := <-w.Updates():
			switch {
			case !ok:
				stopWatcher(w)
				return nil, fmt.Errorf("subscribers: watching KV bucket %s: %w", streams.SubscribersBucket, errWatchEnded)
			case e == nil: // all values stored at the start have arrived
				loaded = true
			default:
				st.apply(e)
			}
		case <-ctx.Done():
			stopWatcher(w)
			return nil, ctx.Err()
		}
	}
	l := &Live{kv: s.kv, nc: s.nc, done: make(chan struct{})}
	if err := l.chooseGet(ctx); err != nil {
		stopWatcher(w)
		return nil, err
	}
	l.snap.Store(st.snapshot())
	go l.run(ctx, w, st)
	return l, nil
}

// chooseGet picks how Sync asks the bucket's stream for its next message:
// a direct get, which any replica answers without the JetStream API queue,
// when the stream has one replica and allows it; else the leader's message
// get, which sees every write acknowledged before it.
func (l *Live) chooseGet(ctx context.Context) error {
	status, err := l.kv.Status(ctx)
	if err != nil {
		return fmt.Errorf("subscribers: reading bucket %s: %w", streams.SubscribersBucket, err)
	}
	bs, ok := status.(*jetstream.KeyValueBucketStatus)
	if !ok {
		return fmt.Errorf("subscribers: bucket %s: no stream status", streams.SubscribersBucket)
	}
	cfg := bs.StreamInfo().Config
	l.direct = cfg.AllowDirect && cfg.Replicas <= 1
	l.stream = cfg.Name
	return nil
}

// run applies changes until ctx is cancelled or the watch ends.
func (l *Live) run(ctx context.Context, w jetstream.KeyWatcher, st *liveState) {
	defer close(l.done)
	defer stopWatcher(w)
	for {
		select {
		case <-ctx.Done():
			l.err = ctx.Err()
			return
		case e, ok := <-w.Updates():
			if !ok {
				l.err = cmp.Or(ctx.Err(), errWatchEnded)
				return
			}
			st.apply(e)
			// Fold what is already queued into the same snapshot, so that a
			// burst of writes does not rebuild the view once per write.
		batch:
			for range maxBatch {
				select {
				case e, ok = <-w.Updates():
					if !ok {
						break batch
					}
					st.apply(e)
				default:
					break batch
				}
			}
			l.publish(st.snapshot())
			if !ok {
				l.err = cmp.Or(ctx.Err(), errWatchEnded)
				return
			}
		}
	}
}

// publish makes next the current snapshot, then wakes those waiting on the
// previous one's Changed channel, so that they read next or newer.
func (l *Live) publish(next *snapshot) {
	prev := l.snap.Swap(next)
	close(prev.changed)
}

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
// moved for syncWait, Sync asks whether anything up to the awaited
// revision is still stored after the view's, and returns if nothing is.
func (l *Live) Sync(ctx context.Context) error {
	last, found, err := l.get(ctx, streams.DirectGet{LastBySubj: ">"})
	if err != nil || !found {
		return syncError(err)
	}
	stalled := time.NewTimer(syncWait)
	defer stalled.Stop()
	for snap := l.snap.Load(); snap.rev < last; snap = l.snap.Load() {
		select {
		case <-snap.changed:
			stalled.Reset(syncWait)
		case <-stalled.C:
			next, found, err := l.get(ctx, streams.DirectGet{Seq: snap.rev + 1, NextBySubj: ">"})
			if err != nil || !found || next > last {
				return syncError(err)
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

// syncError wraps an error of a request Sync made; nil stays nil.
func syncError(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("subscribers: reading bucket %s: %w", streams.SubscribersBucket, err)
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
	// ids are the keys of subs, kept sorted as changes come, so that a
	// snapshot is a copy in order rather than a sort of every subscriber.
	ids     []string
	invalid map[string]error
	rev     uint64
	// keys opens the sealed credentials of the values read.
	keys *secrets.Keyring
}

func newLiveState(keys *secrets.Keyring) *liveState {
	return &liveState{subs: map[string]Subscriber{}, invalid: map[string]error{}, keys: keys}
}

// put stores sub under id.
func (st *liveState) put(id string, sub Subscriber) {
	if _, ok := st.subs[id]; !ok {
		i, _ := slices.BinarySearch(st.ids, id)
		st.ids = slices.Insert(st.ids, i, id)
	}
	st.subs[id] = sub
}

// remove drops id.
func (st *liveState) remove(id string) {
	if _, ok := st.subs[id]; !ok {
		return
	}
	delete(st.subs, id)
	if i, ok := slices.BinarySearch(st.ids, id); ok {
		st.ids = slices.Delete(st.ids, i, i+1)
	}
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
	all := make([]Subscriber, len(st.ids))
	for i, id := range st.ids {
		all[i] = st.subs[id]
	}
	snap := &snapshot{
		all:     all,
		enabled: make([]Subscriber, 0, len(all)),
		index:   make(map[string]int, len(all)),
		invalid: maps.Clone(st.invalid),
		sealed:  map[string]string{},
		rev:     st.rev,
		changed: make(chan struct{}),
	}
	for i, sub := range all {
		snap.index[sub.ID] = i
		if !sub.Disabled {
			snap.filters.add(len(snap.enabled), sub.Events)
			snap.enabled = append(snap.enabled, sub)
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
	_ = w.Stop() // fails only when the subscription is already closed
	for range w.Updates() {
	}
}
