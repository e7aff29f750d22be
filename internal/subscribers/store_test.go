package subscribers

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

// newStore starts a server with the relay buckets and opens a Store on it.
func newStore(t *testing.T) (*Store, *testutil.NATS) {
	t.Helper()
	n := testutil.StartRelayNATS(t)
	st, err := Open(testutil.Context(t), n.JS)
	require.NoError(t, err)
	return st, n
}

// rawKV returns the bucket itself, for writing what relay never writes.
func rawKV(t *testing.T, n *testutil.NATS) jetstream.KeyValue {
	t.Helper()
	kv, err := n.JS.KeyValue(testutil.Context(t), streams.SubscribersBucket)
	require.NoError(t, err)
	return kv
}

// fakeClock returns a clock that is advanced by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

// fakeNow sets st's clock to a fake one at a fixed start, returned with it.
func fakeNow(st *Store) (time.Time, *fakeClock) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clock := &fakeClock{now: t0}
	st.now = clock.Now
	return t0, clock
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

func TestOpenWithoutBucket(t *testing.T) {
	t.Parallel()
	n := testutil.StartNATS(t)
	_, err := Open(testutil.Context(t), n.JS)
	require.ErrorIs(t, err, jetstream.ErrBucketNotFound)
	require.Contains(t, err.Error(), "relay run")
	require.Contains(t, err.Error(), streams.SubscribersBucket)

	_, err = Open(testutil.Context(t), nil)
	require.Error(t, err)
}

func TestStoreCRUD(t *testing.T) {
	t.Parallel()
	st, _ := newStore(t)
	ctx := testutil.Context(t)

	subs, err := st.List(ctx)
	require.NoError(t, err)
	require.NotNil(t, subs)
	require.Empty(t, subs)
	out, err := json.Marshal(subs)
	require.NoError(t, err)
	require.Equal(t, "[]", string(out))

	b := Subscriber{ID: "b", URL: "https://b.example/hook", Secrets: []string{secretA}, Rate: 2.5}
	require.NoError(t, st.Put(ctx, b))
	a := valid("a")
	a.Secrets = []string{secretB, secretA}
	require.NoError(t, st.Put(ctx, a))

	got, err := st.Get(ctx, "b")
	require.NoError(t, err)
	want := b
	want.SetDefaults()
	require.Equal(t, 3, want.Burst)
	require.False(t, got.CreatedAt.IsZero())
	require.Equal(t, time.UTC, got.CreatedAt.Location())
	require.Equal(t, got.CreatedAt, got.UpdatedAt)
	want.CreatedAt, want.UpdatedAt = got.CreatedAt, got.UpdatedAt
	require.Equal(t, want, got)

	got, err = st.Get(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, a.Secrets, got.Secrets, "secrets are stored in full, newest first")
	require.Equal(t, a.Headers, got.Headers)
	require.Equal(t, a.Events, got.Events)

	subs, err = st.List(ctx)
	require.NoError(t, err)
	require.Len(t, subs, 2)
	require.Equal(t, "a", subs[0].ID)
	require.Equal(t, "b", subs[1].ID)

	require.NoError(t, st.Delete(ctx, "a"))
	_, err = st.Get(ctx, "a")
	require.ErrorIs(t, err, ErrNotFound)
	require.Contains(t, err.Error(), "a")
	err = st.Delete(ctx, "a")
	require.ErrorIs(t, err, ErrNotFound)
	err = st.SetDisabled(ctx, "a", true, "x")
	require.ErrorIs(t, err, ErrNotFound)

	subs, err = st.List(ctx)
	require.NoError(t, err)
	require.Len(t, subs, 1)
	require.Equal(t, "b", subs[0].ID)

	// A deleted id can be added again.
	require.NoError(t, st.Put(ctx, valid("a")))
	_, err = st.Get(ctx, "a")
	require.NoError(t, err)
}

