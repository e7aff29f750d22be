package subscribers

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/deliver"
	"github.com/relay-dev/relay/internal/secrets"
	"github.com/relay-dev/relay/internal/testutil"
)

// newKeyring returns a keyring of new keys, the current first.
func newKeyring(t *testing.T, lines ...string) *secrets.Keyring {
	t.Helper()
	k, err := secrets.ParseKeys([]byte(strings.Join(lines, "\n")))
	require.NoError(t, err)
	return k
}

func newKeyLine(t *testing.T) string {
	t.Helper()
	k, err := secrets.NewKey()
	require.NoError(t, err)
	return k
}

// credentialed is a subscriber holding every kind of credential, and the
// strings none of which may be found in the bucket once sealed.
func credentialed(t *testing.T, id string) (Subscriber, []string) {
	t.Helper()
	secret, err := NewSecret()
	require.NoError(t, err)
	signingKey, err := deliver.NewSigningKey()
	require.NoError(t, err)
	client := testutil.NewCA(t, "relay test").Client(t, "relay")
	const clientSecret = "oauth2-client-secret-V4lue"
	sub := Subscriber{
		ID: id, URL: "https://example.com/hook",
		Secrets: []string{secret, signingKey},
		OAuth2:  &deliver.OAuth2{TokenURL: "https://auth.example.com/token", ClientID: "relay", ClientSecret: clientSecret},
		TLS:     &deliver.TLS{ClientCert: client.CertPEM, ClientKey: client.KeyPEM},
	}
	// The key material itself, not only its text: the base64 of a
	// secret, of a seed, and a line of the PEM key's body.
	keyLines := strings.Split(strings.TrimSpace(client.KeyPEM), "\n")
	seed, err := deliver.ParseSigningKey(signingKey)
	require.NoError(t, err)
	forbidden := []string{
		strings.TrimPrefix(secret, deliver.SecretPrefix)[:16],
		base64.StdEncoding.EncodeToString(seed.Seed())[:16],
		base64.RawStdEncoding.EncodeToString(seed.Seed())[:16],
		keyLines[1],
		clientSecret,
	}
	return sub, forbidden
}

// TestSealedAtRest: with a keyring, the bucket's raw value of a subscriber
// holds no byte of its signing secret, its ed25519 key, its OAuth2 client
// secret or its mTLS key, while the store and a live view read them back
// in the clear; without one, they are stored as before.
func TestSealedAtRest(t *testing.T) {
	t.Parallel()
	ctx := testutil.Context(t)
	n := testutil.StartRelayNATS(t)
	keys := newKeyring(t, newKeyLine(t))
	st, err := Open(ctx, n.JS, WithKeys(keys))
	require.NoError(t, err)
	sub, forbidden := credentialed(t, "sealed")
	require.NoError(t, st.Put(ctx, sub))
	// Every change of a subscriber seals again, the janitor's included.
	_, err = st.Pause(ctx, "sealed", time.Time{})
	require.NoError(t, err)

	kv := rawKV(t, n)
	entry, err := kv.Get(ctx, "sealed")
	require.NoError(t, err)
	raw := string(entry.Value())
	for _, f := range forbidden {
		require.NotContains(t, raw, f)
	}
	require.Contains(t, raw, "sealed:v1:"+keys.Current()+":")
	require.Contains(t, raw, `"client_id":"relay"`, "what is not a credential stays readable")

	got, err := st.Get(ctx, "sealed")
	require.NoError(t, err)
	require.Equal(t, sub.Secrets, got.Secrets)
	require.Equal(t, sub.OAuth2.ClientSecret, got.OAuth2.ClientSecret)
	require.Equal(t, sub.TLS.ClientKey, got.TLS.ClientKey)
	require.Empty(t, got.SealedWith())

	liveCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	live, err := st.Watch(liveCtx)
	require.NoError(t, err)
	seen, ok := live.Get("sealed")
	require.True(t, ok)
	require.Equal(t, sub.Secrets, seen.Secrets)
	require.Empty(t, live.Sealed())
	cancel()
	<-live.Done()

	clear, err := Open(ctx, n.JS)
	require.NoError(t, err)
	sub.ID = "clear"
	require.NoError(t, clear.Put(ctx, sub))
	entry, err = kv.Get(ctx, "clear")
	require.NoError(t, err)
	require.Contains(t, string(entry.Value()), sub.Secrets[0], "without a key, values stay in the clear")
}

