package apikeys

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// lastUseEvery is how often at most a key's last use is written: a busy
// key costs one bucket write a minute, not one a request.
const lastUseEvery = time.Minute

// rewatchAfter is how long the verifier waits before it watches the bucket
// again once its watch ended (NATS away, the bucket created again).
const rewatchAfter = time.Second

// stored is a key as the verifier holds it.
type stored struct {
	key  Key
	hash [sha256.Size]byte
	rev  uint64
}

// Verifier checks the keys of requests against the bucket, which it
// follows ([Verifier.Run]).
type Verifier struct {
	store *Store
	log   *slog.Logger

	mu    sync.RWMutex
	keys  map[string]stored
	ready chan struct{}
	once  sync.Once

	// used takes the names of keys whose last use is to be written.
	used chan string
}

// NewVerifier returns a verifier of the keys in s's bucket; it knows none
// until [Verifier.Run] has read them.
func NewVerifier(s *Store, log *slog.Logger) *Verifier {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Verifier{store: s, log: log, keys: map[string]stored{}, ready: make(chan struct{}), used: make(chan string, 64)}
}

// Ready is closed once the verifier has read every key of the bucket.
func (v *Verifier) Ready() <-chan struct{} { return v.ready }

// Verify returns the stored key that key is, or [ErrUnknownKey]. The key is
// hashed and its hash compared with every stored one in constant time, so
// that neither the time taken nor the error says how near a guess came.
func (v *Verifier) Verify(key string) (Key, error) {
	if !strings.HasPrefix(key, Prefix) {
		return Key{}, ErrUnknownKey
	}
	sum := hashOf(key)
	v.mu.RLock()
	var found stored
	match := 0
	for _, s := range v.keys {
		if subtle.ConstantTimeCompare(sum[:], s.hash[:]) == 1 {
			found, match = s, 1
		}
	}
	v.mu.RUnlock()
	if match == 0 {
		return Key{}, ErrUnknownKey
	}
	if last := found.key.LastUsedAt; last == nil || v.store.now().Sub(*last) >= lastUseEvery {
		select {
		case v.used <- found.key.Name:
		default: // written on a later request
		}
	}
	return found.key, nil
}

// Run follows the bucket until ctx is done: a key added is taken, a key
// removed refused, as soon as the watch delivers the change. It also writes
// the last use of keys, in a goroutine of its own that it waits for, so
// that a slow write never delays applying a change (a removal above all).
func (v *Verifier) Run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { v.touchUsed(ctx) })
	for ctx.Err() == nil {
		err := v.watch(ctx)
		if ctx.Err() != nil {
			return
		}
		v.log.Warn("apikeys: the watch of the API keys ended; watching again", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(rewatchAfter):
		}
	}
}

// errWatchEnded means the watch's channel closed.
var errWatchEnded = errors.New("the watch ended")

func (v *Verifier) watch(ctx context.Context) error {
	w, err := v.store.kv.WatchAll(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = w.Stop() }()
	fresh := map[string]stored{}
	initial := true
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return errWatchEnded
			}
			if e == nil {
				// Every key there was is read: they replace what an
				// earlier watch knew, removals made meanwhile included.
				v.mu.Lock()
				v.keys, fresh, initial = fresh, nil, false
				v.mu.Unlock()
				v.once.Do(func() { close(v.ready) })
				continue
			}
			keys := fresh
			if !initial {
				v.mu.Lock()
				keys = v.keys
			}
			apply(keys, e)
			if !initial {
				v.mu.Unlock()
			}
		}
	}
}

// apply folds one change of the bucket into keys.
func apply(keys map[string]stored, e jetstream.KeyValueEntry) {
	if e.Operation() != jetstream.KeyValuePut {
		delete(keys, e.Key())
		return
	}
	k, ok := decode(e.Value())
	if !ok || k.Name != e.Key() {
		delete(keys, e.Key())
		return
	}
	s := stored{key: k, rev: e.Revision()}
	b, _ := hex.DecodeString(k.Hash)
	copy(s.hash[:], b)
	keys[k.Name] = s
}

// touchUsed writes the last use of the keys Verify names, one at a time,
// until ctx is done.
func (v *Verifier) touchUsed(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case name := <-v.used:
			v.touch(ctx, name)
		}
	}
}

// touch writes the last use of the key named name, now, unless it was
// written less than [lastUseEvery] ago. A failure is logged at debug: the
// last use is a hint, not a record.
func (v *Verifier) touch(ctx context.Context, name string) {
	v.mu.RLock()
	s, ok := v.keys[name]
	v.mu.RUnlock()
	now := v.store.now()
	if !ok || s.key.LastUsedAt != nil && now.Sub(*s.key.LastUsedAt) < lastUseEvery {
		return
	}
	if err := v.store.touch(ctx, s.key, s.rev, now); err != nil {
		v.log.Debug("apikeys: writing a key's last use", "key", name, "err", err)
	}
}
