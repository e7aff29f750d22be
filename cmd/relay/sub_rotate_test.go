package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

// verifies reports whether the Standard Webhooks reference library accepts
// a delivery under secret: the receiver's side of a rotation, checked with
// code that is not relay's.
func verifies(t *testing.T, secret string, d delivery) bool {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	require.NoError(t, err)
	return wh.Verify(d.body, d.header) == nil
}

// rawSubscriberValues reads every message the subscriber bucket's stream
// holds for the key id: what an operator with `nats stream get` could read,
// old revisions included.
func rawSubscriberValues(t *testing.T, js jetstream.JetStream, id string) []string {
	t.Helper()
	ctx := testutil.Context(t)
	stream, err := js.Stream(ctx, "KV_"+streams.SubscribersBucket)
	require.NoError(t, err)
	info, err := stream.Info(ctx)
	require.NoError(t, err)
	subject := "$KV." + streams.SubscribersBucket + "." + id
	var out []string
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		msg, err := stream.GetMsg(ctx, seq)
		if err != nil {
			require.ErrorIs(t, err, jetstream.ErrMsgNotFound)
			continue
		}
		if msg.Subject == subject {
			out = append(out, string(msg.Data))
		}
	}
	return out
}

// secretBody is the base64 part of a secret: what must not be readable.
func secretBody(secret string) string { return strings.TrimPrefix(secret, "whsec_") }

// A rotation as a receiver sees it: during the grace every request carries
// the new and the old signature and either secret verifies it; after it only
// the new one does, and the old secrets are gone from the bucket, history
// included. The first rotation's grace is an hour, so that the requests
// made during it are certain to be; the second's is a second, which the test
// waits out by polling.
func TestRotateSecretSignsWithBothDuringTheGraceThenTheNewOnly(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	rcv := newReceiver(t)
	mustRelay(t, "sub", "add", "demo", "--nats", n.URL, "--url", rcv.URL, "--secret", testSecret)
	startRelay(t, n.URL, "--allow-private-targets")

	code, out, errOut := relayCmd(t, "sub", "rotate-secret", "demo", "--nats", n.URL, "--grace", "1h")
	require.Equal(t, 0, code, errOut)
	second := strings.TrimSpace(out)
	require.Equal(t, second+"\n", out, "stdout is the new secret alone")
	require.True(t, strings.HasPrefix(second, "whsec_"), out)
	require.Contains(t, errOut, "valid until")
	require.NotContains(t, errOut, secretBody(second))
	require.NotContains(t, errOut, secretBody(testSecret))

	publish(t, n.JS, "x", "during", []byte(`{"n":1}`))
	testutil.Eventually(t, func() bool { return rcv.count() == 1 }, "no delivery during the grace")
	d := rcv.deliveries()[0]
	require.Len(t, strings.Fields(d.header.Get("webhook-signature")), 2, "two signatures during the grace")
	require.True(t, verifies(t, second, d), "the new secret verifies")
	require.True(t, verifies(t, testSecret, d), "the old secret verifies")

	// A secret from a file, and a grace of a second.
	third := "whsec_" + strings.Repeat("QUJD", 8)
	file := filepath.Join(t.TempDir(), "secret")
	require.NoError(t, os.WriteFile(file, []byte("\n  "+third+"  \n\n"), 0o600))
	code, out, errOut = relayCmd(t, "sub", "rotate-secret", "demo", "--nats", n.URL, "--secret-file", file, "--grace", "1s")
	require.Equal(t, 0, code, errOut)
	require.Empty(t, out, "a secret given is not printed")

	probes := 0
	var last delivery
	testutil.Eventually(t, func() bool {
		probes++
		before := rcv.count()
		publish(t, n.JS, "x", fmt.Sprintf("after-%d", probes), []byte(`{}`))
		testutil.Eventually(t, func() bool { return rcv.count() > before }, "probe not delivered")
		last = rcv.deliveries()[rcv.count()-1]
		return len(strings.Fields(last.header.Get("webhook-signature"))) == 1
	}, "requests still carry old signatures after the grace")
	require.True(t, verifies(t, third, last), "the new secret verifies")
	require.False(t, verifies(t, second, last), "a secret past its grace no longer verifies")
	require.False(t, verifies(t, testSecret, last))

	// A running relay removes the old secrets from the bucket.
	testutil.Eventually(t, func() bool {
		for _, v := range rawSubscriberValues(t, n.JS, "demo") {
			if strings.Contains(v, secretBody(second)) || strings.Contains(v, secretBody(testSecret)) {
				return false
			}
		}
		return true
	}, "a retired secret is still readable in the bucket: %v", rawSubscriberValues(t, n.JS, "demo"))
	values := rawSubscriberValues(t, n.JS, "demo")
	require.Len(t, values, 1, "one value a key")
	require.Contains(t, values[0], third)
}

