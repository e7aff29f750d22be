package overflow

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/relay-dev/relay/streams"
)

// ErrLeased is returned by [Refiller.Refill] when another relay is bringing
// the subscriber's overflow back now: this relay leaves it alone, and what
// that relay brings back reaches this one's lanes too.
var ErrLeased = errors.New("overflow: another relay is bringing this backlog back")

// errLeaseLost is returned when a refill outlasted its lease, so that what it
// has not settled yet is left to the next holder.
var errLeaseLost = errors.New("overflow: the refill lease ran out")

// busyFor is how long a relay that found another holding a subscriber's
// lease waits before it asks again: a refill holds it for a few round
// trips, so a relay whose queue runs low gets its turn soon, and one whose
// refills keep failing to find it free asks at most twice a second.
const busyFor = 500 * time.Millisecond

// leases are one relay's refill leases, one key a subscriber in the
// relay_refill bucket (see doc.go). The value of a key is the id of the relay
// that holds it, or empty when it is free. A relay takes a lease for one
// refill by compare-and-set and gives it back the same way; the bucket's max
// age removes a lease nobody gave back (its holder died), so the next relay
// takes it at most the bucket's TTL later.
type leases struct {
	kv    jetstream.KeyValue
	owner []byte
	ttl   time.Duration

	mu   sync.Mutex
	subs map[string]*leaseState
}

// leaseState is what a relay remembers of one subscriber's lease.
type leaseState struct {
	// free is the revision at which this relay last saw the key free (its
	// own release), at freeAt: taking it again then costs one write, until
	// the bucket's max age removes that entry.
	free   uint64
	freeAt time.Time
	// busyUntil: another relay held it when last asked; not asked again
	// before then.
	busyUntil time.Time
}

// lease is one lease taken.
type lease struct {
	id  string
	rev uint64
	// at is when the take was sent, on this relay's clock: the lease lasts
	// at least ttl from then, since the server stamps it later.
	at time.Time
}

// openLeases opens the relay_refill bucket, which `relay run` creates, and
// reads its TTL: how long a lease lasts.
func openLeases(ctx context.Context, js jetstream.JetStream) (*leases, error) {
	kv, err := js.KeyValue(ctx, streams.RefillBucket)
	if err != nil {
		return nil, fmt.Errorf("overflow: opening bucket %s: %w", streams.RefillBucket, err)
	}
	status, err := kv.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("overflow: reading bucket %s: %w", streams.RefillBucket, err)
	}
	ttl := status.TTL()
	if ttl <= 0 {
		// Its max age removed by hand (the next `relay run` puts it back): a
		// lease whose holder died would stay for good, so this relay takes
		// none and refills as if alone, which duplicate ids keep safe.
		return nil, nil
	}
	return &leases{kv: kv, owner: []byte(nuid.Next()), ttl: ttl, subs: make(map[string]*leaseState)}, nil
}

// busy reports, without asking the bucket, whether another relay held the
// subscriber's lease when last asked, recently enough not to ask again.
func (l *leases) busy(id string) bool {
	if l == nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	st, ok := l.subs[id]
	return ok && time.Now().Before(st.busyUntil)
}

// take takes the subscriber's lease for one refill: ok is false when another
// relay holds it. It costs one write when this relay gave the lease back
// last, else a read and a write; a lease found taken costs a read, and is not
// asked for again for busyFor.
func (l *leases) take(ctx context.Context, id string) (ls lease, ok bool, err error) {
	l.mu.Lock()
	st, known := l.subs[id]
	if !known {
		st = &leaseState{}
		l.subs[id] = st
	}
	if time.Now().Before(st.busyUntil) {
		l.mu.Unlock()
		return lease{}, false, nil
	}
	free := st.free
	if time.Since(st.freeAt) >= l.ttl-l.ttl/6 {
		free = 0
	}
	st.free = 0
	l.mu.Unlock()

	ls = lease{id: id, at: time.Now()}
	if free != 0 {
		rev, err := l.kv.Update(ctx, id, l.owner, free)
		if err == nil {
			ls.rev = rev
			return ls, true, nil
		}
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return lease{}, false, fmt.Errorf("overflow: taking the refill lease of %s: %w", id, err)
		}
	}
	ls.at = time.Now()
	var rev uint64
	entry, err := l.kv.Get(ctx, id)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		// Never taken, gone with the bucket's max age, or deleted by hand.
		rev, err = l.kv.Create(ctx, id, l.owner)
		if errors.Is(err, jetstream.ErrKeyExists) {
			return lease{}, false, l.sawBusy(id)
		}
	case err != nil:
	case len(entry.Value()) > 0 && string(entry.Value()) != string(l.owner):
		return lease{}, false, l.sawBusy(id)
	default:
		// Free, or this relay's own (a give-back that got no answer).
		rev, err = l.kv.Update(ctx, id, l.owner, entry.Revision())
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return lease{}, false, l.sawBusy(id)
		}
	}
	if err != nil {
		return lease{}, false, fmt.Errorf("overflow: taking the refill lease of %s: %w", id, err)
	}
	ls.rev = rev
	return ls, true, nil
}

// sawBusy records that another relay holds the subscriber's lease.
func (l *leases) sawBusy(id string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if st, ok := l.subs[id]; ok {
		st.busyUntil = time.Now().Add(busyFor)
	}
	return nil
}

// expires is when the bucket's TTL ends the lease at the earliest.
func (l *leases) expires(ls lease) time.Time { return ls.at.Add(l.ttl) }

// until is when the lease stops surely holding: the bucket's TTL after its
// take was sent, less a margin for the time the take took to be stored.
func (l *leases) until(ls lease) time.Time {
	return ls.at.Add(max(0, l.ttl-l.ttl/6))
}

// release gives the lease back (compare-and-set to an empty value), so that
// the next refill, this relay's or another's, takes it at once. One that
// fails is harmless: the lease then ends with the bucket's max age. done
// says the overflow is empty: nothing of the lease is remembered then, so
// that what a relay remembers stays the size of the backlogs.
func (l *leases) release(ctx context.Context, ls lease, done bool) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseWait)
	defer cancel()
	rev, err := l.kv.Update(ctx, ls.id, nil, ls.rev)
	l.mu.Lock()
	defer l.mu.Unlock()
	st, ok := l.subs[ls.id]
	switch {
	case !ok:
	case done:
		delete(l.subs, ls.id)
	case err == nil:
		st.free, st.freeAt = rev, time.Now()
	default:
		st.free = 0
	}
}

// releaseWait bounds the give-back of a lease.
const releaseWait = 5 * time.Second
