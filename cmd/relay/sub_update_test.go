package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/internal/testutil"
)

// secondSecret is another valid secret (24 bytes).
const secondSecret = "whsec_QUJDREVGR0hJSktMTU5PUFFSU1RVVldY"

// stored reads a subscriber as the bucket holds it, secrets in full.
func stored(t *testing.T, n *testutil.NATS, id string) subscribers.Subscriber {
	t.Helper()
	st, err := subscribers.Open(testutil.Context(t), n.JS)
	require.NoError(t, err)
	sub, err := st.Get(testutil.Context(t), id)
	require.NoError(t, err)
	return sub
}

// requireOneLine checks that a command failed with the exit code and a
// single line on stderr that says want.
func requireOneLine(t *testing.T, code int, errOut string, wantCode int, want string) {
	t.Helper()
	require.Equal(t, wantCode, code, errOut)
	require.Equal(t, 1, strings.Count(errOut, "\n"), "one line: %q", errOut)
	require.Contains(t, errOut, want)
}

func TestSubUpdateChangesOnlyTheFlagsGiven(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	mustRelay(t, "sub", "add", "demo", "--nats", n.URL, "--url", "https://example.com/hook", "--secret", testSecret,
		"--events", "video.*", "--rate", "50", "--burst", "20", "--max-attempts", "3", "--timeout", "4s", "--header", "X-Team: blue")
	before := stored(t, n, "demo")

	out := mustRelay(t, "sub", "update", "demo", "--nats", n.URL, "--rate", "10")
	require.Contains(t, out, "subscriber demo saved: https://example.com/hook, events video.*\n  rate 10/s burst 20")
	after := stored(t, n, "demo")
	want := before
	want.Rate, want.UpdatedAt = 10, after.UpdatedAt
	require.Equal(t, want, after, "only --rate changed")

	mustRelay(t, "sub", "update", "demo", "--nats", n.URL, "--events", "", "--header", "X-Other: x", "--secret", secondSecret, "--lane", "dedicated")
	after = stored(t, n, "demo")
	require.Empty(t, after.Events, "--events '' means every event")
	require.Equal(t, map[string]string{"X-Other": "x"}, after.Headers, "--header replaces the headers")
	require.Equal(t, []string{secondSecret}, after.Secrets)
	require.True(t, after.Dedicated)
	require.Equal(t, 3, after.MaxAttempts)
	require.Equal(t, 4*time.Second, after.Timeout.Std())
	require.Equal(t, before.CreatedAt, after.CreatedAt)

	unchanged := after
	for _, tt := range []struct {
		args     []string
		code     int
		contains string
	}{
		{[]string{"demo"}, exitUsage, "at least one setting"},
		{[]string{"demo", "--timeout", "0s"}, exitUsage, "--timeout"},
		{[]string{"demo", "--retry-max", "1s"}, exitUsage, "--retry-max"},
		{[]string{"demo", "--url", "ftp://example.com/"}, exitUsage, "--url"},
		{[]string{"demo", "--lane", "fast"}, exitUsage, "--lane"},
		{[]string{"demo", "--secret", "whsec_short"}, exitUsage, "--secret"},
		{[]string{"bad id"}, exitUsage, "ID"},
		{[]string{"nobody", "--rate", "1"}, exitFailure, "no such subscriber: nobody (relay sub ls lists them)"},
	} {
		code, _, errOut := relayCmd(t, append([]string{"sub", "update", "--nats", n.URL}, tt.args...)...)
		requireOneLine(t, code, errOut, tt.code, tt.contains)
	}
	require.Equal(t, unchanged, stored(t, n, "demo"), "a refused update stores nothing")
}

func TestSubAddOfAnIDThatExistsNeedsForce(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	first := "https://a.example/hook?token=first-token"
	mustRelay(t, "sub", "add", "demo", "--nats", n.URL, "--url", first, "--secret", testSecret)
	unchanged := stored(t, n, "demo")

	// Another URL, and the same one run again as a provisioning script
	// does, without a secret (which would generate one): both refused,
	// nothing changed, the secret kept.
	for _, url := range []string{"https://b.example/hook?token=second-token", first} {
		code, out, errOut := relayCmd(t, "sub", "add", "demo", "--nats", n.URL, "--url", url, "--rate", "5")
		requireOneLine(t, code, errOut, exitUsage, "subscriber demo exists (URL https://a.example/hook?…)")
		require.Empty(t, out, "no secret generated")
		require.Contains(t, errOut, "relay sub update demo")
		require.Contains(t, errOut, "--force")
		require.NotContains(t, errOut, "first-token")
		require.NotContains(t, errOut, "second-token")
		require.Equal(t, unchanged, stored(t, n, "demo"))
	}

	out := mustRelay(t, "sub", "add", "demo", "--nats", n.URL, "--url", "https://b.example/hook?token=second-token", "--secret", secondSecret, "--force")
	require.NotContains(t, out, "second-token", "the saved line redacts the URL")
	got := stored(t, n, "demo")
	require.Equal(t, "https://b.example/hook?token=second-token", got.URL)
	require.Equal(t, []string{secondSecret}, got.Secrets)
	require.Zero(t, got.Rate, "a replaced subscriber takes the command line's settings")
}

