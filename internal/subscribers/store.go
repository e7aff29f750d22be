package subscribers

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/internal/secrets"
	"github.com/relay-dev/relay/streams"
)

// maxReasonLen bounds DisabledReason, like Relay-Last-Error, so that a long
// error text from a receiver cannot bloat every value read by every relay.
const maxReasonLen = 1024

// Store reads and writes subscribers in the relay_subscribers KV bucket,
// key = subscriber id, value = JSON. Writes that depend on what is stored
// are compare-and-set on the key's revision, so that the CLI and several
// relays may write at once without one silently undoing another. A Store is
// safe for concurrent use.
type Store struct {
	kv jetstream.KeyValue
	nc *nats.Conn
	// keys seals the credentials written and opens those read; nil writes
	// them in the clear (see seal.go).
	keys *secrets.Keyring

	// now is the clock for CreatedAt and UpdatedAt.
	now func() time.Time
	// beforeWrite, when set, runs between reading a key and writing it back.
	// Tests use it to put a concurrent write exactly where a lost update
	// would happen.
	beforeWrite func()
}

// Option changes how [Open] sets up a Store.
type Option func(*Store)

// WithKeys has the Store seal every credential it writes with keys, and
// open with them every one it reads (see [Subscriber.SealedWith] for one
// sealed with a key keys lacks). nil, the default, writes them in the
// clear.
func WithKeys(keys *secrets.Keyring) Option {
	return func(s *Store) { s.keys = keys }
}

// Open returns a Store on the relay_subscribers bucket. The bucket must
// exist: `relay run` creates it with the streams, and the CLI should not
// create a bucket with settings of its own. When it is missing the error
// says so and wraps [jetstream.ErrBucketNotFound].
func Open(ctx context.Context, js jetstream.JetStream, opts ...Option) (*Store, error) {
	if js == nil {
		return nil, errors.New("Open needs a JetStream context, got nil")
	}
	kv, err := js.KeyValue(ctx, streams.SubscribersBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("KV bucket %s does not exist (`relay run` creates it: start relay once against this NATS): %w", streams.SubscribersBucket, err)
	}
	if err != nil {
		return nil, fmt.Errorf("opening KV bucket %s: %w", streams.SubscribersBucket, err)
	}
	s := &Store{kv: kv, nc: js.Conn(), now: time.Now}
	for _, opt := range opts {
		opt(s)
	}
	return s, nil
}

// PutOption changes how [Store.Put] treats a subscriber that exists already.
type PutOption func(*putOptions)

type putOptions struct {
	create bool
}

// Create makes [Store.Put] refuse, with an [*ExistsError], to replace a
// subscriber that exists: `relay sub add` without --force, so that an add
// repeated by a provisioning script never changes a secret (the receiver
// would reject every request signed with the new one) nor sends someone
// else's events elsewhere. The check is made on the value Put would
// replace, in the same compare-and-set, so that a subscriber added between
// the check and the write is refused as well.
func Create() PutOption {
	return func(o *putOptions) { o.create = true }
}