// TestSealedWithAnotherKey: a store or view whose keyring lacks the key a
// subscriber was sealed with (or that has none) still reads it, sealed and
// held: it names the key it needs, its deliveries are held as a pause
// holds them, no request can be built for it, no change can be written to
// it, and its mask shows the key id, nothing of the ciphertext.
func TestSealedWithAnotherKey(t *testing.T) {
	t.Parallel()
	ctx := testutil.Context(t)
	n := testutil.StartRelayNATS(t)
	keys := newKeyring(t, newKeyLine(t))
	st, err := Open(ctx, n.JS, WithKeys(keys))
	require.NoError(t, err)
	sub, _ := credentialed(t, "held")
	require.NoError(t, st.Put(ctx, sub))

	for name, other := range map[string]*secrets.Keyring{"wrong key": newKeyring(t, newKeyLine(t)), "no key": nil} {
		wrong, err := Open(ctx, n.JS, WithKeys(other))
		require.NoError(t, err)
		got, err := wrong.Get(ctx, "held")
		require.NoError(t, err, name)
		require.Equal(t, keys.Current(), got.SealedWith(), name)
		require.True(t, got.PausedAt(time.Now()), name)
		_, err = got.Request("e1", []byte("{}"), "", time.Now())
		var sealed *SealedError
		require.ErrorAs(t, err, &sealed, name)
		require.Equal(t, "held", sealed.ID)
		require.Equal(t, keys.Current(), sealed.KeyID)
		_, err = wrong.Pause(ctx, "held", time.Time{})
		require.ErrorIs(t, err, ErrSealed, name)
		require.ErrorIs(t, wrong.SetDisabled(ctx, "held", true, "x"), ErrSealed, name)
		require.ErrorIs(t, wrong.Put(ctx, sub), ErrSealed, name)
		masked := got.Redacted()
		require.Equal(t, []string{"sealed:" + keys.Current(), "sealed:" + keys.Current()}, masked.Secrets, name)

		liveCtx, cancel := context.WithCancel(ctx)
		live, err := wrong.Watch(liveCtx)
		require.NoError(t, err)
		require.Equal(t, map[string]string{"held": keys.Current()}, live.Sealed(), name)
		require.Len(t, live.Matching("any.type"), 1, "%s: it still gets its copies, to hold", name)
		require.Empty(t, live.expiring())
		cancel()
		<-live.Done()
	}
	got, err := st.Get(ctx, "held")
	require.NoError(t, err)
	require.Equal(t, sub.Secrets, got.Secrets, "nothing was written over it")
}

// TestResealRotates: with the new key first and the old one after it,
// Reseal rewrites every subscriber, clear or sealed with the old key, under
// the new key; a keyring of the new key alone then reads them all, and a
// second Reseal has nothing left to do.
func TestResealRotates(t *testing.T) {
	t.Parallel()
	ctx := testutil.Context(t)
	n := testutil.StartRelayNATS(t)
	oldLine, newLine := newKeyLine(t), newKeyLine(t)
	clear, err := Open(ctx, n.JS)
	require.NoError(t, err)
	old, err := Open(ctx, n.JS, WithKeys(newKeyring(t, oldLine)))
	require.NoError(t, err)
	a, _ := credentialed(t, "a")
	b, _ := credentialed(t, "b")
	require.NoError(t, clear.Put(ctx, a))
	require.NoError(t, old.Put(ctx, b))

	both, err := Open(ctx, n.JS, WithKeys(newKeyring(t, newLine, oldLine)))
	require.NoError(t, err)
	resealed, err := both.Reseal(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, resealed)
	again, err := both.Reseal(ctx)
	require.NoError(t, err)
	require.Zero(t, again)

	onlyNew, err := Open(ctx, n.JS, WithKeys(newKeyring(t, newLine)))
	require.NoError(t, err)
	for _, want := range []Subscriber{a, b} {
		got, err := onlyNew.Get(ctx, want.ID)
		require.NoError(t, err)
		require.Empty(t, got.SealedWith())
		require.Equal(t, want.Secrets, got.Secrets)
		require.Equal(t, want.TLS.ClientKey, got.TLS.ClientKey)
	}
	_, err = clear.Reseal(ctx)
	require.ErrorIs(t, err, ErrNoKeys)
}

