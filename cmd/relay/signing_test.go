package main

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/testutil"
)

// v1aVerifiers returns, for each public key, whether some v1a signature of
// d is valid under it: the receiver's side, checked with crypto/ed25519
// alone, as the documentation tells a receiver to.
func v1aVerifiers(t *testing.T, d delivery, publicKeys ...string) []bool {
	t.Helper()
	msg := []byte(d.header.Get("webhook-id") + "." + d.header.Get("webhook-timestamp") + "." + string(d.body))
	out := make([]bool, len(publicKeys))
	for i, pk := range publicKeys {
		raw, ok := strings.CutPrefix(pk, "whpk_")
		require.True(t, ok, pk)
		pub, err := base64.StdEncoding.DecodeString(raw)
		require.NoError(t, err)
		require.Len(t, pub, ed25519.PublicKeySize)
		for _, field := range strings.Fields(d.header.Get("webhook-signature")) {
			encoded, ok := strings.CutPrefix(field, "v1a,")
			if !ok {
				continue
			}
			sig, err := base64.StdEncoding.DecodeString(encoded)
			require.NoError(t, err)
			out[i] = out[i] || ed25519.Verify(pub, msg, sig)
		}
	}
	return out
}

// shownKeys is what `relay sub get --json` says of the keys.
type shownKeys struct {
	Signing    string   `json:"signing"`
	PublicKey  string   `json:"public_key"`
	PublicKeys []string `json:"public_keys"`
	Secrets    []string `json:"secrets"`
}

func getShown(t *testing.T, url, id string) (shownKeys, string) {
	t.Helper()
	out := mustRelay(t, "sub", "get", id, "--nats", url, "--json")
	var s shownKeys
	require.NoError(t, json.Unmarshal([]byte(out), &s))
	return s, out
}

// An ed25519 subscriber as its receiver sees it: add prints the public key
// and nothing that can sign; every request carries one v1a signature that
// the public key verifies; a rotation signs with both keys during its
// grace; --signing both adds a v1 signature under a generated secret. No
// command prints a private key, while the bucket holds it.
func TestEd25519SigningAsAReceiverSeesIt(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	rcv := newReceiver(t)

	code, out, errOut := relayCmd(t, "sub", "add", "demo", "--nats", n.URL, "--url", rcv.URL, "--signing", "ed25519")
	require.Equal(t, 0, code, errOut)
	first := strings.TrimSpace(out)
	require.Equal(t, first+"\n", out, "stdout is the public key alone")
	require.True(t, strings.HasPrefix(first, "whpk_"), out)
	require.Contains(t, errOut, "public key")
	require.NotContains(t, out+errOut, "whsk_")

	s, raw := getShown(t, n.URL, "demo")
	require.Equal(t, "ed25519", s.Signing)
	require.Equal(t, first, s.PublicKey)
	require.Len(t, s.Secrets, 1)
	require.True(t, strings.HasPrefix(s.Secrets[0], "whsk_…pk:"), "named by its public key's fingerprint: %s", s.Secrets[0])
	stored := rawSubscriberValues(t, n.JS, "demo")
	require.Len(t, stored, 1)
	private := stored[0][strings.Index(stored[0], "whsk_"):]
	private = private[:strings.IndexByte(private, '"')]
	require.Greater(t, len(private), 40, "the bucket holds the private key")
	require.NotContains(t, raw, strings.TrimPrefix(private, "whsk_")[:4], "get shows a byte of the private key")
	text := mustRelay(t, "sub", "get", "demo", "--nats", n.URL)
	require.Contains(t, text, first)
	require.NotContains(t, text, strings.TrimPrefix(private, "whsk_")[:12])
	require.NotContains(t, mustRelay(t, "sub", "ls", "--nats", n.URL, "--json"), strings.TrimPrefix(private, "whsk_")[:12])

	startRelay(t, n.URL, "--allow-private-targets")
	publish(t, n.JS, "x", "one", []byte(`{"n":1}`))
	testutil.Eventually(t, func() bool { return rcv.count() == 1 }, "not delivered")
	d := rcv.deliveries()[0]
	require.Len(t, strings.Fields(d.header.Get("webhook-signature")), 1)
	require.True(t, strings.HasPrefix(d.header.Get("webhook-signature"), "v1a,"))
	require.Equal(t, []bool{true}, v1aVerifiers(t, d, first))

	// A rotation: the new public key alone on stdout, both signatures
	// during the grace.
	code, out, errOut = relayCmd(t, "sub", "rotate-secret", "demo", "--nats", n.URL, "--grace", "1h")
	require.Equal(t, 0, code, errOut)
	second := strings.TrimSpace(out)
	require.True(t, strings.HasPrefix(second, "whpk_") && second != first, out)
	s, _ = getShown(t, n.URL, "demo")
	require.Equal(t, second, s.PublicKey)
	require.Equal(t, []string{second, first}, s.PublicKeys)
	publish(t, n.JS, "x", "two", []byte(`{"n":2}`))
	testutil.Eventually(t, func() bool { return rcv.count() == 2 }, "not delivered")
	d = rcv.deliveries()[1]
	require.Len(t, strings.Fields(d.header.Get("webhook-signature")), 2, "two v1a signatures during the grace")
	require.Equal(t, []bool{true, true}, v1aVerifiers(t, d, second, first))

	// --signing both keeps the ed25519 keys and adds a generated secret,
	// printed once, that the Standard Webhooks library verifies with.
	code, out, errOut = relayCmd(t, "sub", "update", "demo", "--nats", n.URL, "--signing", "both")
	require.Equal(t, 0, code, errOut)
	secret := strings.TrimSpace(out)
	require.True(t, strings.HasPrefix(secret, "whsec_"), out)
	s, _ = getShown(t, n.URL, "demo")
	require.Equal(t, "both", s.Signing)
	testutil.Eventually(t, func() bool {
		before := rcv.count()
		publish(t, n.JS, "x", "both-"+strings.Repeat("x", before), []byte(`{"n":3}`))
		testutil.Eventually(t, func() bool { return rcv.count() > before }, "not delivered")
		d = rcv.deliveries()[rcv.count()-1]
		return strings.HasPrefix(d.header.Get("webhook-signature"), "v1,")
	}, "the relay did not take up --signing both")
	require.True(t, verifies(t, secret, d), "the v1 signature verifies with the secret printed")
	require.Equal(t, []bool{true, true}, v1aVerifiers(t, d, second, first))
}