// Put creates the subscriber or replaces the one with the same ID, as `relay
// sub add --force` does ([Create] refuses to replace). It applies [Subscriber.SetDefaults], then
// [Subscriber.Validate], and stores nothing when the subscriber is invalid.
//
// Replacing keeps what belongs to the stored subscriber rather than to the
// command line: its CreatedAt; its Disabled state and reason, which only
// [Store.SetDisabled] changes once a subscriber exists (a subscriber that
// answered 410 Gone stays disabled until `relay sub enable`, even when it is
// added again); its pause, which only [Store.Pause] and [Store.Resume]
// change; and the previous secrets of a rotation still in its grace, but for
// any that is now an active secret. A new subscriber takes CreatedAt (now,
// unless given), Disabled and the pause as given. UpdatedAt is set to now,
// and what has ended by then (a previous secret's grace, a pause) is
// dropped.
//
// A subscriber that asks for a dedicated lane and does not have one yet is
// refused with [ErrTooManyDedicated] when [MaxDedicated] others have one;
// the check reads the bucket, so two such Puts racing each other may both
// pass it.
//
// A value in the bucket that is not a valid subscriber (see [ErrCorrupt]) is
// replaced as if there were none, but by a Put with [Create], which refuses
// it as it refuses any value stored under the id.
func (s *Store) Put(ctx context.Context, sub Subscriber, opts ...PutOption) error {
	var o putOptions
	for _, opt := range opts {
		opt(&o)
	}
	sub = sub.clone()
	sub.SetDefaults()
	if err := sub.Validate(); err != nil {
		return err
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		cur, rev, err := s.read(ctx, sub.ID)
		exists := err == nil
		if err != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrCorrupt) {
			return err
		}
		if (exists || errors.Is(err, ErrCorrupt)) && o.create {
			return &ExistsError{ID: sub.ID, URL: cur.URL}
		}
		if exists && cur.sealedWith != "" {
			// Replacing it would drop the retired secrets it keeps signing
			// with, which this store cannot read.
			return cur.sealedError()
		}
		now := s.now().UTC()
		next := sub.clone()
		if exists {
			next.CreatedAt = cur.CreatedAt
			next.Disabled = cur.Disabled
			next.DisabledReason = cur.DisabledReason
			next.Paused, next.PausedUntil = cur.Paused, cur.PausedUntil
			next.PreviousSecrets = cur.PreviousSecrets
		}
		if next.CreatedAt.IsZero() {
			next.CreatedAt = now
		}
		next.CreatedAt = next.CreatedAt.UTC()
		next.settle(now)
		if next.Dedicated && !(exists && cur.Dedicated) {
			if err := s.checkDedicated(ctx, next.ID); err != nil {
				return err
			}
		}
		retry, err := s.write(ctx, next, rev)
		if retry {
			continue
		}
		return err
	}
}

// settle prepares a subscriber to be stored at now: what has ended is
// dropped, and so is a previous secret that is an active one again; a
// reason only a disabled subscriber has is cleared or bounded; times are in
// UTC, and UpdatedAt is now.
func (s *Subscriber) settle(now time.Time) {
	s.expire(now)
	s.PreviousSecrets = slices.DeleteFunc(s.PreviousSecrets, func(p PreviousSecret) bool {
		return slices.Contains(s.Secrets, p.Secret)
	})
	if len(s.PreviousSecrets) == 0 {
		s.PreviousSecrets = nil
	}
	if !s.Disabled {
		s.DisabledReason = ""
	}
	s.DisabledReason = truncate(s.DisabledReason, maxReasonLen)
	s.PausedUntil = utc(s.PausedUntil)
	for i := range s.PreviousSecrets {
		s.PreviousSecrets[i].Until = s.PreviousSecrets[i].Until.UTC()
	}
	s.UpdatedAt = now
}

// utc returns t in UTC, leaving the zero time zero.
func utc(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.UTC()
}

// Update changes the subscriber with the given id as change says and stores
// the result, as `relay sub update` does, returning what it stored. change
// edits a copy of the stored value and must depend on nothing else: when
// another write gets in between the read and the write (compare-and-set on
// the revision read), the value is read again and change is called again.
// The result gets its defaults ([Subscriber.SetDefaults]) and must pass
// [Subscriber.Validate], and a dedicated lane asked for anew is checked as
// [Store.Put] checks it; nothing is stored when change returns an error or
// the result is invalid. The id and CreatedAt cannot change. It returns an
// error wrapping [ErrNotFound] when there is no such subscriber.
func (s *Store) Update(ctx context.Context, id string, change func(sub *Subscriber) error) (Subscriber, error) {
	sub, _, err := s.modify(ctx, id, func(sub *Subscriber, _ time.Time) (bool, error) {
		return true, change(sub)
	})
	return sub, err
}

// Pause holds every delivery to the subscriber with the given id until
// Resume, or until until when it is not zero, as `relay sub pause` does. The
// subscriber still gets a copy of each new event; every relay sees the pause
// through its [Live] view within a second, and its lanes then send nothing
// to it. A pause replaces any earlier one. until, when set, must be after
// now, else the error is a [*ValidationError] for --until. It returns what
// it stored, or an error wrapping [ErrNotFound] when there is no such
// subscriber.
func (s *Store) Pause(ctx context.Context, id string, until time.Time) (Subscriber, error) {
	sub, _, err := s.modify(ctx, id, func(sub *Subscriber, now time.Time) (bool, error) {
		if !until.IsZero() && !until.After(now) {
			return false, invalid("--until", fmt.Sprintf("must be in the future, got %s (now %s)",
				until.UTC().Format(time.RFC3339), now.Format(time.RFC3339)))
		}
		sub.Paused, sub.PausedUntil = true, utc(until)
		return true, nil
	})
	return sub, err
}

