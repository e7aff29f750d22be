package apikeys

import (
	"context"
	"encoding/base64"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The one reading of a scope list: sorted, without repeats, spaces
// allowed; nothing, or a name not in the set, refused naming it.
func TestParseScopes(t *testing.T) {
	t.Parallel()
	got, err := ParseScopes(" status:read,publish, publish ,admin")
	if err != nil {
		t.Fatal(err)
	}
	if want := []Scope{Publish, StatusRead, Admin}; len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("ParseScopes = %v, want %v", got, want)
	}
	for _, bad := range []string{"", " , ", "publish,write", "Publish"} {
		_, err := ParseScopes(bad)
		if !errors.Is(err, ErrInvalidScope) {
			t.Errorf("ParseScopes(%q) = %v, want ErrInvalidScope", bad, err)
		}
	}
	if _, err := ParseScopes("publish,write"); !strings.Contains(err.Error(), `"write"`) || !strings.Contains(err.Error(), "subscribers:read") {
		t.Errorf("the error names neither the bad scope nor the valid ones: %v", err)
	}
	if !Allows([]Scope{Admin}, DLQWrite) || !Allows([]Scope{DLQRead}, DLQRead) || Allows([]Scope{DLQRead}, DLQWrite) {
		t.Error("Allows: admin grants all, a scope itself, and no other")
	}
}

type bundle struct {
	store *Store
	v     *Verifier
}

func setup(t *testing.T) bundle {
	t.Helper()
	n := testutil.StartRelayNATS(t)
	if err := streams.EnsureKeys(testutil.Context(t), n.JS, 0); err != nil {
		t.Fatal(err)
	}
	s, err := Open(testutil.Context(t), n.JS)
	if err != nil {
		t.Fatal(err)
	}
	v := NewVerifier(s, nil)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { v.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	<-v.Ready()
	return bundle{store: s, v: v}
}

// A key is rk_ and 32 random bytes; the bucket keeps its hash alone; the
// verifier takes it once added and refuses it once removed, and refuses
// any other string.
func TestKeyLifecycle(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := testutil.Context(t)
	key, err := b.store.Add(ctx, "backend", []Scope{Publish, Publish, StatusRead})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(key, Prefix))
	if !strings.HasPrefix(key, Prefix) || err != nil || len(raw) != 32 {
		t.Fatalf("key %q is not rk_ and 32 bytes in base64url", key)
	}
	e, err := b.store.kv.Get(ctx, "backend")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(e.Value()), key) || strings.Contains(string(e.Value()), key[len(Prefix):]) {
		t.Fatal("the bucket holds the key")
	}
	if _, err := b.store.Add(ctx, "backend", []Scope{Admin}); !errors.Is(err, ErrExists) {
		t.Fatalf("a second add of one name = %v, want ErrExists", err)
	}
	if _, err := b.store.Add(ctx, "a.b", []Scope{Admin}); !errors.Is(err, ErrInvalidName) {
		t.Fatalf("add of a name with a dot = %v, want ErrInvalidName", err)
	}
	var k Key
	testutil.Eventually(t, func() bool { k, err = b.v.Verify(key); return err == nil }, "the verifier never took the key added")
	if k.Name != "backend" || len(k.Scopes) != 2 || k.Scopes[0] != Publish || k.Scopes[1] != StatusRead {
		t.Fatalf("Verify = %+v", k)
	}
	for _, wrong := range []string{"", key[:len(key)-1], key + "x", strings.TrimPrefix(key, Prefix), k.Hash} {
		if _, err := b.v.Verify(wrong); !errors.Is(err, ErrUnknownKey) {
			t.Errorf("Verify of a wrong key = %v, want ErrUnknownKey", err)
		}
	}
	// A use is written, at most once a minute.
	testutil.Eventually(t, func() bool {
		keys, err := b.store.List(ctx)
		return err == nil && len(keys) == 1 && keys[0].LastUsedAt != nil
	}, "the key's last use was never written")
	if err := b.store.Remove(ctx, "backend"); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, func() bool { _, err := b.v.Verify(key); return errors.Is(err, ErrUnknownKey) }, "the verifier still takes a removed key")
	if err := b.store.Remove(ctx, "backend"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("removing it again = %v, want ErrNotFound", err)
	}
	if keys, err := b.store.List(ctx); err != nil || len(keys) != 0 {
		t.Fatalf("List after the removal = %v, %v", keys, err)
	}
}

// Keys there before the verifier starts are known once it is ready.
func TestVerifierReadsExistingKeys(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	ctx := testutil.Context(t)
	if err := streams.EnsureKeys(ctx, n.JS, 0); err != nil {
		t.Fatal(err)
	}
	s, err := Open(ctx, n.JS)
	if err != nil {
		t.Fatal(err)
	}
	key, err := s.Add(ctx, "old", []Scope{Admin})
	if err != nil {
		t.Fatal(err)
	}
	v := NewVerifier(s, nil)
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { v.Run(runCtx) })
	defer func() { cancel(); wg.Wait() }()
	<-v.Ready()
	if _, err := v.Verify(key); err != nil {
		t.Fatalf("Verify once ready = %v", err)
	}
}

// A last-use write that does not end (its clock held here, as a bucket
// that does not answer would hold it) delays no change of the bucket: a
// key removed meanwhile is refused.
func TestSlowLastUseDelaysNoRemoval(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	ctx := testutil.Context(t)
	if err := streams.EnsureKeys(ctx, n.JS, 0); err != nil {
		t.Fatal(err)
	}
	s, err := Open(ctx, n.JS)
	if err != nil {
		t.Fatal(err)
	}
	key, err := s.Add(ctx, "backend", []Scope{Admin})
	if err != nil {
		t.Fatal(err)
	}
	// From here the verifier's clock, read by the last-use write alone,
	// waits for release.
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	s.now = func() time.Time {
		once.Do(func() { close(held) })
		<-release
		return time.Now()
	}
	v := NewVerifier(s, nil)
	runCtx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { v.Run(runCtx) })
	t.Cleanup(func() { close(release); cancel(); wg.Wait() })
	<-v.Ready()
	if _, err := v.Verify(key); err != nil {
		t.Fatal(err)
	}
	<-held
	other, err := Open(ctx, n.JS)
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Remove(ctx, "backend"); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, func() bool { _, err := v.Verify(key); return errors.Is(err, ErrUnknownKey) },
		"a last-use write held the removal back")
}