func TestStoreDeleteDropsHistory(t *testing.T) {
	t.Parallel()
	st, n := newStore(t)
	ctx := testutil.Context(t)
	s := valid("a")
	require.NoError(t, st.Put(ctx, s))
	s.Secrets = []string{secretB}
	require.NoError(t, st.Put(ctx, s))
	require.NoError(t, st.Delete(ctx, "a"))

	history, err := rawKV(t, n).History(ctx, "a")
	require.NoError(t, err)
	for _, e := range history {
		require.NotContains(t, string(e.Value()), "whsec_", "old secrets must not linger in the bucket")
	}
}

func TestStoreRefusesInvalid(t *testing.T) {
	t.Parallel()
	st, _ := newStore(t)
	ctx := testutil.Context(t)

	s := valid("a")
	s.URL = "ftp://x"
	err := st.Put(ctx, s)
	require.ErrorIs(t, err, ErrInvalid)
	require.Equal(t, `--url: must be an http or https URL with a host, got "ftp://x"`, err.Error())
	_, err = st.Get(ctx, "a")
	require.ErrorIs(t, err, ErrNotFound, "nothing was stored")

	for _, id := range []string{"", "a.b", "a b", "*", ">"} {
		_, err = st.Get(ctx, id)
		require.ErrorIs(t, err, ErrInvalid, "Get(%q)", id)
		require.ErrorIs(t, st.Delete(ctx, id), ErrInvalid, "Delete(%q)", id)
		require.ErrorIs(t, st.SetDisabled(ctx, id, true, ""), ErrInvalid, "SetDisabled(%q)", id)
	}
}

func TestPutKeepsCreatedAtAndDisabled(t *testing.T) {
	t.Parallel()
	st, _ := newStore(t)
	ctx := testutil.Context(t)
	clock := &fakeClock{now: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)}
	st.now = clock.Now

	require.NoError(t, st.Put(ctx, valid("a")))
	created := clock.Now()

	clock.Set(created.Add(time.Minute))
	require.NoError(t, st.SetDisabled(ctx, "a", true, "410 Gone"))

	clock.Set(created.Add(time.Hour))
	s := valid("a")
	s.URL = "https://new.example/hook"
	s.CreatedAt = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC) // ignored on replace
	require.NoError(t, st.Put(ctx, s))

	got, err := st.Get(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, "https://new.example/hook", got.URL)
	require.Equal(t, created, got.CreatedAt)
	require.Equal(t, created.Add(time.Hour), got.UpdatedAt)
	require.True(t, got.Disabled, "adding a disabled subscriber again does not enable it")
	require.Equal(t, "410 Gone", got.DisabledReason)

	// A new subscriber takes Disabled and CreatedAt as given.
	n := valid("n")
	n.Disabled, n.DisabledReason = true, "not yet"
	n.CreatedAt = time.Date(2020, 1, 1, 0, 0, 0, 0, time.FixedZone("x", 3600))
	require.NoError(t, st.Put(ctx, n))
	got, err = st.Get(ctx, "n")
	require.NoError(t, err)
	require.True(t, got.Disabled)
	require.Equal(t, "not yet", got.DisabledReason)
	require.Equal(t, time.Date(2019, 12, 31, 23, 0, 0, 0, time.UTC), got.CreatedAt)
}

func TestSetDisabled(t *testing.T) {
	t.Parallel()
	st, n := newStore(t)
	ctx := testutil.Context(t)
	kv := rawKV(t, n)
	require.NoError(t, st.Put(ctx, valid("a")))

	require.NoError(t, st.SetDisabled(ctx, "a", true, "410 Gone from https://x"))
	got, err := st.Get(ctx, "a")
	require.NoError(t, err)
	require.True(t, got.Disabled)
	require.Equal(t, "410 Gone from https://x", got.DisabledReason)

	before, err := kv.Get(ctx, "a")
	require.NoError(t, err)
	require.NoError(t, st.SetDisabled(ctx, "a", true, "410 Gone from https://x"))
	after, err := kv.Get(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, before.Revision(), after.Revision(), "setting the same state writes nothing")

	require.NoError(t, st.SetDisabled(ctx, "a", false, "ignored"))
	got, err = st.Get(ctx, "a")
	require.NoError(t, err)
	require.False(t, got.Disabled)
	require.Empty(t, got.DisabledReason, "enabling clears the reason")
}

