package subscribers

import (
	"crypto/ed25519"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/deliver"
	"github.com/relay-dev/relay/internal/testutil"
)

// A subscriber that signs with both kinds: each kind of key goes to its own
// signature, a rotation keeps each kind's old key for the grace, and a
// rotation that would change the kinds is refused.
func TestSigningKeysRotateByKind(t *testing.T) {
	t.Parallel()
	st, _ := newStore(t)
	ctx := testutil.Context(t)
	t0, _ := fakeNow(st)

	first, err := NewKeys(SigningBoth)
	require.NoError(t, err)
	require.Len(t, first, 2)
	sub := valid("a")
	sub.Secrets = first
	require.NoError(t, st.Put(ctx, sub))
	require.Equal(t, SigningBoth, sub.Signing())

	next, err := NewKeys(SigningBoth)
	require.NoError(t, err)
	got, err := st.RotateSecret(ctx, "a", next, time.Hour)
	require.NoError(t, err)

	during := t0.Add(time.Hour - time.Nanosecond)
	keys, err := got.Keys(during)
	require.NoError(t, err)
	require.Equal(t, [][]byte{key(t, next[0]), key(t, first[0])}, keys, "the secrets, new then old, and no ed25519 key")
	signing, err := got.SigningKeys(during)
	require.NoError(t, err)
	want := func(s string) ed25519.PrivateKey {
		k, err := deliver.ParseSigningKey(s)
		require.NoError(t, err)
		return k
	}
	require.Equal(t, []ed25519.PrivateKey{want(next[1]), want(first[1])}, signing, "the ed25519 keys, new then old")
	signing, err = got.SigningKeys(t0.Add(time.Hour))
	require.NoError(t, err)
	require.Equal(t, []ed25519.PrivateKey{want(next[1])}, signing, "the old key stops at the end of the grace")

	pubs := PublicKeys(append(append([]string(nil), got.Secrets...), got.PreviousSecrets[0].Secret, got.PreviousSecrets[1].Secret))
	require.Len(t, pubs, 2)
	require.Equal(t, want(next[1]).Public(), mustPublic(t, pubs[0]))

	hmacOnly, err := NewKeys(SigningHMAC)
	require.NoError(t, err)
	_, err = st.RotateSecret(ctx, "a", hmacOnly, time.Hour)
	require.ErrorIs(t, err, ErrInvalid, "a rotation does not change the kinds")
	require.ErrorContains(t, err, "relay sub update --signing")

	hmacSub := valid("b")
	signing, err = hmacSub.SigningKeys(t0)
	require.NoError(t, err)
	require.Nil(t, signing, "a subscriber without ed25519 keys has none")
}

func mustPublic(t *testing.T, s string) ed25519.PublicKey {
	t.Helper()
	k, err := deliver.ParsePublicKey(s)
	require.NoError(t, err)
	return k
}

func TestParseSigning(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"hmac", "ed25519", "both"} {
		g, err := ParseSigning(s)
		require.NoError(t, err)
		require.Equal(t, Signing(s), g)
	}
	_, err := ParseSigning("HMAC")
	require.ErrorIs(t, err, ErrInvalid)
	require.ErrorContains(t, err, "--signing")
}
