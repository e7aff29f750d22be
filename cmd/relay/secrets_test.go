package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/deliver"
	"github.com/relay-dev/relay/internal/secrets"
	"github.com/relay-dev/relay/internal/status"
	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

// keyFile writes a key file of the given keys (new ones when none), the
// current first, and returns its path and the id of its current key.
func keyFile(t *testing.T, keys ...string) (path, current string) {
	t.Helper()
	if len(keys) == 0 {
		keys = []string{strings.TrimSpace(mustRelay(t, "secrets", "new-key"))}
	}
	path = filepath.Join(t.TempDir(), "secrets.key")
	require.NoError(t, os.WriteFile(path, []byte(strings.Join(keys, "\n")+"\n"), 0o600))
	k, err := secrets.LoadFile(path)
	require.NoError(t, err)
	return path, k.Current()
}

// firstKey is the first key line of a key file.
func firstKey(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	line, _, _ := strings.Cut(string(data), "\n")
	return line
}

// rawValue is a subscriber's value as the bucket holds it.
func rawValue(t *testing.T, js jetstream.JetStream, id string) string {
	t.Helper()
	ctx := testutil.Context(t)
	kv, err := js.KeyValue(ctx, streams.SubscribersBucket)
	require.NoError(t, err)
	e, err := kv.Get(ctx, id)
	require.NoError(t, err)
	return string(e.Value())
}

// dlqMessages counts the dead letters.
func dlqMessages(t *testing.T, js jetstream.JetStream) uint64 {
	t.Helper()
	ctx := testutil.Context(t)
	s, err := js.Stream(ctx, streams.DLQ)
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	return info.State.Msgs
}

// TestSecretsKeyFileSealsEveryCredential: with --secrets-key-file, the
// bucket's raw value of a subscriber added by the CLI holds no byte of its
// whsec_ secret, its whsk_ key, its OAuth2 client secret or its mTLS key;
// sub get with the key masks them, and without it shows the subscriber
// held, its secrets as sealed:<key id>; a command that would write it
// without the key refuses in one line.
func TestSecretsKeyFileSealsEveryCredential(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	keys, keyID := keyFile(t)
	dir := t.TempDir()
	client := testutil.NewCA(t, "relay test").Client(t, "relay")
	certFile, keyPEMFile, signingFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"), filepath.Join(dir, "signing.key")
	require.NoError(t, os.WriteFile(certFile, []byte(client.CertPEM), 0o600))
	require.NoError(t, os.WriteFile(keyPEMFile, []byte(client.KeyPEM), 0o600))
	signingKey, err := deliver.NewSigningKey()
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(signingFile, []byte(signingKey+"\n"), 0o600))
	const clientSecret = "oauth2-Client-Secret-value"
	mustRelay(t, "sub", "add", "acme", "--nats", n.URL, "--secrets-key-file", keys, "--url", "https://example.com/hook",
		"--secret", testSecret, "--signing", "both", "--signing-key-file", signingFile,
		"--oauth2-token-url", "https://auth.example.com/token", "--oauth2-client-id", "relay", "--oauth2-client-secret", clientSecret,
		"--client-cert", certFile, "--client-key", keyPEMFile)

	raw := rawValue(t, n.JS, "acme")
	keyLines := strings.Split(strings.TrimSpace(client.KeyPEM), "\n")
	for _, secret := range []string{
		strings.TrimPrefix(testSecret, deliver.SecretPrefix)[:8],
		strings.TrimPrefix(signingKey, deliver.SigningKeyPrefix)[:8],
		clientSecret,
		keyLines[1][len(keyLines[1])-16:], // bytes of the private scalar
	} {
		require.NotContains(t, raw, secret, "the bucket holds a credential in the clear")
	}
	require.Equal(t, 4, strings.Count(raw, "sealed:v1:"+keyID+":"), raw)

	got := mustRelay(t, "sub", "get", "acme", "--nats", n.URL, "--secrets-key-file", keys)
	require.Contains(t, got, "whsec_MfKQ…")
	require.Contains(t, got, "whsk_…pk:")
	require.NotContains(t, got, strings.TrimPrefix(signingKey, deliver.SigningKeyPrefix)[:4])
	require.Regexp(t, `state:\s+enabled`, got)

	without := mustRelay(t, "sub", "get", "acme", "--nats", n.URL)
	require.Regexp(t, `state:\s+held \(secrets sealed with key `+keyID+`, not given\)`, without)
	require.Regexp(t, `secrets:\s+sealed:`+keyID+` sealed:`+keyID, without)
	require.Contains(t, mustRelay(t, "sub", "ls", "--nats", n.URL, "--json"), `"sealed_with": "`+keyID+`"`)
	other, _ := keyFile(t)
	code, _, errOut := relayCmd(t, "sub", "pause", "acme", "--nats", n.URL, "--secrets-key-file", other)
	require.Equal(t, exitFailure, code)
	require.Equal(t, 1, strings.Count(errOut, "\n"), errOut)
	require.Contains(t, errOut, "relay: subscriber acme: its secrets are sealed with key "+keyID+", which is not among the secrets keys given")
	require.Equal(t, raw, rawValue(t, n.JS, "acme"), "a command without the key wrote the subscriber")

	code, _, errOut = relayCmd(t, "sub", "ls", "--nats", n.URL, "--secrets-key-file", filepath.Join(dir, "missing.key"))
	require.Equal(t, exitUsage, code, errOut)
	require.Contains(t, errOut, "--secrets-key-file")
	code, _, errOut = relayCmd(t, "secrets", "rotate-key", "--nats", n.URL)
	require.Equal(t, exitUsage, code, errOut)
	require.Contains(t, errOut, "no secrets key given")
}