// TestSetDisabledRetriesOnConflict puts a Put exactly between SetDisabled's
// read and its write: the write must fail its revision check and be retried
// on the new value, keeping both changes.
func TestSetDisabledRetriesOnConflict(t *testing.T) {
	t.Parallel()
	st, n := newStore(t)
	ctx := testutil.Context(t)
	other, err := Open(ctx, n.JS)
	require.NoError(t, err)
	require.NoError(t, st.Put(ctx, valid("a")))

	var once sync.Once
	writes := 0
	st.beforeWrite = func() {
		writes++
		once.Do(func() {
			s := valid("a")
			s.URL = "https://moved.example/hook"
			require.NoError(t, other.Put(ctx, s))
		})
	}
	require.NoError(t, st.SetDisabled(ctx, "a", true, "gone"))
	require.Equal(t, 2, writes, "the first write lost the race and was retried")

	got, err := st.Get(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, "https://moved.example/hook", got.URL, "the concurrent Put survived")
	require.True(t, got.Disabled, "the disable survived")
	require.Equal(t, "gone", got.DisabledReason)
}

// TestPutRetriesOnConflict is the other order: a SetDisabled between Put's
// read and its write.
func TestPutRetriesOnConflict(t *testing.T) {
	t.Parallel()
	st, n := newStore(t)
	ctx := testutil.Context(t)
	other, err := Open(ctx, n.JS)
	require.NoError(t, err)
	require.NoError(t, st.Put(ctx, valid("a")))

	var once sync.Once
	st.beforeWrite = func() {
		once.Do(func() { require.NoError(t, other.SetDisabled(ctx, "a", true, "gone")) })
	}
	s := valid("a")
	s.URL = "https://moved.example/hook"
	require.NoError(t, st.Put(ctx, s))

	got, err := st.Get(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, "https://moved.example/hook", got.URL)
	require.True(t, got.Disabled)

	// A Create that loses to another Create is retried as a replace.
	var created sync.Once
	st.beforeWrite = func() {
		created.Do(func() { require.NoError(t, other.Put(ctx, valid("new"))) })
	}
	require.NoError(t, st.Put(ctx, valid("new")))

	// So is a Delete that loses to a Put.
	var put sync.Once
	st.beforeWrite = func() {
		put.Do(func() { require.NoError(t, other.Put(ctx, valid("new"))) })
	}
	require.NoError(t, st.Delete(ctx, "new"))
	_, err = st.Get(ctx, "new")
	require.ErrorIs(t, err, ErrNotFound)
}

// TestSetDisabledRacesPut runs the two for real, many times, from
// goroutines with their own Stores: whatever the interleaving, both changes
// are kept.
func TestSetDisabledRacesPut(t *testing.T) {
	t.Parallel()
	st, n := newStore(t)
	ctx := testutil.Context(t)
	other, err := Open(ctx, n.JS)
	require.NoError(t, err)
	require.NoError(t, st.Put(ctx, valid("a")))

	for round := range 20 {
		url := fmt.Sprintf("https://r%d.example/hook", round)
		disable := round%2 == 0
		start := make(chan struct{})
		var wg sync.WaitGroup
		errs := make(chan error, 2)
		wg.Go(func() {
			<-start
			s := valid("a")
			s.URL = url
			errs <- st.Put(ctx, s)
		})
		wg.Go(func() {
			<-start
			errs <- other.SetDisabled(ctx, "a", disable, "round")
		})
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		got, err := st.Get(ctx, "a")
		require.NoError(t, err)
		require.Equal(t, url, got.URL, "round %d", round)
		require.Equal(t, disable, got.Disabled, "round %d", round)
	}
}

