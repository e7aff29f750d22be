package main

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/testutil"
)

// A receiver that requires a client certificate from its own CA, and
// serves a certificate of a private CA, as a user sets it up: the
// subscriber given --client-cert, --client-key and --ca-cert is delivered
// to; one without a certificate is refused by the receiver and its event
// dead-lettered with the TLS error; the key is never printed.
func TestMutualTLSReceiver(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	serverCA, clientCA := testutil.NewCA(t, "receiver CA"), testutil.NewCA(t, "client CA")
	var accepted atomic.Int32
	srv := testutil.StartMTLSServer(t, serverCA, clientCA, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		accepted.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))

	client := clientCA.Client(t, "relay-client")
	dir := t.TempDir()
	file := func(name, text string) string { return writeFile(t, dir, name, text) }
	certFile, keyFile, caFile := file("client.pem", client.CertPEM), file("client-key.pem", client.KeyPEM), file("ca.pem", serverCA.CertPEM)
	mustRelay(t, "sub", "add", "mtls", "--nats", n.URL, "--url", srv.URL, "--secret", testSecret, "--events", "x",
		"--client-cert", certFile, "--client-key", keyFile, "--ca-cert", caFile)
	mustRelay(t, "sub", "add", "nocert", "--nats", n.URL, "--url", srv.URL, "--secret", testSecret, "--events", "x",
		"--ca-cert", caFile, "--max-attempts", "1")

	keyLine := strings.Split(client.KeyPEM, "\n")[1]
	for _, out := range []string{mustRelay(t, "sub", "get", "mtls", "--nats", n.URL, "--json"), mustRelay(t, "sub", "get", "mtls", "--nats", n.URL),
		mustRelay(t, "sub", "ls", "--nats", n.URL, "--json")} {
		require.NotContains(t, out, keyLine[:24])
	}
	require.Contains(t, mustRelay(t, "sub", "get", "mtls", "--nats", n.URL), "client certificate CN=relay-client")
	require.Contains(t, mustRelay(t, "sub", "get", "mtls", "--nats", n.URL, "--json"), `"client_key": "…"`)

	startRelay(t, n.URL, "--allow-private-targets")
	publish(t, n.JS, "x", "one", []byte(`{}`))
	testutil.Eventually(t, func() bool { return accepted.Load() == 1 && len(dlqEntries(t, n.URL)) == 1 },
		"accepted %d, dead %d", accepted.Load(), len(dlqEntries(t, n.URL)))
	dead := dlqEntries(t, n.URL)[0]
	require.Equal(t, "nocert", dead.Subscriber)
	require.Contains(t, dead.LastError, "certificate")

	// Removing the certificate leaves the CA; removing that too, nothing.
	mustRelay(t, "sub", "update", "mtls", "--nats", n.URL, "--client-cert", "", "--client-key", "")
	require.NotContains(t, mustRelay(t, "sub", "get", "mtls", "--nats", n.URL), "client certificate")
	mustRelay(t, "sub", "update", "mtls", "--nats", n.URL, "--ca-cert", "")
	require.NotContains(t, mustRelay(t, "sub", "get", "mtls", "--nats", n.URL, "--json"), `"tls"`)
}

// writeFile writes text to dir/name, readable by its owner alone, and
// returns its path.
func writeFile(t *testing.T, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(p, []byte(text), 0o600))
	return p
}

// Every wrong TLS setting is refused at `sub add` with exit 2, in one line
// that names the flag and quotes nothing of the key.
func TestTLSFlagsRefused(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	ca := testutil.NewCA(t, "ca")
	a, b := ca.Client(t, "a"), ca.Client(t, "b")
	dir := t.TempDir()
	file := func(name, text string) string { return writeFile(t, dir, name, text) }
	cert, key, otherKey := file("a.pem", a.CertPEM), file("a-key.pem", a.KeyPEM), file("b-key.pem", b.KeyPEM)
	garbage := file("garbage", "hello\n")
	add := func(extra ...string) []string {
		return append([]string{"sub", "add", "api", "--nats", n.URL, "--url", "https://example.com/hook", "--secret", testSecret}, extra...)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{add("--client-cert", cert), "--client-key: is required"},
		{add("--client-key", key), "--client-cert: is required"},
		{add("--client-cert", cert, "--client-key", otherKey), "--client-key"},
		{add("--client-cert", key, "--client-key", key), "--client-cert"},
		{add("--client-cert", cert, "--client-key", garbage), "--client-key: is not a PEM private key"},
		{add("--ca-cert", garbage), "--ca-cert"},
		{add("--ca-cert", filepath.Join(dir, "missing.pem")), "--ca-cert"},
	} {
		code, out, errOut := relayCmd(t, c.args...)
		require.Equal(t, 2, code, "%v: %s%s", c.args, out, errOut)
		require.Contains(t, errOut, c.want, "%v", c.args)
		require.NotContains(t, out+errOut, strings.Split(a.KeyPEM, "\n")[1][:24])
		require.NotContains(t, out+errOut, strings.Split(b.KeyPEM, "\n")[1][:24])
		require.Equal(t, 1, strings.Count(strings.TrimSpace(errOut), "\n")+1, "one line: %q", errOut)
	}
}