// A key imported from a file signs exactly as the published vectors say,
// and every wrong use of the key flags is refused with exit 2 in one line
// that quotes no key.
func TestSigningKeyFileAndRefusals(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	dir := t.TempDir()
	const (
		vectorKey    = "whsk_nWGxne/9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2DXWpgBgrEKt9VL/tPJZAc6DuFy89qmIyWvAhpo9wdRGg=="
		vectorSeed   = "whsk_nWGxne/9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A="
		vectorPublic = "whpk_11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo="
	)
	keyFile := filepath.Join(dir, "key")
	require.NoError(t, os.WriteFile(keyFile, []byte(vectorSeed+"\n"), 0o600))
	code, out, errOut := relayCmd(t, "sub", "add", "demo", "--nats", n.URL, "--url", "https://example.com/", "--signing-key-file", keyFile)
	require.Equal(t, 0, code, errOut)
	require.NotContains(t, out+errOut, "whsk_")
	s, _ := getShown(t, n.URL, "demo")
	require.Equal(t, "ed25519", s.Signing, "a key file alone means ed25519")
	require.Equal(t, vectorPublic, s.PublicKey)

	bad := filepath.Join(dir, "bad")
	require.NoError(t, os.WriteFile(bad, []byte("whsk_"+strings.Repeat("QUJD", 8)+"\n"), 0o600))
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"sub", "add", "x", "--url", "https://example.com/", "--signing", "rsa"}, "--signing"},
		{[]string{"sub", "add", "x", "--url", "https://example.com/", "--signing", "hmac", "--signing-key-file", keyFile}, "--signing-key-file"},
		{[]string{"sub", "add", "x", "--url", "https://example.com/", "--signing", "ed25519", "--secret", testSecret}, "--signing ed25519"},
		{[]string{"sub", "add", "x", "--url", "https://example.com/", "--secret", vectorKey}, "--signing-key-file"},
		{[]string{"sub", "add", "x", "--url", "https://example.com/", "--signing-key-file", bad}, "decodes to 24 bytes"},
		{[]string{"sub", "add", "x", "--url", "https://example.com/", "--signing-key-file", filepath.Join(dir, "missing")}, "--signing-key-file"},
		{[]string{"sub", "rotate-secret", "demo", "--secret", testSecret}, "relay sub update --signing"},
		{[]string{"sub", "rotate-secret", "demo", "--secret", vectorKey}, "--signing-key-file"},
	} {
		code, out, errOut := relayCmd(t, append(tt.args, "--nats", n.URL)...)
		require.Equal(t, exitUsage, code, "%v: %s", tt.args, errOut)
		require.Contains(t, errOut, tt.want, tt.args)
		require.Empty(t, out, tt.args)
		require.Equal(t, 1, strings.Count(errOut, "\n"), "one line: %q", errOut)
		require.NotContains(t, errOut, "QUJDQUJD")
		require.NotContains(t, errOut, "nWGxne")
	}
	s, _ = getShown(t, n.URL, "demo")
	require.Equal(t, vectorPublic, s.PublicKey, "a refused rotation changes nothing")
}
