package subscribers

import (
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/testutil"
)

func TestPauseAndResume(t *testing.T) {
	t.Parallel()
	st, _ := newStore(t)
	ctx := testutil.Context(t)
	t0, clock := fakeNow(st)
	require.NoError(t, st.Put(ctx, valid("a")))

	sub, err := st.Pause(ctx, "a", time.Time{})
	require.NoError(t, err)
	require.True(t, sub.Paused)
	require.True(t, sub.PausedAt(t0.Add(1000*time.Hour)), "a pause without an end lasts until resume")

	until := t0.Add(30 * time.Minute).In(time.FixedZone("CET", 3600))
	sub, err = st.Pause(ctx, "a", until)
	require.NoError(t, err)
	require.Equal(t, time.UTC, sub.PausedUntil.Location())
	require.True(t, sub.PausedAt(until.Add(-time.Nanosecond)))
	require.False(t, sub.PausedAt(until), "the pause ends at its time")

	for _, past := range []time.Time{t0, t0.Add(-time.Minute)} {
		_, err = st.Pause(ctx, "a", past)
		require.ErrorIs(t, err, ErrInvalid)
		require.Contains(t, err.Error(), "--until")
	}
	_, err = st.Pause(ctx, "nobody", time.Time{})
	require.ErrorIs(t, err, ErrNotFound)

	was, err := st.Resume(ctx, "a")
	require.NoError(t, err)
	require.True(t, was)
	got, err := st.Get(ctx, "a")
	require.NoError(t, err)
	require.False(t, got.Paused)
	require.True(t, got.PausedUntil.IsZero())
	was, err = st.Resume(ctx, "a")
	require.NoError(t, err)
	require.False(t, was, "resuming a subscriber that is not paused is a no-op")

	// The pause is state, as Disabled is: adding the subscriber again keeps
	// it, and a pause that has ended is dropped by the next write.
	_, err = st.Pause(ctx, "a", until)
	require.NoError(t, err)
	require.NoError(t, st.Put(ctx, valid("a")))
	got, err = st.Get(ctx, "a")
	require.NoError(t, err)
	require.True(t, got.Paused)
	clock.Set(until)
	require.NoError(t, st.Put(ctx, valid("a")))
	got, err = st.Get(ctx, "a")
	require.NoError(t, err)
	require.False(t, got.Paused)

	out, err := json.Marshal(got)
	require.NoError(t, err)
	require.NotContains(t, string(out), "paused", "no pause: no pause fields")
}

func TestUpdateChangesOnlyWhatItIsTold(t *testing.T) {
	t.Parallel()
	st, _ := newStore(t)
	ctx := testutil.Context(t)
	t0, clock := fakeNow(st)
	s := valid("a")
	s.MaxAttempts = 3
	require.NoError(t, st.Put(ctx, s))
	require.NoError(t, st.SetDisabled(ctx, "a", true, "410 Gone"))
	stored, err := st.Get(ctx, "a")
	require.NoError(t, err)

	clock.Set(t0.Add(time.Minute))
	sub, err := st.Update(ctx, "a", func(s *Subscriber) error {
		s.Rate = 9
		s.ID, s.CreatedAt = "other", time.Time{} // neither can change
		return nil
	})
	require.NoError(t, err)
	want := stored
	want.Rate = 9
	want.UpdatedAt = t0.Add(time.Minute)
	require.Equal(t, want, sub)
	got, err := st.Get(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, want, got)

	// An invalid result, or an error from the change, stores nothing.
	_, err = st.Update(ctx, "a", func(s *Subscriber) error { s.URL = "ftp://x"; return nil })
	require.ErrorIs(t, err, ErrInvalid)
	boom := errors.New("boom")
	_, err = st.Update(ctx, "a", func(s *Subscriber) error { s.Rate = 1; return boom })
	require.ErrorIs(t, err, boom)
	got, err = st.Get(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, want, got)

	_, err = st.Update(ctx, "nobody", func(*Subscriber) error { return nil })
	require.ErrorIs(t, err, ErrNotFound)
}

func TestPutCreateRefusesAnIDThatExists(t *testing.T) {
	t.Parallel()
	st, n := newStore(t)
	ctx := testutil.Context(t)
	s := valid("a")
	s.URL = "https://a.example/hook?token=first"
	require.NoError(t, st.Put(ctx, s, Create()), "a new subscriber is created")
	want, err := st.Get(ctx, "a")
	require.NoError(t, err)

	// The same URL with another secret, as a provisioning script run again
	// generates one: refused, the secret kept.
	again := s
	again.Secrets = []string{secretB}
	again.Rate = 3
	err = st.Put(ctx, again, Create())
	require.ErrorIs(t, err, ErrExists)
	var exists *ExistsError
	require.ErrorAs(t, err, &exists)
	require.Equal(t, s.URL, exists.URL)
	require.Equal(t, "subscriber a exists (URL https://a.example/hook?…)", err.Error())
	got, err := st.Get(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, want, got, "a refused create changes nothing")

	require.NoError(t, st.Put(ctx, again), "without Create the subscriber is replaced")
	got, err = st.Get(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, again.Secrets, got.Secrets)

	// The check is made on the value replaced: a subscriber created between
	// Put's read and its write sends Put round again, and it refuses.
	other, err := Open(ctx, n.JS)
	require.NoError(t, err)
	var once sync.Once
	st.beforeWrite = func() {
		once.Do(func() { require.NoError(t, other.Put(ctx, valid("b"))) })
	}
	require.ErrorIs(t, st.Put(ctx, valid("b"), Create()), ErrExists)
}

func TestRedactURL(t *testing.T) {
	t.Parallel()
	tests := map[string]string{
		"https://example.com/hook":                   "https://example.com/hook",
		"https://example.com/hook?token=abc":         "https://example.com/hook?…",
		"https://example.com/hook?token=abc#frag":    "https://example.com/hook?…#…",
		"https://example.com/hook#frag":              "https://example.com/hook#…",
		"https://user:pass@example.com:8443/a/b?x=1": "https://example.com:8443/a/b?…",
		"http://[::1]:9000/":                         "http://[::1]:9000/",
		"https://example.com/p%20q":                  "https://example.com/p%20q",
		"https://example.com/?":                      "https://example.com/?…",
		"::not a url":                                "…",
	}
	for in, want := range tests {
		got := RedactURL(in)
		require.Equal(t, want, got, in)
		require.NotContains(t, got, "pass")
		require.NotContains(t, got, "abc")
	}
	s := valid("a")
	s.URL = "https://example.com/hook?token=abc"
	s.PreviousSecrets = []PreviousSecret{{Secret: secretB, Until: time.Now().Add(time.Hour)}}
	r := s.Redacted()
	require.Equal(t, "https://example.com/hook?…", r.URL)
	require.NotContains(t, r.PreviousSecrets[0].Secret, strings.TrimPrefix(secretB, "whsec_"))
	require.Equal(t, secretB, s.PreviousSecrets[0].Secret, "the original keeps its secret")
}