// Resume lifts an operator's pause of the subscriber with the given id, as
// `relay sub resume` does: the lanes of every relay deliver what it holds as
// soon as their view sees the change. It reports whether the subscriber was
// paused; resuming one that is not is a no-op. It returns an error wrapping
// [ErrNotFound] when there is no such subscriber.
func (s *Store) Resume(ctx context.Context, id string) (bool, error) {
	var was bool
	_, _, err := s.modify(ctx, id, func(sub *Subscriber, now time.Time) (bool, error) {
		was = sub.PausedAt(now)
		if !sub.Paused && sub.PausedUntil.IsZero() {
			return false, nil
		}
		sub.Paused, sub.PausedUntil = false, time.Time{}
		return true, nil
	})
	return was, err
}

// tidy rewrites the subscriber with the given id without what has ended at
// now: previous secrets past their grace, a pause past its time. It writes
// nothing when nothing has ended, and reports whether it wrote.
func (s *Store) tidy(ctx context.Context, id string, now time.Time) (bool, error) {
	_, wrote, err := s.modify(ctx, id, func(sub *Subscriber, _ time.Time) (bool, error) {
		return sub.expire(now), nil
	})
	return wrote, err
}

// modify reads the subscriber with the given id, lets change edit a copy of
// it at the store's time now, and stores the result when change asks to,
// compare-and-set on the revision read, starting over from a fresh read
// when another write got in between. It returns the subscriber as stored
// (or as read, when nothing was written) and whether it wrote.
func (s *Store) modify(ctx context.Context, id string, change func(sub *Subscriber, now time.Time) (bool, error)) (Subscriber, bool, error) {
	for {
		if err := ctx.Err(); err != nil {
			return Subscriber{}, false, err
		}
		cur, rev, err := s.read(ctx, id)
		if err != nil {
			return Subscriber{}, false, err
		}
		now := s.now().UTC()
		next := cur.clone()
		write, err := change(&next, now)
		if err != nil || !write {
			return cur, false, err
		}
		if cur.sealedWith != "" {
			return Subscriber{}, false, cur.sealedError()
		}
		next.ID, next.CreatedAt = cur.ID, cur.CreatedAt
		next.SetDefaults()
		next.settle(now)
		if err := next.Validate(); err != nil {
			return Subscriber{}, false, err
		}
		if next.Dedicated && !cur.Dedicated {
			if err := s.checkDedicated(ctx, next.ID); err != nil {
				return Subscriber{}, false, err
			}
		}
		retry, err := s.write(ctx, next, rev)
		if retry {
			continue
		}
		if err != nil {
			return Subscriber{}, false, err
		}
		return next, true, nil
	}
}

// checkDedicated refuses one more dedicated lane when [MaxDedicated]
// subscribers other than id have one.
func (s *Store) checkDedicated(ctx context.Context, id string) error {
	all, err := s.list(ctx)
	if err != nil {
		return err
	}
	n := 0
	for _, other := range all {
		if other.Dedicated && other.ID != id {
			n++
		}
	}
	if n >= MaxDedicated {
		return &ValidationError{
			Flag: "--lane",
			Msg: fmt.Sprintf("%d subscribers already have a dedicated lane, the most relay allows (each is a JetStream consumer, and every ack scans them all); use a shared lane: leave out --lane dedicated",
				n),
			Err: ErrTooManyDedicated,
		}
	}
	return nil
}

// Get returns the subscriber with the given id. It returns an error wrapping
// [ErrNotFound] when there is none, [ErrInvalid] when id cannot be a
// subscriber id, and [ErrCorrupt] when the stored value is not a valid
// subscriber. A subscriber whose credentials are sealed with a key the
// store was not given is returned with them sealed: see
// [Subscriber.SealedWith].
func (s *Store) Get(ctx context.Context, id string) (Subscriber, error) {
	sub, _, err := s.read(ctx, id)
	if err != nil {
		return Subscriber{}, err
	}
	return sub, nil
}

