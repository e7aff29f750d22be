package apikeys

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/streams"
)

// Prefix begins every key, so that a key is recognised when it leaks (a
// secret scanner's pattern) and told apart from a subscriber's whsec_.
const Prefix = "rk_"

// keyBytes is how many random bytes a key holds.
const keyBytes = 32

// maxNameLen bounds a key's name, a KV key shown in logs.
const maxNameLen = 64

// Key is what relay keeps of a key: never the key itself.
type Key struct {
	// Name names the key in `relay key ls`, the access log and errors.
	Name string `json:"name"`
	// Hash is the SHA-256 of the key, in hex. Never shown.
	Hash string `json:"hash"`
	// Scopes are what the key may do.
	Scopes []Scope `json:"scopes"`
	// CreatedAt is when the key was made.
	CreatedAt time.Time `json:"created_at"`
	// LastUsedAt is when a relay last took a request with the key, to
	// within [lastUseEvery]; nil when never.
	LastUsedAt *time.Time `json:"last_used_at"`
}

// Shown is a key as `relay key ls --json` prints it: without its hash.
type Shown struct {
	Name       string     `json:"name"`
	Scopes     []Scope    `json:"scopes"`
	CreatedAt  time.Time  `json:"created_at"`
	LastUsedAt *time.Time `json:"last_used_at"`
}

// Shown is k without its hash.
func (k Key) Shown() Shown {
	return Shown{Name: k.Name, Scopes: k.Scopes, CreatedAt: k.CreatedAt, LastUsedAt: k.LastUsedAt}
}

// ValidateName says whether name can name a key: 1 to 64 characters from
// A-Z a-z 0-9 _ -, an error wrapping [ErrInvalidName] otherwise.
func ValidateName(name string) error {
	ok := name != "" && len(name) <= maxNameLen
	for i := 0; ok && i < len(name); i++ {
		c := name[i]
		ok = 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-'
	}
	if !ok {
		return fmt.Errorf("%w: must be 1 to %d characters from A-Z a-z 0-9 _ -, got %q", ErrInvalidName, maxNameLen, name)
	}
	return nil
}

// hashOf is the SHA-256 of key, the form relay keeps.
func hashOf(key string) [sha256.Size]byte { return sha256.Sum256([]byte(key)) }

// newKey makes a key: [Prefix] and [keyBytes] random bytes.
func newKey() (string, error) {
	b := make([]byte, keyBytes)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return Prefix + base64.RawURLEncoding.EncodeToString(b), nil
}

// Store reads and writes the bucket [streams.KeysBucket].
type Store struct {
	kv  jetstream.KeyValue
	now func() time.Time
}

// Open opens the bucket, which [streams.EnsureKeys] creates (relay key
// add, relay run --api).
func Open(ctx context.Context, js jetstream.JetStream) (*Store, error) {
	kv, err := js.KeyValue(ctx, streams.KeysBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("KV bucket %s does not exist (relay key add creates it): %w", streams.KeysBucket, err)
	}
	if err != nil {
		return nil, fmt.Errorf("opening KV bucket %s: %w", streams.KeysBucket, err)
	}
	return &Store{kv: kv, now: time.Now}, nil
}

// Add makes a key named name with scopes, stores its hash, and returns the
// key: the only time it is known. A name in use is refused with
// [ErrExists]; the stored key stays as it was.
func (s *Store) Add(ctx context.Context, name string, scopes []Scope) (string, error) {
	if err := ValidateName(name); err != nil {
		return "", err
	}
	scopes, err := CheckScopes(scopes)
	if err != nil {
		return "", err
	}
	key, err := newKey()
	if err != nil {
		return "", err
	}
	sum := hashOf(key)
	v, err := json.Marshal(Key{Name: name, Hash: hex.EncodeToString(sum[:]), Scopes: scopes, CreatedAt: s.now().UTC()})
	if err != nil {
		return "", err
	}
	if _, err := s.kv.Create(ctx, name, v); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			return "", fmt.Errorf("%w: %s (relay key rm %[2]s first)", ErrExists, name)
		}
		return "", err
	}
	return key, nil
}

// List returns every key, sorted by name; an empty, non-nil slice when
// there are none. A value that is not a key is left out.
func (s *Store) List(ctx context.Context) ([]Key, error) {
	lister, err := s.kv.ListKeys(ctx)
	if err != nil {
		return nil, err
	}
	out := []Key{}
	for name := range lister.Keys() {
		e, err := s.kv.Get(ctx, name)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if k, ok := decode(e.Value()); ok {
			out = append(out, k)
		}
	}
	slices.SortFunc(out, func(a, b Key) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Remove removes the key named name: every relay refuses it from the moment
// its [Verifier] learns of the removal. An unknown name is [ErrNotFound].
func (s *Store) Remove(ctx context.Context, name string) error {
	if err := ValidateName(name); err != nil {
		return err
	}
	if _, err := s.kv.Get(ctx, name); err != nil {
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("%w: %s", ErrNotFound, name)
		}
		return err
	}
	// Purge, not Delete: no older value, with the hash, stays.
	return s.kv.Purge(ctx, name)
}

// touch records a use of the key named name at t, unless the key changed or
// went since it was read at rev.
func (s *Store) touch(ctx context.Context, k Key, rev uint64, t time.Time) error {
	t = t.UTC()
	k.LastUsedAt = &t
	v, err := json.Marshal(k)
	if err != nil {
		return err
	}
	_, err = s.kv.Update(ctx, k.Name, v, rev)
	return err
}

// decode reads a stored value, and says whether it is a key: a name, a
// SHA-256 in hex and known scopes.
func decode(v []byte) (Key, bool) {
	var k Key
	if json.Unmarshal(v, &k) != nil || ValidateName(k.Name) != nil {
		return Key{}, false
	}
	if b, err := hex.DecodeString(k.Hash); err != nil || len(b) != sha256.Size {
		return Key{}, false
	}
	if _, err := CheckScopes(k.Scopes); err != nil {
		return Key{}, false
	}
	return k, true
}
