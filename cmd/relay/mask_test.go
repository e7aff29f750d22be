package main

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"
)

// TestCredentialsInNATSURLsAreNeverPrinted: every command given a NATS URL
// with a user and password, or a token, in --nats or NATS_URL, against a
// closed port and against a server that refuses them, prints neither.
func TestCredentialsInNATSURLsAreNeverPrinted(t *testing.T) {
	t.Parallel()
	checkMasked(t, func(t *testing.T, u string, cmd []string) (int, string, string) {
		return relayCmd(t, append(cmd, "--nats", u)...)
	})
}

// TestCredentialsInNATS_URLAreNeverPrinted is the same with the URL in
// NATS_URL (not parallel: it sets the environment).
func TestCredentialsInNATS_URLAreNeverPrinted(t *testing.T) {
	checkMasked(t, func(t *testing.T, u string, cmd []string) (int, string, string) {
		t.Setenv("NATS_URL", u)
		return relayCmd(t, cmd...)
	})
}

// checkMasked runs each command with each URL through run.
func checkMasked(t *testing.T, run func(t *testing.T, u string, cmd []string) (int, string, string)) {
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, Username: "admin", Password: "right-one", NoLog: true, NoSigs: true})
	require.NoError(t, err)
	go srv.Start()
	t.Cleanup(srv.Shutdown)
	require.True(t, srv.ReadyForConnections(10*time.Second))
	refusing := srv.Addr().String()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := ln.Addr().String()
	require.NoError(t, ln.Close())

	const password, token = "s3cr3tpw", "t0kenVALUE"
	urls := []string{
		"nats://admin:" + password + "@" + closed,
		"nats://" + token + "@" + closed,
		"nats://admin:" + password + "@" + refusing,
		"nats://" + token + "@" + refusing,
		"nats://admin:" + password + "@" + refusing + ",nats://admin:" + password + "@" + closed,
	}
	commands := [][]string{{"sub", "ls"}, {"dlq", "ls"}, {"status"}, {"sub", "add", "x", "--url", "https://example.com/"},
		{"run", "--metrics", "", "--data", t.TempDir()}}
	for _, u := range urls {
		for _, cmd := range commands {
			code, out, errOut := run(t, u, cmd)
			require.NotZero(t, code, "relay %s against %s", strings.Join(cmd, " "), u)
			for _, secret := range []string{password, token} {
				require.NotContains(t, out+errOut, secret, "relay %s printed a credential", strings.Join(cmd, " "))
			}
			require.Contains(t, errOut, "***", "relay %s: the URL is not named, masked: %s", strings.Join(cmd, " "), errOut)
		}
	}
}