func TestRotateSecretGraceZeroAndRefusals(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	mustRelay(t, "sub", "add", "demo", "--nats", n.URL, "--url", "https://example.com/", "--secret", testSecret)

	code, out, errOut := relayCmd(t, "sub", "rotate-secret", "demo", "--nats", n.URL, "--grace", "0")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, errOut, "no longer used")
	values := rawSubscriberValues(t, n.JS, "demo")
	require.Len(t, values, 1)
	require.NotContains(t, values[0], secretBody(testSecret), "--grace 0 drops the old secret at once")
	require.Contains(t, values[0], secretBody(strings.TrimSpace(out)))

	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--grace", "-1s"}, exitUsage, "--grace"},
		{[]string{"--grace", "721h"}, exitUsage, "--grace"},
		{[]string{"--secret", testSecret, "--secret-env", "RELAY_TEST_UNUSED"}, exitUsage, "only one"},
		{[]string{"--secret", "whsec_" + secretBody(testSecret)[:8]}, exitUsage, "--secret"},
		{[]string{"--secret-file", filepath.Join(t.TempDir(), "missing")}, exitUsage, "--secret-file"},
	} {
		code, out, errOut := relayCmd(t, append([]string{"sub", "rotate-secret", "demo", "--nats", n.URL}, tt.args...)...)
		require.Equal(t, tt.code, code, "%v: %s", tt.args, errOut)
		require.Contains(t, errOut, tt.want, tt.args)
		require.Empty(t, out, tt.args)
		require.Equal(t, 1, strings.Count(errOut, "\n"), "one line: %q", errOut)
	}
	code, _, errOut = relayCmd(t, "sub", "rotate-secret", "nobody", "--nats", n.URL)
	require.Equal(t, exitFailure, code)
	require.Contains(t, errOut, "no such subscriber: nobody (relay sub ls lists them)")
	require.Len(t, rawSubscriberValues(t, n.JS, "demo"), 1)
}

// Without --grace the old secret signs for a day, as the help says.
func TestRotateSecretDefaultGraceIsADay(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	mustRelay(t, "sub", "add", "demo", "--nats", n.URL, "--url", "https://example.com/", "--secret", testSecret)
	before := time.Now()
	code, _, errOut := relayCmd(t, "sub", "rotate-secret", "demo", "--nats", n.URL)
	require.Equal(t, 0, code, errOut)
	after := time.Now()
	out := mustRelay(t, "sub", "get", "demo", "--nats", n.URL, "--json")
	require.NotContains(t, out, secretBody(testSecret), "get masks a previous secret too")
	var got subscribers.Subscriber
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	require.Len(t, got.PreviousSecrets, 1)
	until := got.PreviousSecrets[0].Until
	require.False(t, until.Before(before.Add(24*time.Hour)) || until.After(after.Add(24*time.Hour)), "until %v", until)
	require.Contains(t, errOut, until.UTC().Format(time.RFC3339))
}