// List returns every subscriber, sorted by ID; an empty slice, not nil, when
// there are none, so that `relay sub ls --json` prints []. Values that are
// not valid subscribers are left out, and then List also returns an error
// wrapping [ErrCorrupt] that names each of their keys: the list is still
// good, and the CLI can print it and warn.
func (s *Store) List(ctx context.Context) ([]Subscriber, error) {
	entries, err := s.entries(ctx)
	if err != nil {
		return nil, err
	}
	subs := make([]Subscriber, 0, len(entries))
	var bad []error
	for _, e := range entries {
		sub, _, err := decode(e.Key(), e.Value(), s.keys)
		if err != nil {
			bad = append(bad, err)
			continue
		}
		subs = append(subs, sub)
	}
	slices.SortFunc(subs, func(a, b Subscriber) int { return cmp.Compare(a.ID, b.ID) })
	return subs, errors.Join(bad...)
}

// list is List without the errors for corrupt values, for decisions that
// must not be blocked by someone else's junk.
func (s *Store) list(ctx context.Context) ([]Subscriber, error) {
	subs, err := s.List(ctx)
	if err != nil && !errors.Is(err, ErrCorrupt) {
		return nil, err
	}
	return subs, nil
}

// entries reads the latest value of every key that is not deleted.
func (s *Store) entries(ctx context.Context) ([]jetstream.KeyValueEntry, error) {
	w, err := s.kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("reading KV bucket %s: %w", streams.SubscribersBucket, err)
	}
	defer stopWatcher(w)
	var entries []jetstream.KeyValueEntry
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return nil, fmt.Errorf("reading KV bucket %s: %w", streams.SubscribersBucket, errWatchEnded)
			}
			if e == nil {
				return entries, nil
			}
			entries = append(entries, e)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Delete removes the subscriber with the given id, with its history, since
// older values hold its secrets. It returns an error wrapping [ErrNotFound]
// when there is none. Its queued deliveries stay in DELIVERIES; the lanes
// decide what becomes of them.
func (s *Store) Delete(ctx context.Context, id string) error {
	if err := ValidateID(id); err != nil {
		return err
	}
	for {
		entry, err := s.kv.Get(ctx, id)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("%w: %s", ErrNotFound, id)
		}
		if err != nil {
			return fmt.Errorf("reading %s: %w", id, err)
		}
		if s.beforeWrite != nil {
			s.beforeWrite()
		}
		err = s.kv.Purge(ctx, id, jetstream.LastRevision(entry.Revision()))
		if isConflict(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("deleting %s: %w", id, err)
		}
		return nil
	}
}

// Removed reports whether the subscriber with the given id was removed with
// [Store.Delete] and not added again: its key's last record is the marker
// Delete leaves. An id that never was reports false, so that the lanes can
// drop the deliveries of a removed subscriber, as relay sub rm asks, and
// still dead-letter those of an id nobody added.
func (s *Store) Removed(ctx context.Context, id string) (bool, error) {
	// The direct get the bucket's own Get makes, by the key's subject (the
	// same permission): it reads the marker, which Get reports as no key.
	ctx, cancel := context.WithTimeout(ctx, removedTimeout)
	defer cancel()
	m, err := s.nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET.KV_"+streams.SubscribersBucket+".$KV."+streams.SubscribersBucket+"."+id, nil)
	if err != nil {
		return false, fmt.Errorf("reading %s: %w", id, err)
	}
	switch status := m.Header.Get(streams.HeaderStatus); status {
	case "":
	case "404":
		return false, nil
	default:
		return false, fmt.Errorf("reading %s: status %s %s", id, status, m.Header.Get(streams.HeaderDescription))
	}
	op := m.Header.Get("KV-Operation")
	return op == "PURGE" || op == "DEL", nil
}

// SetDisabled disables the subscriber with the given id, saying why, or
// enables it again (the reason is then cleared). The relay disables a
// subscriber that answers 410 Gone; `relay sub enable|disable` call it too.
// It reads the stored value and writes it back only if the key has not
// changed in between, retrying otherwise, so a concurrent [Store.Put] is
// neither overwritten with stale data nor able to undo this change. Setting
// the state a subscriber already has is a no-op. It returns an error wrapping
// [ErrNotFound] when there is no such subscriber.
func (s *Store) SetDisabled(ctx context.Context, id string, disabled bool, reason string) error {
	_, err := s.setDisabled(ctx, id, disabled, reason, false)
	return err
}

// Disable is [Store.SetDisabled] to disabled, for the relay that disables a
// gone subscriber: it also returns when its write disabled it, zero when
// the subscriber was disabled already, so that of several relays disabling
// it at once only the one whose write did it reports it.
func (s *Store) Disable(ctx context.Context, id, reason string) (at time.Time, err error) {
	return s.setDisabled(ctx, id, true, reason, true)
}