func TestDedicatedCap(t *testing.T) {
	t.Parallel()
	st, _ := newStore(t)
	ctx := testutil.Context(t)

	for i := range MaxDedicated {
		s := valid(fmt.Sprintf("d%02d", i))
		s.Dedicated = true
		require.NoError(t, st.Put(ctx, s))
	}
	shared := valid("shared")
	require.NoError(t, st.Put(ctx, shared), "shared lanes are not capped")

	extra := valid("extra")
	extra.Dedicated = true
	err := st.Put(ctx, extra)
	require.ErrorIs(t, err, ErrTooManyDedicated)
	require.ErrorIs(t, err, ErrInvalid, "the CLI exits 2 on it")
	require.Contains(t, err.Error(), "shared lane")
	require.Contains(t, err.Error(), "--lane")
	require.NotContains(t, err.Error(), "\n")
	_, err = st.Get(ctx, "extra")
	require.ErrorIs(t, err, ErrNotFound)

	shared.Dedicated = true
	require.ErrorIs(t, st.Put(ctx, shared), ErrTooManyDedicated, "an existing shared subscriber cannot move either")

	again := valid("d05")
	again.Dedicated = true
	again.Rate = 99
	require.NoError(t, st.Put(ctx, again), "one that has a dedicated lane keeps it")

	require.NoError(t, st.Delete(ctx, "d00"))
	require.NoError(t, st.Put(ctx, extra), "a freed slot can be taken")
}

func TestStoreCorruptValues(t *testing.T) {
	t.Parallel()
	st, n := newStore(t)
	ctx := testutil.Context(t)
	kv := rawKV(t, n)

	require.NoError(t, st.Put(ctx, valid("good")))
	_, err := kv.PutString(ctx, "junk", "{not json")
	require.NoError(t, err)
	_, err = kv.PutString(ctx, "wrong-id", fmt.Sprintf(`{"id":"other","url":"https://x.example","secrets":[%q]}`, secretA))
	require.NoError(t, err)
	_, err = kv.PutString(ctx, "bad-url", fmt.Sprintf(`{"url":"ftp://x","secrets":[%q]}`, secretA))
	require.NoError(t, err)
	_, err = kv.PutString(ctx, "minimal", fmt.Sprintf(`{"url":"https://x.example","secrets":[%q],"timeout":"3s"}`, secretA))
	require.NoError(t, err)

	_, err = st.Get(ctx, "junk")
	require.ErrorIs(t, err, ErrCorrupt)
	require.Contains(t, err.Error(), `"junk"`)
	_, err = st.Get(ctx, "wrong-id")
	require.ErrorIs(t, err, ErrCorrupt)
	_, err = st.Get(ctx, "bad-url")
	require.ErrorIs(t, err, ErrCorrupt)
	require.ErrorIs(t, err, ErrInvalid)

	minimal, err := st.Get(ctx, "minimal")
	require.NoError(t, err, "a hand-written value gets its id from the key and the defaults")
	require.Equal(t, "minimal", minimal.ID)
	require.Equal(t, Duration(3*time.Second), minimal.Timeout)
	require.Equal(t, DefaultMaxAttempts, minimal.MaxAttempts)

	subs, err := st.List(ctx)
	require.ErrorIs(t, err, ErrCorrupt)
	for _, key := range []string{"junk", "wrong-id", "bad-url"} {
		require.Contains(t, err.Error(), key)
	}
	require.Len(t, subs, 2, "the valid ones are still listed")
	require.Equal(t, "good", subs[0].ID)
	require.Equal(t, "minimal", subs[1].ID)

	dedicated := valid("big")
	dedicated.Dedicated = true
	require.NoError(t, st.Put(ctx, dedicated), "junk does not block the dedicated count")

	require.NoError(t, st.Put(ctx, valid("junk")), "Put replaces junk")
	_, err = st.Get(ctx, "junk")
	require.NoError(t, err)
	require.ErrorIs(t, st.SetDisabled(ctx, "wrong-id", true, ""), ErrCorrupt)
	require.NoError(t, st.Delete(ctx, "wrong-id"), "junk can be deleted")
}

