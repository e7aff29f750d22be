package subscribers

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/deliver"
	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

// secretC is a third valid secret, for rotations of rotations.
var secretC = "whsec_" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0xE5}, 40))

func key(t *testing.T, secret string) []byte {
	t.Helper()
	k, err := deliver.ParseSecret(secret)
	require.NoError(t, err)
	return k
}

func TestNewSecret(t *testing.T) {
	t.Parallel()
	a, err := NewSecret()
	require.NoError(t, err)
	b, err := NewSecret()
	require.NoError(t, err)
	require.NotEqual(t, a, b)
	for _, s := range []string{a, b} {
		encoded, ok := strings.CutPrefix(s, deliver.SecretPrefix)
		require.True(t, ok, s)
		raw, err := base64.StdEncoding.DecodeString(encoded)
		require.NoError(t, err, "standard base64, with its padding")
		require.Len(t, raw, 32)
		require.Equal(t, raw, key(t, s))
	}
}

func TestRotateSecret(t *testing.T) {
	t.Parallel()
	st, _ := newStore(t)
	ctx := testutil.Context(t)
	t0, clock := fakeNow(st)
	require.NoError(t, st.Put(ctx, valid("a"))) // secretA

	sub, err := st.RotateSecret(ctx, "a", []string{secretB}, time.Hour)
	require.NoError(t, err)
	require.Equal(t, []string{secretB}, sub.Secrets)
	require.Equal(t, []PreviousSecret{{Secret: secretA, Until: t0.Add(time.Hour)}}, sub.PreviousSecrets)
	got, err := st.Get(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, sub, got, "what RotateSecret returns is what is stored")

	keys, err := got.Keys(t0.Add(time.Hour - time.Nanosecond))
	require.NoError(t, err)
	require.Equal(t, [][]byte{key(t, secretB), key(t, secretA)}, keys, "during the grace: the new key, then the old")
	keys, err = got.Keys(t0.Add(time.Hour))
	require.NoError(t, err)
	require.Equal(t, [][]byte{key(t, secretB)}, keys, "from the end of the grace on: the new key alone")

	// A second rotation within the grace: no old secret outlives the one
	// retired last.
	clock.Set(t0.Add(10 * time.Minute))
	sub, err = st.RotateSecret(ctx, "a", []string{secretC}, 5*time.Minute)
	require.NoError(t, err)
	end := t0.Add(15 * time.Minute)
	require.Equal(t, []PreviousSecret{{Secret: secretB, Until: end}, {Secret: secretA, Until: end}}, sub.PreviousSecrets)

	// Back to a secret still in its grace: it is active again, not previous.
	sub, err = st.RotateSecret(ctx, "a", []string{secretA}, 2*time.Minute)
	require.NoError(t, err)
	end = t0.Add(12 * time.Minute)
	require.Equal(t, []PreviousSecret{{Secret: secretC, Until: end}, {Secret: secretB, Until: end}}, sub.PreviousSecrets)

	// --grace 0 drops every old secret at once.
	sub, err = st.RotateSecret(ctx, "a", []string{secretB}, 0)
	require.NoError(t, err)
	require.Nil(t, sub.PreviousSecrets)
	keys, err = sub.Keys(clock.Now())
	require.NoError(t, err)
	require.Equal(t, [][]byte{key(t, secretB)}, keys)
}

func TestRotateSecretRefuses(t *testing.T) {
	t.Parallel()
	st, _ := newStore(t)
	ctx := testutil.Context(t)
	require.NoError(t, st.Put(ctx, valid("a")))

	_, err := st.RotateSecret(ctx, "a", []string{secretA}, time.Hour)
	require.ErrorIs(t, err, ErrInvalid, "the active secret again rotates nothing")
	for _, grace := range []time.Duration{-time.Second, MaxGrace + time.Second} {
		_, err = st.RotateSecret(ctx, "a", []string{secretB}, grace)
		require.ErrorIs(t, err, ErrInvalid)
		require.Contains(t, err.Error(), "--grace")
	}
	_, err = st.RotateSecret(ctx, "a", []string{"whsec_nope-" + strings.TrimPrefix(secretB, "whsec_")}, time.Hour)
	require.ErrorIs(t, err, ErrInvalid)
	require.NotContains(t, err.Error(), strings.TrimPrefix(secretB, "whsec_"), "an error never quotes a secret")
	_, err = st.RotateSecret(ctx, "nobody", []string{secretB}, time.Hour)
	require.ErrorIs(t, err, ErrNotFound)

	got, err := st.Get(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, []string{secretA}, got.Secrets, "nothing refused was stored")
	require.Empty(t, got.PreviousSecrets)
}

func TestRotateSecretKeepsAtMostMaxPrevious(t *testing.T) {
	t.Parallel()
	st, _ := newStore(t)
	ctx := testutil.Context(t)
	t0, clock := fakeNow(st)
	require.NoError(t, st.Put(ctx, valid("a")))
	var retired []string
	for i := range MaxPreviousSecrets + 3 {
		next, err := NewSecret()
		require.NoError(t, err)
		got, err := st.Get(ctx, "a")
		require.NoError(t, err)
		retired = append([]string{got.Secrets[0]}, retired...)
		clock.Set(t0.Add(time.Duration(i) * time.Second))
		_, err = st.RotateSecret(ctx, "a", []string{next}, time.Hour)
		require.NoError(t, err)
	}
	got, err := st.Get(ctx, "a")
	require.NoError(t, err)
	require.Len(t, got.PreviousSecrets, MaxPreviousSecrets)
	for i, p := range got.PreviousSecrets {
		require.Equal(t, retired[i], p.Secret, "newest retired first; the oldest dropped")
	}
}

// An old value of a key holds the secrets it had: the bucket keeps one
// value a key, and `relay run` lowers the history of a bucket created by an
// earlier version with five (nats-server drops the older values at once).
func TestEnsureLowersTheHistoryOfAnExistingBucket(t *testing.T) {
	t.Parallel()
	n := testutil.StartNATS(t)
	ctx := testutil.Context(t)
	kv, err := n.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: streams.SubscribersBucket, History: 5})
	require.NoError(t, err)
	for _, v := range []string{"one", "two", "three", "four"} {
		_, err := kv.PutString(ctx, "a", v)
		require.NoError(t, err)
	}
	_, err = kv.PutString(ctx, "b", "b")
	require.NoError(t, err)

	require.NoError(t, streams.Ensure(ctx, n.JS, streams.Options{}))
	status, err := kv.Status(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(1), status.History())
	values := rawValues(t, n, "a")
	require.Equal(t, []string{"four"}, values, "only the latest value is left in the stream")
	require.Equal(t, []string{"b"}, rawValues(t, n, "b"))
}

// rawValues reads every message the bucket's stream holds for key, what
// `nats stream get` would show, whatever the KV API hides.
func rawValues(t *testing.T, n *testutil.NATS, key string) []string {
	t.Helper()
	ctx := testutil.Context(t)
	stream, err := n.JS.Stream(ctx, "KV_"+streams.SubscribersBucket)
	require.NoError(t, err)
	info, err := stream.Info(ctx)
	require.NoError(t, err)
	subject := "$KV." + streams.SubscribersBucket + "." + key
	var out []string
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		msg, err := stream.GetMsg(ctx, seq)
		if err != nil {
			require.ErrorIs(t, err, jetstream.ErrMsgNotFound)
			continue
		}
		if msg.Subject == subject {
			out = append(out, string(msg.Data))
		}
	}
	return out
}
