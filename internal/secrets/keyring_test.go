package secrets

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func newKey(t *testing.T) string {
	t.Helper()
	k, err := NewKey()
	require.NoError(t, err)
	return k
}

// TestSealOpens: a value sealed by a keyring opens with it, under the same
// context only, names its key's id, and holds nothing of the clear value.
func TestSealOpens(t *testing.T) {
	t.Parallel()
	kr, err := ParseKeys([]byte(newKey(t) + "\n"))
	require.NoError(t, err)
	const clear = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	sealed, err := kr.Seal(clear, "sub-a")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(sealed, "sealed:v1:"+kr.Current()+":"), sealed)
	require.NotContains(t, sealed, "MfKQ")
	again, err := kr.Seal(clear, "sub-a")
	require.NoError(t, err)
	require.NotEqual(t, sealed, again, "the nonce is random")

	got, err := kr.Open(sealed, "sub-a")
	require.NoError(t, err)
	require.Equal(t, clear, got)
	_, err = kr.Open(sealed, "sub-b")
	require.ErrorIs(t, err, ErrTampered, "a value copied to another subscriber does not open")
	cut := sealed[:len(sealed)-2]
	_, err = kr.Open(cut, "sub-a")
	require.ErrorIs(t, err, ErrTampered)

	plain, err := kr.Open(clear, "sub-a")
	require.NoError(t, err)
	require.Equal(t, clear, plain, "a clear value stays readable")
	require.Equal(t, "sealed:"+kr.Current(), Mask(sealed))
}

// TestOpenWithOlderKeys: a keyring whose current key is new still opens
// what its older keys sealed, and seals with the new one; a keyring without
// the sealing key (or none) says which key it needs.
func TestOpenWithOlderKeys(t *testing.T) {
	t.Parallel()
	oldKey, newK := newKey(t), newKey(t)
	old, err := ParseKeys([]byte(oldKey))
	require.NoError(t, err)
	both, err := ParseKeys([]byte("# current first\n" + newK + "\n\n" + strings.TrimRight(oldKey, "=") + "\n"))
	require.NoError(t, err)
	require.Equal(t, []string{both.Current(), old.Current()}, both.IDs())

	sealed, err := old.Seal("secret", "x")
	require.NoError(t, err)
	got, err := both.Open(sealed, "x")
	require.NoError(t, err)
	require.Equal(t, "secret", got)
	resealed, err := both.Seal(got, "x")
	require.NoError(t, err)
	id, ok := SealedWith(resealed)
	require.True(t, ok)
	require.Equal(t, both.Current(), id)

	_, err = old.Open(resealed, "x")
	var missing *MissingKeyError
	require.ErrorAs(t, err, &missing)
	require.Equal(t, both.Current(), missing.KeyID)
	var none *Keyring
	_, err = none.Open(sealed, "x")
	require.ErrorIs(t, err, ErrMissingKey)
	kept, err := none.Seal("secret", "x")
	require.NoError(t, err)
	require.Equal(t, "secret", kept, "no keyring seals nothing")
}

// TestParseKeysRefuses: a line that is not the base64 of 32 bytes is
// refused by its number, never quoted; an empty file is refused.
func TestParseKeysRefuses(t *testing.T) {
	t.Parallel()
	short := base64.StdEncoding.EncodeToString([]byte("sixteen bytes!!!"))
	for _, data := range []string{"", "# only a comment\n", newKey(t) + "\n" + short, "not base64 at all"} {
		_, err := ParseKeys([]byte(data))
		require.ErrorIs(t, err, ErrKeyFile, "%q", data)
		if data != "" {
			require.NotContains(t, err.Error(), short)
			require.NotContains(t, err.Error(), "not base64 at all")
		}
	}
	_, err := ParseKeys([]byte(newKey(t) + "\n" + short))
	require.ErrorContains(t, err, "line 2")
	require.False(t, errors.Is(err, ErrMissingKey))
}