func TestStoreHonoursContext(t *testing.T) {
	t.Parallel()
	st, _ := newStore(t)
	ctx, cancel := context.WithCancel(testutil.Context(t))
	cancel()
	require.ErrorIs(t, st.Put(ctx, valid("a")), context.Canceled)
	require.ErrorIs(t, st.SetDisabled(ctx, "a", true, ""), context.Canceled)
	_, err := st.List(ctx)
	require.Error(t, err)
}

// Removed tells a subscriber relay sub rm removed from an id nobody added,
// so that the lanes drop the deliveries of the one and dead-letter those of
// the other.
func TestStoreRemoved(t *testing.T) {
	t.Parallel()
	st, _ := newStore(t)
	ctx := testutil.Context(t)
	removed := func() bool {
		t.Helper()
		r, err := st.Removed(ctx, "a")
		require.NoError(t, err)
		return r
	}
	require.False(t, removed(), "never added")
	require.NoError(t, st.Put(ctx, valid("a")))
	require.False(t, removed(), "there")
	require.NoError(t, st.Delete(ctx, "a"))
	require.True(t, removed(), "removed")
	require.NoError(t, st.Put(ctx, valid("a")))
	require.False(t, removed(), "added again")
}

// TestStoreRemovedEndsWhenTheReplyIsLost: the lanes ask Removed with a
// context that never ends (a delivery's settling outlives the relay's stop),
// so a reply lost on the way back must not hold the lookup, and every later
// lookup of the id, for ever: Removed gives up on its own.
func TestStoreRemovedEndsWhenTheReplyIsLost(t *testing.T) {
	t.Parallel()
	st, n := newStore(t)
	ctx := testutil.Context(t)
	require.NoError(t, st.Put(ctx, valid("a")))
	require.NoError(t, st.Delete(ctx, "a"))
	proxy := testutil.StartDropProxy(t, strings.TrimPrefix(n.URL, "nats://"), func(payload []byte) bool {
		return bytes.Contains(payload, []byte("KV-Operation: PURGE"))
	})
	nc := testutil.Connect(t, proxy.URL())
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	lossy, err := Open(ctx, js)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := lossy.Removed(context.Background(), "a")
		done <- err
	}()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.DeadlineExceeded)
	case <-time.After(removedTimeout + 30*time.Second):
		t.Fatal("Removed still waits for a reply that was lost")
	}
}

// TestCreateKeepsAValueItCannotRead: relay sub add without --force never
// replaces what is stored under the id, even a value this build cannot
// decode (one a newer relay wrote, say): that would be the silent rotation
// Create exists to refuse.
func TestCreateKeepsAValueItCannotRead(t *testing.T) {
	t.Parallel()
	st, n := newStore(t)
	ctx := testutil.Context(t)
	kv := rawKV(t, n)
	stored := []byte(`{"id":"a","url":42}`)
	_, err := kv.Put(ctx, "a", stored)
	require.NoError(t, err)
	err = st.Put(ctx, valid("a"), Create())
	require.ErrorIs(t, err, ErrExists)
	require.Contains(t, err.Error(), "subscriber a exists")
	e, err := kv.Get(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, stored, e.Value())
}

// TestStoreRemovedErrorNamesNoPackage: what Removed returns reaches relay's
// log and its commands, and names the key, not the package.
func TestStoreRemovedErrorNamesNoPackage(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	nc := testutil.Connect(t, n.URL)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	st, err := Open(testutil.Context(t), js)
	require.NoError(t, err)
	nc.Close()
	_, err = st.Removed(testutil.Context(t), "a")
	require.Error(t, err)
	require.NotContains(t, err.Error(), "subscribers:")
	require.Contains(t, err.Error(), "reading a")
}
