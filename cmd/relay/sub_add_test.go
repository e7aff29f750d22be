package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/internal/testutil"
)

// TestSubAddWithoutSecretGeneratesOne: the secret is printed alone on
// stdout, once, is the one stored, and no later command prints it.
func TestSubAddWithoutSecretGeneratesOne(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	code, out, errOut := relayCmd(t, "sub", "add", "gen", "--nats", n.URL, "--url", "https://example.com/hook")
	require.Zero(t, code, errOut)
	secret := strings.TrimSpace(out)
	require.Equal(t, secret+"\n", out, "the secret alone on stdout")
	require.True(t, strings.HasPrefix(secret, "whsec_"), secret)
	require.Contains(t, errOut, "subscriber gen saved")
	require.Equal(t, []string{secret}, stored(t, n, "gen").Secrets)
	check := subscribers.Subscriber{ID: "gen", URL: "https://example.com/hook", Secrets: []string{secret}}
	check.SetDefaults()
	require.NoError(t, check.Validate(), "the secret generated is one relay takes")
	for _, args := range [][]string{{"sub", "get", "gen"}, {"sub", "get", "gen", "--json"}, {"sub", "ls"}, {"sub", "ls", "--json"}} {
		got := mustRelay(t, append(args, "--nats", n.URL)...)
		require.NotContains(t, got, strings.TrimPrefix(secret, "whsec_"), "relay %s printed the secret", strings.Join(args, " "))
	}
	code, out, _ = relayCmd(t, "sub", "add", "gen2", "--nats", n.URL, "--url", "https://example.com/hook")
	require.Zero(t, code)
	require.NotEqual(t, secret, strings.TrimSpace(out), "two generated secrets alike")
}

// TestSubAddRefusesSubjectsAsFiltersAndNotesPrivateTargets: a filter that
// starts with events. could only match events.events.…: refused, with the
// event type to give; a URL on a loopback or private address is stored
// with a note naming --allow-private-targets.
func TestSubAddRefusesSubjectsAsFiltersAndNotesPrivateTargets(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	code, out, errOut := relayCmd(t, "sub", "add", "f", "--nats", n.URL, "--url", "https://example.com/", "--secret", testSecret,
		"--events", "order.paid,events.video.*")
	requireOneLine(t, code, errOut, exitUsage, "give video.*")
	require.Empty(t, out)
	code, _, _ = relayCmd(t, "sub", "get", "f", "--nats", n.URL)
	require.Equal(t, exitFailure, code, "nothing refused was stored")
	code, _, errOut = relayCmd(t, "sub", "update", "f", "--nats", n.URL, "--events", "events.>")
	require.Equal(t, exitUsage, code, errOut)

	for url, why := range map[string]string{
		"http://127.0.0.1:9000/hook": "127.0.0.1 is loopback",
		"http://localhost:9000/":     "localhost is loopback",
		"http://10.1.2.3/":           "10.1.2.3 is private",
		"http://[::1]:8080/":         "::1 is loopback",
	} {
		code, _, errOut := relayCmd(t, "sub", "add", "local", "--nats", n.URL, "--url", url, "--secret", testSecret, "--force")
		require.Zero(t, code, errOut)
		require.Contains(t, errOut, why)
		require.Contains(t, errOut, "--allow-private-targets")
	}
	_, _, errOut = relayCmd(t, "sub", "add", "public", "--nats", n.URL, "--url", "https://example.com/", "--secret", testSecret)
	require.NotContains(t, errOut, "--allow-private-targets")
	_, _, errOut = relayCmd(t, "sub", "update", "public", "--nats", n.URL, "--url", "http://192.168.1.9/")
	require.Contains(t, errOut, "192.168.1.9 is private")
}