// setDisabled is SetDisabled, returning the UpdatedAt of its write (zero
// when nothing was written); with keep, a subscriber disabled already keeps
// its reason (the first relay's 410 is the one reported).
func (s *Store) setDisabled(ctx context.Context, id string, disabled bool, reason string, keep bool) (time.Time, error) {
	if !disabled {
		reason = ""
	}
	reason = truncate(reason, maxReasonLen)
	for {
		if err := ctx.Err(); err != nil {
			return time.Time{}, err
		}
		cur, rev, err := s.read(ctx, id)
		if err != nil {
			return time.Time{}, err
		}
		if cur.Disabled == disabled && cur.DisabledReason == reason {
			return time.Time{}, nil
		}
		if keep && cur.Disabled {
			return time.Time{}, nil
		}
		if cur.sealedWith != "" {
			return time.Time{}, cur.sealedError()
		}
		cur.Disabled = disabled
		cur.DisabledReason = reason
		cur.UpdatedAt = s.now().UTC()
		retry, err := s.write(ctx, cur, rev)
		if retry {
			continue
		}
		if err != nil {
			return time.Time{}, err
		}
		return cur.UpdatedAt, nil
	}
}

// read returns the stored subscriber with its revision. A value that is not
// a valid subscriber is reported with [ErrCorrupt] and its revision, so that
// Put can replace it.
func (s *Store) read(ctx context.Context, id string) (Subscriber, uint64, error) {
	if err := ValidateID(id); err != nil {
		return Subscriber{}, 0, err
	}
	entry, err := s.kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Subscriber{}, 0, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return Subscriber{}, 0, fmt.Errorf("reading %s: %w", id, err)
	}
	sub, _, err := decode(id, entry.Value(), s.keys)
	if err != nil {
		return Subscriber{}, entry.Revision(), err
	}
	return sub, entry.Revision(), nil
}

// write stores sub if its key is still at revision rev (0: if it does not
// exist). It reports retry when another write got there first.
func (s *Store) write(ctx context.Context, sub Subscriber, rev uint64) (retry bool, err error) {
	data, err := encode(sub, s.keys)
	if err != nil {
		return false, err
	}
	if s.beforeWrite != nil {
		s.beforeWrite()
	}
	if rev == 0 {
		_, err = s.kv.Create(ctx, sub.ID, data)
	} else {
		_, err = s.kv.Update(ctx, sub.ID, data, rev)
	}
	if isConflict(err) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("writing %s: %w", sub.ID, err)
	}
	return false, nil
}

// isConflict reports whether a compare-and-set write lost a race.
// Create reports ErrKeyExists, Update and Delete ErrKeyRevisionMismatch.
func isConflict(err error) bool {
	return errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch)
}

// decode reads a value of the bucket, opening its sealed credentials with
// keys (see seal.go); stale reports a credential not sealed under the
// current key. A value without an id takes its key's;
// one whose id differs from its key is refused, because relay would route
// its deliveries under the wrong name. Missing settings get their defaults,
// and the result must pass Validate: a value written around relay gets no
// more latitude than `relay sub add` gives.
func decode(key string, value []byte, keys *secrets.Keyring) (sub Subscriber, stale bool, err error) {
	if err := json.Unmarshal(value, &sub); err != nil {
		return Subscriber{}, false, fmt.Errorf("%w: key %q: %w", ErrCorrupt, key, err)
	}
	if sub.ID == "" {
		sub.ID = key
	}
	if sub.ID != key {
		return Subscriber{}, false, fmt.Errorf("%w: key %q holds subscriber id %s", ErrCorrupt, key, quote(sub.ID))
	}
	if stale, err = sub.open(keys); err != nil {
		return Subscriber{}, false, fmt.Errorf("%w: key %q: %w", ErrCorrupt, key, err)
	}
	sub.SetDefaults()
	if err := sub.compileFilter(); err != nil {
		return Subscriber{}, false, fmt.Errorf("%w: key %q: %w", ErrCorrupt, key, err)
	}
	if err := sub.Validate(); err != nil {
		return Subscriber{}, false, fmt.Errorf("%w: key %q: %w", ErrCorrupt, key, err)
	}
	return sub, stale, nil
}

// truncate shortens s to at most n bytes without splitting a character.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