// sealedLines are the lines of a relay's log that say it holds the
// subscriber id (any, for "") for want of the key its secrets are sealed
// with.
func sealedLines(log, id string) []string {
	var out []string
	for line := range strings.Lines(log) {
		if strings.Contains(line, "sealed with a key this relay was not given") && (id == "" || strings.Contains(line, "subscriber="+id+" ")) {
			out = append(out, line)
		}
	}
	return out
}

// TestRelayWithAnotherKeyHoldsASealedSubscriber: a relay given a key file
// that lacks the key a subscriber is sealed with says so in one line naming
// the subscriber and the key id, sends it nothing (signed or not) and
// dead-letters nothing of it, while it delivers the subscriber it can read;
// its copies wait in its overflow, and a relay given the key delivers them,
// signed.
func TestRelayWithAnotherKeyHoldsASealedSubscriber(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	rcv := newReceiver(t)
	keysA, idA := keyFile(t)
	keysB, idB := keyFile(t)
	mustRelay(t, "sub", "add", "sealed", "--nats", n.URL, "--secrets-key-file", keysA, "--url", rcv.URL+"/sealed", "--secret", testSecret)
	mustRelay(t, "sub", "add", "readable", "--nats", n.URL, "--secrets-key-file", keysB, "--url", rcv.URL+"/readable", "--secret", testSecret)
	wrong := startRelay(t, n.URL, "--allow-private-targets", "--secrets-key-file", keysB)
	const events = 3
	for i := range events {
		publish(t, n.JS, "x", fmt.Sprintf("e%d", i), []byte(`{}`))
	}
	testutil.Eventually(t, func() bool { return rcv.count() == events }, "the subscriber the relay can read does not get every event")
	testutil.Eventually(t, func() bool { return inOverflow(t, n.JS, "sealed") == events }, "the sealed subscriber's copies do not all wait in its overflow")
	for _, d := range rcv.deliveries() {
		require.Equal(t, "/readable", d.path, "a request went to the subscriber sealed with another key")
		verify(t, d)
	}
	require.Zero(t, dlqMessages(t, n.JS), "a copy was dead-lettered")
	lines := sealedLines(wrong.stderr.String(), "sealed")
	require.Len(t, lines, 1, "not one line: %q", lines)
	// And nothing else about it: no failed attempt to build its requests.
	var about []string
	for line := range strings.Lines(wrong.stderr.String()) {
		if strings.Contains(line, "subscriber=sealed ") {
			about = append(about, line)
		}
	}
	require.Equal(t, lines, about)
	require.Contains(t, lines[0], "level=ERROR")
	require.Contains(t, lines[0], "key_id="+idA)
	require.Contains(t, wrong.stderr.String(), `msg="subscriber secrets are sealed" key_id=`)
	var rows []status.Subscriber
	require.NoError(t, json.Unmarshal([]byte(mustRelay(t, "status", "--nats", n.URL, "--json", "--lanes", "4", "--secrets-key-file", keysB)), &rows))
	for _, r := range rows {
		want := ""
		if r.ID == "sealed" {
			want = status.BySealedKey
		}
		require.Equal(t, want, r.PauseReason, r.ID)
	}
	code, out, errOut := relayCmd(t, "secrets", "rotate-key", "--nats", n.URL, "--secrets-key-file", keysB)
	require.Equal(t, exitFailure, code)
	require.Equal(t, "re-sealed 0 subscribers under key "+idB+"\n", out)
	require.Equal(t, 1, strings.Count(errOut, "\n"), errOut)
	require.Contains(t, errOut, "subscriber sealed: its secrets are sealed with key "+idA)
	require.Contains(t, errOut, "add the key each needs to the file")
	require.Equal(t, 0, wrong.stop())

	right := startRelay(t, n.URL, "--allow-private-targets", "--secrets-key-file", keysA)
	testutil.Eventually(t, func() bool { return rcv.count() == 2*events }, "a relay with the key does not deliver what was held")
	for _, d := range rcv.deliveries()[events:] {
		require.Equal(t, "/sealed", d.path)
		verify(t, d)
	}
	require.Zero(t, dlqMessages(t, n.JS))
	require.Empty(t, sealedLines(right.stderr.String(), "sealed"))
}

