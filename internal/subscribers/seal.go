package subscribers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/internal/secrets"
)

// Sealing: every credential a subscriber holds (its signing secrets and
// keys, active and previous, its OAuth2 client secret, its mTLS private key)
// is sealed with the store's keyring ([WithKeys]) when it is written, and
// opened when it is read, in encode and decode, the one place each way, so
// that every command and every relay's [Live] view follow the same rule.
// Each is bound to the subscriber's id. Without a keyring values are
// written in the clear, as before sealing existed, and a clear value is
// always read.
//
// A value sealed under a key the keyring lacks is still read: the
// subscriber is kept, its credentials sealed, and [Subscriber.SealedWith]
// names the key it needs. Such a subscriber is held as a paused one is
// ([Subscriber.PausedAt]): it gets its copies and the lanes send nothing of
// it, neither unsigned nor dead-lettered, until a relay with the key reads
// it. It can be neither signed for ([Subscriber.Request]) nor written back.

// secretFields calls f with each credential of s that is set, and the
// field it is sealed for, so that sealing and opening visit the same
// fields. s must share no slice or pointer with a value still in use (see
// clone).
func (s *Subscriber) secretFields(f func(field string, v *string) error) error {
	for i := range s.Secrets {
		if err := f(fieldSecret, &s.Secrets[i]); err != nil {
			return err
		}
	}
	for i := range s.PreviousSecrets {
		if err := f(fieldSecret, &s.PreviousSecrets[i].Secret); err != nil {
			return err
		}
	}
	if s.OAuth2 != nil && s.OAuth2.ClientSecret != "" {
		if err := f(fieldClientSecret, &s.OAuth2.ClientSecret); err != nil {
			return err
		}
	}
	if s.TLS != nil && s.TLS.ClientKey != "" {
		if err := f(fieldClientKey, &s.TLS.ClientKey); err != nil {
			return err
		}
	}
	return nil
}

// The fields a credential is sealed for. A sealed value opens only for
// its subscriber and its field: one moved by a writer of the bucket from a
// signing secret into an OAuth2 client secret, which relay sends to a token
// URL the writer may have set, does not open. A signing secret may move
// between active and previous (a rotation) and keeps its field.
const (
	fieldSecret       = "secret"
	fieldClientSecret = "oauth2.client_secret"
	fieldClientKey    = "tls.client_key"
)

// sealContext is what a credential of the subscriber id is bound to.
func sealContext(id, field string) string { return id + "\x00" + field }

// SealedWith is the id of the key that sealed a credential of s, when the
// keyring it was read with lacks that key; empty when every credential of
// s is open (or was never sealed).
func (s Subscriber) SealedWith() string { return s.sealedWith }

// sealedError is the error of a subscriber that cannot be used or written
// because a credential of it is sealed under a key not given.
func (s Subscriber) sealedError() error {
	return &SealedError{ID: s.ID, KeyID: s.sealedWith}
}

// encode is the value of sub in the bucket: JSON, its credentials sealed
// with keys (in the clear when keys is nil). A subscriber whose credentials
// could not be opened is refused with a [*SealedError]: writing it would
// store what it could not read.
func encode(sub Subscriber, keys *secrets.Keyring) ([]byte, error) {
	if sub.sealedWith != "" {
		return nil, sub.sealedError()
	}
	c := sub.clone()
	if err := c.secretFields(func(field string, v *string) error {
		sealed, err := keys.Seal(*v, sealContext(c.ID, field))
		*v = sealed
		return err
	}); err != nil {
		return nil, fmt.Errorf("sealing %s: %w", sub.ID, err)
	}
	data, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("encoding %s: %w", sub.ID, err)
	}
	return data, nil
}

// open opens the sealed credentials of s with keys. One sealed under a key
// keys lacks stays sealed, and the first such key's id is kept in
// sealedWith. stale reports whether a credential is not sealed under the
// current key of keys (clear, or sealed with an older key): what
// [Store.Reseal] rewrites. A sealed value that does not open under its key
// is an error wrapping [secrets.ErrTampered].
func (s *Subscriber) open(keys *secrets.Keyring) (stale bool, err error) {
	current := keys.Current()
	err = s.secretFields(func(field string, v *string) error {
		id, sealed := secrets.SealedWith(*v)
		if id != current {
			stale = true
		}
		if !sealed {
			return nil
		}
		plain, err := keys.Open(*v, sealContext(s.ID, field))
		var missing *secrets.MissingKeyError
		if errors.As(err, &missing) {
			if s.sealedWith == "" {
				s.sealedWith = missing.KeyID
			}
			return nil
		}
		if err != nil {
			return err
		}
		*v = plain
		return nil
	})
	return stale && keys != nil, err
}

// Reseal rewrites every subscriber whose credentials are not all sealed
// under the current key of the store's keyring (clear ones, and ones sealed
// with an older key of it), sealed under the current key: `relay secrets
// rotate-key`. Each rewrite is a compare-and-set on the revision read, so a
// concurrent change is never undone (it is read again and, if need be,
// sealed again); nothing else of a subscriber changes. A subscriber stays
// readable throughout by any relay whose keyring holds both keys, the old
// and the new. It returns how many it rewrote; one it cannot read (sealed
// with a key the keyring lacks, or corrupt) is left as it is and named in
// the error, after the others are done.
func (s *Store) Reseal(ctx context.Context) (int, error) {
	if s.keys == nil {
		return 0, ErrNoKeys
	}
	entries, err := s.entries(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, e := range entries {
		wrote, err := s.reseal(ctx, e.Key())
		if ctx.Err() != nil {
			return n, ctx.Err()
		}
		if err != nil {
			errs = append(errs, err)
		}
		if wrote {
			n++
		}
	}
	return n, errors.Join(errs...)
}

// reseal rewrites the subscriber with the given id under the current key
// when a credential of it is not sealed under it, and reports whether it
// wrote.
func (s *Store) reseal(ctx context.Context, id string) (bool, error) {
	for {
		entry, err := s.kv.Get(ctx, id)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("reading %s: %w", id, err)
		}
		sub, stale, err := decode(id, entry.Value(), s.keys)
		if err != nil {
			return false, err
		}
		if sub.sealedWith != "" {
			return false, sub.sealedError()
		}
		if !stale {
			return false, nil
		}
		retry, err := s.write(ctx, sub, entry.Revision())
		if retry {
			continue
		}
		return err == nil, err
	}
}

// LogSealed logs one line, at error level, for each subscriber of the view
// whose credentials are sealed with a key the view was not given, naming it
// and the id of the key it needs: such a subscriber is held, and nothing
// else says why. It logs again only when the subscriber comes back sealed
// after it was readable or gone, or needs another key. It returns when ctx
// is cancelled or the view stops.
func (l *Live) LogSealed(ctx context.Context, log *slog.Logger) {
	logged := map[string]string{}
	for {
		changed := l.Changed()
		sealed := l.Sealed()
		for id, key := range sealed {
			if logged[id] != key {
				log.Error("subscriber's secrets are sealed with a key this relay was not given: its deliveries are held, none sent or dead-lettered, until a relay with the key reads it",
					"subscriber", id, "key_id", key)
				logged[id] = key
			}
		}
		for id := range logged {
			if _, ok := sealed[id]; !ok {
				delete(logged, id)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-l.Done():
			return
		case <-changed:
		}
	}
}