func TestSubSecretsFromAFileOrTheEnvironment(t *testing.T) {
	// t.Setenv: this test cannot run in parallel with the others.
	n := testutil.StartRelayNATS(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "secrets")
	require.NoError(t, os.WriteFile(file, []byte("\n  "+secondSecret+"\r\n\n\t"+testSecret+"  \n"), 0o600))
	mustRelay(t, "sub", "add", "file", "--nats", n.URL, "--url", "https://example.com/", "--secret-file", file)
	require.Equal(t, []string{secondSecret, testSecret}, stored(t, n, "file").Secrets, "one a line, trimmed, newest first")

	t.Setenv("RELAY_TEST_SECRET", " "+testSecret+"\n")
	mustRelay(t, "sub", "add", "env", "--nats", n.URL, "--url", "https://example.com/", "--secret-env", "RELAY_TEST_SECRET")
	require.Equal(t, []string{testSecret}, stored(t, n, "env").Secrets)
	t.Setenv("RELAY_TEST_SECRET", secondSecret)
	mustRelay(t, "sub", "update", "env", "--nats", n.URL, "--secret-env", "RELAY_TEST_SECRET")
	require.Equal(t, []string{secondSecret}, stored(t, n, "env").Secrets)

	bad := filepath.Join(dir, "bad")
	require.NoError(t, os.WriteFile(bad, []byte(testSecret+"\nwhsec_not-base64-but-quite-long-enough-to-show\n"), 0o600))
	empty := filepath.Join(dir, "empty")
	require.NoError(t, os.WriteFile(empty, []byte("\n \n"), 0o600))
	t.Setenv("RELAY_TEST_EMPTY", "  ")
	add := func(args ...string) []string {
		return append([]string{"sub", "add", "x", "--nats", n.URL, "--url", "https://example.com/"}, args...)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{add("--secret", testSecret, "--secret-file", file), "give only one"},
		{add("--secret-file", file, "--secret-env", "RELAY_TEST_SECRET"), "give only one"},
		{add("--secret-file", bad), "--secret-file: secret 2 of 2"},
		{add("--secret-file", empty), "holds no secret"},
		{add("--secret-file", filepath.Join(dir, "missing")), "--secret-file"},
		{add("--secret-env", "RELAY_TEST_UNSET_VARIABLE"), "RELAY_TEST_UNSET_VARIABLE is not set"},
		{add("--secret-env", "RELAY_TEST_EMPTY"), "RELAY_TEST_EMPTY is empty"},
	} {
		code, out, errOut := relayCmd(t, tt.args...)
		requireOneLine(t, code, errOut, exitUsage, tt.want)
		require.Empty(t, out)
		for _, secret := range []string{testSecret, secondSecret, "not-base64-but"} {
			require.NotContains(t, errOut, strings.TrimPrefix(secret, "whsec_"), "an error never quotes a secret")
		}
	}
	code, _, _ := relayCmd(t, "sub", "get", "x", "--nats", n.URL)
	require.Equal(t, exitFailure, code, "nothing refused was stored")
}

// sub ls and sub get, in text and JSON, never print a secret, nor a URL's
// user, query string or fragment, unless --show-url; add's saved line
// neither.
func TestSubLsAndGetRedactURLs(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	full := "https://example.com/hook?token=query-credential#frag-credential"
	out := mustRelay(t, "sub", "add", "demo", "--nats", n.URL, "--url", full, "--secret", testSecret)
	require.Contains(t, out, "https://example.com/hook?…#…")
	require.NotContains(t, out, "credential")
	mustRelay(t, "sub", "rotate-secret", "demo", "--nats", n.URL, "--secret", secondSecret)

	// sub ls within 100 columns cuts a long URL: --wide shows it whole.
	narrow := mustRelay(t, "sub", "ls", "--nats", n.URL)
	require.Contains(t, narrow, "https://example.com/hook?…")
	require.NotContains(t, narrow, "credential")
	for _, args := range [][]string{{"sub", "ls", "--wide"}, {"sub", "ls", "--json"}, {"sub", "get", "demo"}, {"sub", "get", "demo", "--json"}} {
		out := mustRelay(t, append(args, "--nats", n.URL)...)
		require.Contains(t, out, "https://example.com/hook?…#…", args)
		require.NotContains(t, out, "credential", args)
		require.NotContains(t, out, strings.TrimPrefix(testSecret, "whsec_"), args)
		require.NotContains(t, out, strings.TrimPrefix(secondSecret, "whsec_"), args)

		out = mustRelay(t, append(args, "--nats", n.URL, "--show-url")...)
		require.Contains(t, out, full, args)
		require.NotContains(t, out, strings.TrimPrefix(testSecret, "whsec_"), args)
	}
}
