package main

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/testutil"
)

// A receiver that wants an OAuth2 bearer token, as a user sets it up: the
// grant given at `sub add` (the secret from a file), fifty events delivered
// with the bearer, at most two grants, the secret masked wherever the
// subscriber is printed; a revoked token (401) is replaced, and the event
// delivered at its retry.
func TestOAuth2ReceiverGetsTheBearer(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	ts := testutil.StartTokenServer(t, "relay-client", "client-s3cret-value")
	rcv := newReceiver(t)
	secretFile := filepath.Join(t.TempDir(), "client-secret")
	require.NoError(t, os.WriteFile(secretFile, []byte("client-s3cret-value\n"), 0o600))
	mustRelay(t, "sub", "add", "api", "--nats", n.URL, "--url", rcv.URL, "--secret", testSecret, "--events", "x",
		"--oauth2-token-url", ts.TokenURL(), "--oauth2-client-id", "relay-client",
		"--oauth2-client-secret-file", secretFile, "--oauth2-scopes", "webhooks,events", "--oauth2-audience", "api",
		"--retry-base", "100ms", "--retry-max", "200ms")

	raw := mustRelay(t, "sub", "get", "api", "--nats", n.URL, "--json")
	var shown struct {
		OAuth2 map[string]any `json:"oauth2"`
	}
	require.NoError(t, json.Unmarshal([]byte(raw), &shown))
	require.Equal(t, ts.TokenURL(), shown.OAuth2["token_url"])
	require.Equal(t, "relay-client", shown.OAuth2["client_id"])
	require.Equal(t, "…", shown.OAuth2["client_secret"])
	require.Equal(t, []any{"webhooks", "events"}, shown.OAuth2["scopes"])
	for _, out := range []string{raw, mustRelay(t, "sub", "get", "api", "--nats", n.URL), mustRelay(t, "sub", "ls", "--nats", n.URL, "--json")} {
		require.NotContains(t, out, "s3cret")
	}

	startRelay(t, n.URL, "--allow-private-targets")
	for i := range 50 {
		publish(t, n.JS, "x", "ev-"+string(rune('A'+i/26))+string(rune('a'+i%26)), []byte(`{}`))
	}
	testutil.Eventually(t, func() bool { return rcv.count() >= 50 }, "%d of 50 delivered", rcv.count())
	for _, d := range rcv.deliveries() {
		require.Equal(t, "Bearer tok-1", d.header.Get("Authorization"))
	}
	require.LessOrEqual(t, ts.Grants(), 2)
	form := ts.Forms()[0]
	require.Equal(t, "webhooks events", form["scope"])
	require.Equal(t, "api", form["audience"])

	// The token revoked: the receiver answers 401 until a new one comes.
	rcv.setStatus(http.StatusUnauthorized)
	before, grants := rcv.count(), ts.Grants()
	publish(t, n.JS, "x", "after-revoke", []byte(`{}`))
	testutil.Eventually(t, func() bool { return rcv.count() > before }, "not tried")
	rcv.setStatus(http.StatusOK)
	testutil.Eventually(t, func() bool {
		got := rcv.deliveries()
		last := got[len(got)-1]
		return last.header.Get("Authorization") != "Bearer tok-1"
	}, "the revoked token is still sent")
	require.Greater(t, ts.Grants(), grants)
}

// Every wrong grant is refused at `sub add` and `sub update` with exit 2 in
// one line that names the flag and quotes no secret; an empty `--oauth2-token-url`
// removes the grant.
func TestOAuth2FlagsRefusedAndRemoved(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	add := func(extra ...string) []string {
		return append([]string{"sub", "add", "api", "--nats", n.URL, "--url", "https://example.com/hook", "--secret", testSecret}, extra...)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{add("--oauth2-token-url", "https://auth.example.com/token", "--oauth2-client-secret", "topsecret"), "--oauth2-client-id"},
		{add("--oauth2-token-url", "https://auth.example.com/token", "--oauth2-client-id", "c"), "--oauth2-client-secret"},
		{add("--oauth2-token-url", "ftp://auth.example.com/token", "--oauth2-client-id", "c", "--oauth2-client-secret", "topsecret"), "--oauth2-token-url"},
		{add("--oauth2-client-id", "c", "--oauth2-client-secret", "topsecret"), "--oauth2-token-url"},
		{add("--oauth2-token-url", "https://auth.example.com/token", "--oauth2-client-id", "c", "--oauth2-client-secret", "topsecret",
			"--header", "Authorization: Bearer x"), "--header"},
		{add("--oauth2-token-url", "https://auth.example.com/token", "--oauth2-client-id", "c", "--oauth2-client-secret", "topsecret",
			"--oauth2-scopes", `a"b`), "--oauth2-scopes"},
		{add("--oauth2-token-url", "https://auth.example.com/token", "--oauth2-client-id", "c", "--oauth2-client-secret", "topsecret",
			"--oauth2-client-secret-env", "RELAY_TEST_NO_SUCH_VARIABLE"), "give only one of"},
		{add("--oauth2-token-url", "", "--oauth2-client-id", "c"), "removes the grant"},
	} {
		code, out, errOut := relayCmd(t, c.args...)
		require.Equal(t, 2, code, "%v: %s%s", c.args, out, errOut)
		require.Contains(t, errOut, c.want, "%v", c.args)
		require.NotContains(t, out+errOut, "topsecret")
		require.Equal(t, 1, strings.Count(strings.TrimSpace(errOut), "\n")+1, "one line: %q", errOut)
	}

	mustRelay(t, add("--oauth2-token-url", "https://auth.example.com/token", "--oauth2-client-id", "c", "--oauth2-client-secret", "topsecret")...)
	mustRelay(t, "sub", "update", "api", "--nats", n.URL, "--oauth2-scopes", "a,b")
	got := mustRelay(t, "sub", "get", "api", "--nats", n.URL)
	require.Contains(t, got, "token URL https://auth.example.com/token, client c, secret …, scopes a b")
	mustRelay(t, "sub", "update", "api", "--nats", n.URL, "--oauth2-token-url", "")
	require.NotContains(t, mustRelay(t, "sub", "get", "api", "--nats", n.URL, "--json"), "oauth2")
	code, _, errOut := relayCmd(t, "sub", "update", "api", "--nats", n.URL, "--oauth2-scopes", "a")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "--oauth2-token-url")
}
