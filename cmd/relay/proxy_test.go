package main

import (
	"net/url"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/testutil"
)

// withoutProxyEnv is the environment without any proxy variable.
func withoutProxyEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch strings.ToUpper(name) {
		case "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "REQUEST_METHOD":
			continue
		}
		env = append(env, kv)
	}
	return env
}

// An egress proxy as an operator sets one up: `relay run --proxy` sends
// every request through it (the proxy counts them, under the receiver's
// name only it resolves), and `--no-proxy` names the targets that go
// direct; without --proxy the built binary takes HTTP_PROXY from its
// environment. A bad proxy URL exits 2.
func TestEgressProxy(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	rcv := newReceiver(t)
	proxy := testutil.StartHTTPProxy(t)
	u, err := url.Parse(rcv.URL)
	require.NoError(t, err)
	proxy.Route("receiver.test:80", u.Host)
	mustRelay(t, "sub", "add", "proxied", "--nats", n.URL, "--url", "http://receiver.test/hook", "--secret", testSecret, "--events", "x")

	r := startRelay(t, n.URL, "--allow-private-targets", "--proxy", proxy.URL)
	for i := range 5 {
		publish(t, n.JS, "x", "flag-"+string(rune('a'+i)), []byte(`{}`))
	}
	testutil.Eventually(t, func() bool { return rcv.count() == 5 }, "%d of 5 delivered", rcv.count())
	require.Equal(t, 5, proxy.Requests("receiver.test:80"))
	require.Contains(t, r.stderr.String(), "egress proxy")
	require.Equal(t, 0, r.stop())

	// The environment's proxy, in the built binary.
	cmd := exec.Command(buildRelay(t), "run", "--nats", n.URL, "--metrics", "", "--lanes", "4", "--allow-private-targets")
	cmd.Env = append(withoutProxyEnv(), "HTTP_PROXY="+proxy.URL)
	logs := &testutil.Buffer{}
	cmd.Stderr = logs
	relay := testutil.StartProcess(t, cmd)
	publish(t, n.JS, "x", "env-a", []byte(`{}`))
	testutil.Eventually(t, func() bool { return rcv.count() == 6 }, "not delivered through the environment's proxy")
	require.Equal(t, 6, proxy.Requests("receiver.test:80"))
	require.NoError(t, relay.Stop(syscall.SIGTERM, 30*time.Second))
	require.Contains(t, logs.String(), "the environment")

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--proxy", "socks5://user:hunter2@proxy:1080"}, "--proxy"},
		{[]string{"--proxy", ""}, "--proxy"},
		{[]string{"--no-proxy", "example.com"}, "--no-proxy"},
	} {
		code, out, errOut := relayCmd(t, append([]string{"run", "--nats", n.URL, "--metrics", ""}, c.args...)...)
		require.Equal(t, 2, code, "%v: %s%s", c.args, out, errOut)
		require.Contains(t, errOut, c.want)
		require.NotContains(t, errOut, "hunter2")
	}
}