// TestRotateKeyWhileRelayDelivers: subscribers sealed with an old key are
// re-sealed under a new one by relay secrets rotate-key while a relay that
// holds both delivers to them: every event reaches every subscriber,
// signed, none is dead-lettered and none held; the bucket then holds only
// the new key's values, and a relay given the new key alone delivers.
func TestRotateKeyWhileRelayDelivers(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	rcv := newReceiver(t)
	oldFile, oldID := keyFile(t)
	oldLine := firstKey(t, oldFile)
	newFile, newID := keyFile(t)
	bothFile, bothID := keyFile(t, firstKey(t, newFile), oldLine)
	require.Equal(t, newID, bothID)
	ids := []string{"a", "b", "c"}
	for _, id := range ids {
		mustRelay(t, "sub", "add", id, "--nats", n.URL, "--secrets-key-file", oldFile, "--url", rcv.URL+"/"+id, "--secret", testSecret)
		require.Contains(t, rawValue(t, n.JS, id), "sealed:v1:"+oldID+":")
	}
	r := startRelay(t, n.URL, "--allow-private-targets", "--secrets-key-file", bothFile)
	const half = 20
	for i := range half {
		publish(t, n.JS, "x", fmt.Sprintf("before-%d", i), []byte(`{}`))
	}
	// Deliveries are on their way as the values change under the relay.
	out := mustRelay(t, "secrets", "rotate-key", "--nats", n.URL, "--secrets-key-file", bothFile)
	require.Equal(t, "re-sealed 3 subscribers under key "+newID+"\n", out)
	for i := range half {
		publish(t, n.JS, "x", fmt.Sprintf("after-%d", i), []byte(`{}`))
	}
	testutil.Eventually(t, func() bool { return rcv.count() == 2*half*len(ids) }, "not every event reached every subscriber across the rotation")
	for _, d := range rcv.deliveries() {
		verify(t, d)
	}
	require.Zero(t, dlqMessages(t, n.JS))
	require.Empty(t, sealedLines(r.stderr.String(), ""), "a subscriber was held during the rotation")
	for _, id := range ids {
		raw := rawValue(t, n.JS, id)
		require.Contains(t, raw, "sealed:v1:"+newID+":")
		require.NotContains(t, raw, oldID)
	}
	require.Equal(t, "re-sealed 0 subscribers under key "+newID+"\n",
		mustRelay(t, "secrets", "rotate-key", "--nats", n.URL, "--secrets-key-file", bothFile))

	require.Equal(t, 0, r.stop())
	startRelay(t, n.URL, "--allow-private-targets", "--secrets-key-file", newFile)
	publish(t, n.JS, "x", "new-key-only", []byte(`{}`))
	testutil.Eventually(t, func() bool { return rcv.count() == 2*half*len(ids)+len(ids) }, "a relay with the new key alone does not deliver")
}

// TestSecretsKeyFileFromTheEnvironment: RELAY_SECRETS_KEY_FILE names the key
// file when the flag is not given (not parallel: it sets the environment).
func TestSecretsKeyFileFromTheEnvironment(t *testing.T) {
	n := testutil.StartRelayNATS(t)
	keys, keyID := keyFile(t)
	t.Setenv(secretsKeyFileEnv, keys)
	mustRelay(t, "sub", "add", "env", "--nats", n.URL, "--url", "https://example.com/", "--secret", testSecret)
	raw := rawValue(t, n.JS, "env")
	require.Contains(t, raw, "sealed:v1:"+keyID+":")
	require.NotContains(t, raw, strings.TrimPrefix(testSecret, deliver.SecretPrefix)[:8])
	require.Regexp(t, `state:\s+enabled`, mustRelay(t, "sub", "get", "env", "--nats", n.URL))
}