// TestSealedValueOpensOnlyInItsField: a writer of the bucket without the
// key who moves a sealed signing secret into the OAuth2 client secret (which
// relay would send to a token URL that writer may set) gets a value that
// does not open; the store refuses the subscriber rather than send it.
func TestSealedValueOpensOnlyInItsField(t *testing.T) {
	t.Parallel()
	ctx := testutil.Context(t)
	n := testutil.StartRelayNATS(t)
	keys := newKeyring(t, newKeyLine(t))
	st, err := Open(ctx, n.JS, WithKeys(keys))
	require.NoError(t, err)
	sub, _ := credentialed(t, "moved")
	require.NoError(t, st.Put(ctx, sub))

	kv := rawKV(t, n)
	entry, err := kv.Get(ctx, "moved")
	require.NoError(t, err)
	var raw map[string]any
	require.NoError(t, json.Unmarshal(entry.Value(), &raw))
	sealedSecret := raw["secrets"].([]any)[0].(string)
	require.True(t, secrets.IsSealed(sealedSecret))
	raw["oauth2"].(map[string]any)["client_secret"] = sealedSecret
	forged, err := json.Marshal(raw)
	require.NoError(t, err)
	_, err = kv.Put(ctx, "moved", forged)
	require.NoError(t, err)

	_, err = st.Get(ctx, "moved")
	require.ErrorIs(t, err, secrets.ErrTampered)
}

// TestLongSealedClientSecretIsHeldWithoutTheKey: a client secret near the
// bound grows past it once sealed; a store without the key still reads the
// subscriber, held for want of the key, not refused as invalid (which would
// have the fan-out make no copies for it).
func TestLongSealedClientSecretIsHeldWithoutTheKey(t *testing.T) {
	t.Parallel()
	ctx := testutil.Context(t)
	n := testutil.StartRelayNATS(t)
	keys := newKeyring(t, newKeyLine(t))
	st, err := Open(ctx, n.JS, WithKeys(keys))
	require.NoError(t, err)
	sub, _ := credentialed(t, "long")
	sub.OAuth2.ClientSecret = strings.Repeat("s", maxOAuth2Field)
	require.NoError(t, st.Put(ctx, sub))

	keyless, err := Open(ctx, n.JS)
	require.NoError(t, err)
	got, err := keyless.Get(ctx, "long")
	require.NoError(t, err)
	require.Equal(t, keys.Current(), got.SealedWith())
	require.True(t, got.PausedAt(time.Now()))
}

// TestClearClientSecretThatLooksSealedIsRefused: a client secret given in
// the clear that begins as a sealed value does would be read as sealed with
// a key no relay has: refused, naming its flag.
func TestClearClientSecretThatLooksSealedIsRefused(t *testing.T) {
	t.Parallel()
	ctx := testutil.Context(t)
	n := testutil.StartRelayNATS(t)
	st, err := Open(ctx, n.JS)
	require.NoError(t, err)
	sub, _ := credentialed(t, "looks")
	sub.OAuth2.ClientSecret = secrets.SealedPrefix + "abc:def"
	err = st.Put(ctx, sub)
	require.ErrorIs(t, err, ErrInvalid)
	require.Contains(t, err.Error(), "--oauth2-client-secret")
}
