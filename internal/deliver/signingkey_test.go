package deliver

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// docVectors reads the test vectors published in docs/signatures.md: the
// "name: value" lines of its text block, so that the document says what the
// code does.
func docVectors(t *testing.T) map[string]string {
	t.Helper()
	raw, err := os.ReadFile("../../docs/signatures.md")
	require.NoError(t, err)
	_, rest, ok := bytes.Cut(raw, []byte("## Test vectors"))
	require.True(t, ok, "docs/signatures.md has a Test vectors section")
	_, rest, ok = bytes.Cut(rest, []byte("```text\n"))
	require.True(t, ok)
	block, _, ok := bytes.Cut(rest, []byte("```"))
	require.True(t, ok)
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(block))
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), ": ")
		require.True(t, ok, "line %q", sc.Text())
		out[name] = value
	}
	return out
}

func TestPublishedVectors(t *testing.T) {
	t.Parallel()

	v := docVectors(t)
	id, body := v["webhook-id"], []byte(v["body"])
	ts, err := strconv.ParseInt(v["webhook-timestamp"], 10, 64)
	require.NoError(t, err)
	now := time.Unix(ts, 0)

	secret, err := ParseSecret(v["secret"])
	require.NoError(t, err)
	require.Equal(t, v["v1 signature"], Sign(secret, id, ts, body))

	for _, form := range []string{"signing key", "signing key as a seed"} {
		key, err := ParseSigningKey(v[form])
		require.NoError(t, err, form)
		require.Equal(t, v["v1a signature"], SignV1a(key, id, ts, body), form)
		pub, err := PublicKey(v[form])
		require.NoError(t, err)
		require.Equal(t, v["public key"], pub, form)
	}

	// A verifier holding only the public key accepts the published
	// signature, as crypto/ed25519 alone does.
	pub, err := ParsePublicKey(v["public key"])
	require.NoError(t, err)
	header := v["v1 signature"] + " " + v["v1a signature"]
	require.NoError(t, VerifyV1a([]ed25519.PublicKey{pub}, id, v["webhook-timestamp"], header, body, now, 0))
	sig, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(v["v1a signature"], "v1a,"))
	require.NoError(t, err)
	require.True(t, ed25519.Verify(pub, []byte(id+"."+v["webhook-timestamp"]+"."+v["body"]), sig))
	// The v1 verifier ignores the v1a entry, and the other way round.
	require.NoError(t, Verify([][]byte{secret}, id, v["webhook-timestamp"], header, body, now, 0))
	require.ErrorIs(t, VerifyV1a([]ed25519.PublicKey{pub}, id, v["webhook-timestamp"], v["v1 signature"], body, now, 0), ErrBadSignature)
}

func TestParseSigningKey(t *testing.T) {
	t.Parallel()

	seed := bytes.Repeat([]byte{7}, ed25519.SeedSize)
	full := ed25519.NewKeyFromSeed(seed)
	other := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{8}, ed25519.SeedSize))
	mixed := append(append([]byte(nil), full[:32]...), other[32:]...)
	b64 := base64.StdEncoding.EncodeToString
	for _, tc := range []struct {
		name, key, errPart string
	}{
		{"seed", "whsk_" + b64(seed), ""},
		{"seed unpadded", "whsk_" + strings.TrimRight(b64(seed), "="), ""},
		{"full", "whsk_" + b64(full), ""},
		{"no prefix", b64(full), "prefix is missing"},
		{"a secret", "whsec_" + b64(seed), "prefix is missing"},
		{"not base64", "whsk_!!!!", "not standard base64"},
		{"short", "whsk_" + b64(seed[:31]), "decodes to 31 bytes"},
		{"halves of two keys", "whsk_" + b64(mixed), "not the public key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key, err := ParseSigningKey(tc.key)
			if tc.errPart != "" {
				require.ErrorIs(t, err, ErrInvalidSecret)
				require.ErrorContains(t, err, tc.errPart)
				require.NotContains(t, err.Error(), strings.TrimPrefix(tc.key, "whsk_"), "no error quotes the key")
				return
			}
			require.NoError(t, err)
			require.Equal(t, full, key)
		})
	}
	for _, bad := range []string{"", "whpk_", "whpk_" + b64(seed[:31]), "whsk_" + b64(seed)} {
		_, err := ParsePublicKey(bad)
		require.ErrorIs(t, err, ErrInvalidSecret, bad)
	}
}

func TestNewSigningKey(t *testing.T) {
	t.Parallel()

	a, err := NewSigningKey()
	require.NoError(t, err)
	b, err := NewSigningKey()
	require.NoError(t, err)
	require.NotEqual(t, a, b)
	key, err := ParseSigningKey(a)
	require.NoError(t, err)
	pub, err := PublicKey(a)
	require.NoError(t, err)
	parsed, err := ParsePublicKey(pub)
	require.NoError(t, err)
	require.Equal(t, key.Public(), parsed)
	require.Equal(t, "whsk_…pk:"+PublicKeyFingerprint(key.Public().(ed25519.PublicKey)), MaskSecret(a))
}

// TestMaskSigningKeyShowsNoPrivateByte: the mask of a "whsk_" key, in
// either of its forms, holds no character of its base64 and no byte of its
// seed; it names the key by its public key's fingerprint, the same for both
// forms, different for another key.
func TestMaskSigningKeyShowsNoPrivateByte(t *testing.T) {
	t.Parallel()
	full, err := NewSigningKey()
	require.NoError(t, err)
	key, err := ParseSigningKey(full)
	require.NoError(t, err)
	seedForm := SigningKeyPrefix + base64.StdEncoding.EncodeToString(key.Seed())
	other, err := NewSigningKey()
	require.NoError(t, err)
	for _, k := range []string{full, seedForm} {
		masked := MaskSecret(k)
		require.True(t, strings.HasPrefix(masked, SigningKeyPrefix+"…pk:"), masked)
		body := strings.TrimPrefix(masked, SigningKeyPrefix+"…pk:")
		encoded := strings.TrimPrefix(k, SigningKeyPrefix)
		require.NotContains(t, masked, encoded[:4], "the mask shows the key's first characters")
		for i := 0; i+4 <= len(encoded); i++ {
			require.NotContains(t, body, encoded[i:i+4], "the mask holds characters of the key")
		}
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
			require.NotContains(t, masked, enc.EncodeToString(key.Seed()[:3]))
		}
		require.NotContains(t, masked, hex.EncodeToString(key.Seed()[:2]))
		require.Equal(t, MaskSecret(full), masked)
	}
	require.NotEqual(t, MaskSecret(full), MaskSecret(other))
}

// A request signed with HMAC keys and ed25519 keys carries the v1
// signatures first, then the v1a ones, each list newest first; a receiver
// holding any one secret or public key accepts it.
func TestSendSignsV1AndV1a(t *testing.T) {
	t.Parallel()

	secret := []byte(strings.Repeat("s", 32))
	newKey := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{1}, 32))
	oldKey := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{2}, 32))
	srv, got := recordingServer(t, http.StatusOK)
	c := newTestClient(t)
	body := bytes.Repeat([]byte("x"), 64<<10)
	o := c.Send(t.Context(), Request{URL: srv.URL, ID: "evt_1", Body: body,
		Keys: [][]byte{secret}, SigningKeys: []ed25519.PrivateKey{newKey, oldKey}})
	require.Equal(t, Delivered, o.Class, "err: %v", o.Err)
	r := <-got
	h, received := r.header, r.body
	require.Equal(t, body, received)
	fields := strings.Fields(h.Get("Webhook-Signature"))
	require.Len(t, fields, 3)
	require.True(t, strings.HasPrefix(fields[0], "v1,"))
	ts, _ := strconv.ParseInt(h.Get("Webhook-Timestamp"), 10, 64)
	require.Equal(t, SignV1a(newKey, "evt_1", ts, body), fields[1])
	require.Equal(t, SignV1a(oldKey, "evt_1", ts, body), fields[2])
	now := time.Unix(ts, 0)
	for _, key := range []ed25519.PrivateKey{newKey, oldKey} {
		require.NoError(t, VerifyV1a([]ed25519.PublicKey{key.Public().(ed25519.PublicKey)},
			h.Get("Webhook-Id"), h.Get("Webhook-Timestamp"), h.Get("Webhook-Signature"), received, now, 0))
	}
	require.NoError(t, Verify([][]byte{secret}, h.Get("Webhook-Id"), h.Get("Webhook-Timestamp"), h.Get("Webhook-Signature"), received, now, 0))

	// A changed body, id or timestamp fails; so does a stale timestamp.
	pub := []ed25519.PublicKey{newKey.Public().(ed25519.PublicKey)}
	changed := append([]byte(nil), received...)
	changed[100] = 'y'
	require.ErrorIs(t, VerifyV1a(pub, h.Get("Webhook-Id"), h.Get("Webhook-Timestamp"), h.Get("Webhook-Signature"), changed, now, 0), ErrBadSignature)
	require.ErrorIs(t, VerifyV1a(pub, "evt_2", h.Get("Webhook-Timestamp"), h.Get("Webhook-Signature"), received, now, 0), ErrBadSignature)
	require.ErrorIs(t, VerifyV1a(pub, h.Get("Webhook-Id"), h.Get("Webhook-Timestamp"), h.Get("Webhook-Signature"), received, now.Add(time.Hour), 0), ErrStaleTimestamp)
}

func BenchmarkSignV1a(b *testing.B) {
	key := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{1}, 32))
	for _, size := range []int{200, 16 << 10, 64 << 10} {
		body := bytes.Repeat([]byte("x"), size)
		b.Run(strconv.Itoa(size), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(size))
			for b.Loop() {
				_ = SignV1a(key, "evt_1", 1614265330, body)
			}
		})
	}
}
