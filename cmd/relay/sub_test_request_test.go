package main

import (
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/testrequest"
	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

// requireNothingWritten checks that relay sub test left no trace of a
// delivery for the subscribers: nothing queued, parked or dead-lettered,
// no rate-limit state (no token taken, no breaker failure), no deadline
// count.
func requireNothingWritten(t *testing.T, js jetstream.JetStream, ids ...string) {
	t.Helper()
	ctx := testutil.Context(t)
	for _, name := range []string{streams.Deliveries, streams.Retries, streams.DLQ} {
		s, err := js.Stream(ctx, name)
		require.NoError(t, err)
		info, err := s.Info(ctx)
		require.NoError(t, err)
		require.Zero(t, info.State.Msgs, "%s holds messages after relay sub test", name)
	}
	for _, bucket := range []string{streams.RateLimitBucket, streams.TimelinessBucket} {
		kv, err := js.KeyValue(ctx, bucket)
		require.NoError(t, err)
		for _, id := range ids {
			_, err := kv.Get(ctx, id)
			require.True(t, errors.Is(err, jetstream.ErrKeyNotFound), "%s holds %s after relay sub test: %v", bucket, id, err)
		}
	}
}

// relay sub test against a running relay: a 204 receiver gets one request
// signed with the subscriber's secret, with its headers, under a
// webhook-id of its own, and the command prints the status, the time, the
// relay, the headers and the body, exit 0; a 500 receiver exits 1 with the
// status, and --json prints one object. Neither writes anything a delivery
// would.
func TestSubTestSendsOneSignedRequest(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	ok, failing := newReceiver(t), newReceiver(t)
	ok.setStatus(http.StatusNoContent)
	failing.setStatus(http.StatusInternalServerError)
	mustRelay(t, "sub", "add", "ok", "--nats", n.URL, "--url", ok.URL, "--secret", testSecret, "--header", "X-Team: payments")
	mustRelay(t, "sub", "add", "failing", "--nats", n.URL, "--url", failing.URL, "--secret", testSecret)
	r := startRelay(t, n.URL, "--allow-private-targets")
	waitRunning(t, r)

	code, out, errOut := relayCmd(t, "sub", "test", "ok", "--nats", n.URL)
	require.Equal(t, exitOK, code, errOut)
	require.Empty(t, errOut)
	for _, want := range []string{"status: 204\n", "time: ", "relay: ", "webhook-id: test_", "headers:\n", "body: empty\n"} {
		require.Contains(t, out, want)
	}
	got := ok.deliveries()
	require.Len(t, got, 1)
	verify(t, got[0])
	id := got[0].header.Get("webhook-id")
	require.True(t, strings.HasPrefix(id, testrequest.WebhookIDPrefix), id)
	require.Contains(t, out, "webhook-id: "+id+"\n")
	require.Equal(t, "payments", got[0].header.Get("X-Team"))
	require.Equal(t, "application/json", got[0].header.Get("Content-Type"))
	var body struct{ Type string }
	require.NoError(t, json.Unmarshal(got[0].body, &body))
	require.Equal(t, testrequest.DefaultType, body.Type)

	code, out, errOut = relayCmd(t, "sub", "test", "failing", "--nats", n.URL, "--data", `{"id":"evt_x"}`)
	require.Equal(t, exitFailure, code, out)
	require.Contains(t, out, "status: 500\n")
	require.Equal(t, "relay: subscriber failing answered 500 Internal Server Error, not 2xx\n", errOut)
	require.Equal(t, `{"id":"evt_x"}`, string(failing.deliveries()[0].body))
	verify(t, failing.deliveries()[0])

	code, out, errOut = relayCmd(t, "sub", "test", "ok", "--nats", n.URL, "--json", "--type", "order.paid")
	require.Equal(t, exitOK, code, errOut)
	var shown map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &shown), out)
	require.EqualValues(t, 204, shown["status"])
	require.Equal(t, "delivered", shown["outcome"])
	require.Equal(t, "ok", shown["subscriber"])
	require.Contains(t, shown, "duration_ms")
	require.Contains(t, shown, "headers")
	require.True(t, strings.HasPrefix(shown["webhook_id"].(string), "test_"))
	require.Len(t, ok.deliveries(), 2)

	requireNothingWritten(t, n.JS, "ok", "failing")
	if log := r.stderr.String(); strings.Contains(log, "dead letter") || strings.Contains(log, "level=ERROR") {
		t.Fatalf("relay run logged a dead letter or an error:\n%s", log)
	}
}

// A paused and a disabled subscriber are tested all the same, their state
// untouched; the OAuth2 bearer goes on as on a delivery; a body the
// receiver sends back over 1 KiB is shown cut.
func TestSubTestPausedDisabledAndAuthenticated(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	ts := testutil.StartTokenServer(t, "relay-client", "client-s3cret-value")
	rcv := newReceiver(t)
	mustRelay(t, "sub", "add", "api", "--nats", n.URL, "--url", rcv.URL, "--secret", testSecret,
		"--oauth2-token-url", ts.TokenURL(), "--oauth2-client-id", "relay-client", "--oauth2-client-secret", "client-s3cret-value")
	mustRelay(t, "sub", "pause", "api", "--nats", n.URL)
	mustRelay(t, "sub", "add", "off", "--nats", n.URL, "--url", rcv.URL, "--secret", testSecret)
	mustRelay(t, "sub", "disable", "off", "--nats", n.URL)
	waitRunning(t, startRelay(t, n.URL, "--allow-private-targets"))

	out := mustRelay(t, "sub", "test", "api", "--nats", n.URL)
	require.Contains(t, out, "status: 200\n")
	got := rcv.deliveries()
	require.Len(t, got, 1)
	require.Equal(t, "Bearer tok-1", got[0].header.Get("Authorization"))
	verify(t, got[0])
	require.Contains(t, mustRelay(t, "sub", "get", "api", "--nats", n.URL), "paused")

	mustRelay(t, "sub", "test", "off", "--nats", n.URL)
	require.Len(t, rcv.deliveries(), 2)
	require.Contains(t, mustRelay(t, "sub", "get", "off", "--nats", n.URL), "disabled")
	requireNothingWritten(t, n.JS, "api", "off")
}

// With no relay running the command says so, naming the server, exit 1;
// it has not sent anything.
func TestSubTestWithoutARelay(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	rcv := newReceiver(t)
	mustRelay(t, "sub", "add", "demo", "--nats", n.URL, "--url", rcv.URL, "--secret", testSecret)
	code, out, errOut := relayCmd(t, "sub", "test", "demo", "--nats", n.URL)
	require.Equal(t, exitFailure, code, out)
	require.Equal(t, "relay: no relay is running against "+n.URL+": relay sub test needs one, as a delivery would (start relay run)\n", errOut)
	require.Zero(t, rcv.count())
}

// A relay without --allow-private-targets refuses a loopback receiver for
// a test as for a delivery: exit 1, the error naming the flag, nothing
// sent, no dead letter.
func TestSubTestRefusedPrivateTargetNamesTheFlag(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	rcv := newReceiver(t)
	mustRelay(t, "sub", "add", "local", "--nats", n.URL, "--url", rcv.URL, "--secret", testSecret)
	waitRunning(t, startRelay(t, n.URL))
	code, out, errOut := relayCmd(t, "sub", "test", "local", "--nats", n.URL)
	require.Equal(t, exitFailure, code, out)
	require.Contains(t, out, "status: none\n")
	require.Contains(t, out, "--allow-private-targets")
	require.Contains(t, errOut, "--allow-private-targets")
	require.Equal(t, 1, strings.Count(errOut, "\n"), errOut)
	require.Zero(t, rcv.count())
	requireNothingWritten(t, n.JS, "local")
}

// An unknown subscriber exits 1 as relay sub update does, without asking a
// relay; an id that cannot be one, a --data that is not JSON, a --type that
// is not an event type, --type with --data and a negative --wait exit 2
// before anything connects.
func TestSubTestUnknownSubscriberAndUsage(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	code, _, errOut := relayCmd(t, "sub", "test", "nobody", "--nats", n.URL)
	require.Equal(t, exitFailure, code)
	require.Equal(t, "relay: no such subscriber: nobody (relay sub ls lists them)\n", errOut)

	unreachable := "nats://127.0.0.1:1"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"a.b"}, "ID"},
		{[]string{"demo", "--data", "{not json"}, "--data: must be JSON"},
		{[]string{"demo", "--data", ""}, "--data: must be JSON"},
		{[]string{"demo", "--type", "order.*"}, "--type: must be an event type"},
		{[]string{"demo", "--type", "x", "--data", "{}"}, "--type and --data cannot be combined"},
		{[]string{"demo", "--wait", "-1s"}, "--wait: must be 0"},
		{[]string{}, "expects a subscriber ID"},
	} {
		code, _, errOut := relayCmd(t, append(append([]string{"sub", "test"}, c.args...), "--nats", unreachable)...)
		require.Equal(t, exitUsage, code, "%v: %s", c.args, errOut)
		require.Contains(t, errOut, c.want, "%v", c.args)
		require.Equal(t, 1, strings.Count(errOut, "\n"), errOut)
	}
}

// The cut of a reply's body keeps whole characters, and roundTook reads
// as a person reads a time.
func TestSubTestPrintingHelpers(t *testing.T) {
	t.Parallel()
	e := []byte("é") // two bytes
	require.Equal(t, []byte("aé"), wholeRunes(append([]byte("aé"), e[0]), true))
	require.Equal(t, []byte("aé"), wholeRunes([]byte("aé"), true))
	bin := []byte{0xff, 0xfe, 0xfd, 0xfc, 0xfb}
	require.Equal(t, bin, wholeRunes(bin, true), "binary is left to base64")
	require.Equal(t, append([]byte("a"), e[0]), wholeRunes(append([]byte("a"), e[0]), false))

	for d, want := range map[string]string{"12345678ns": "12ms", "1234567ns": "1.2ms", "345678ns": "346µs", "2500ms": "2.5s"} {
		dur, err := time.ParseDuration(d)
		require.NoError(t, err)
		require.Equal(t, want, roundTook(dur).String())
	}
}

// relay sub test as the users of docs/permissions.md: relay-admin asks,
// relay answers as relay-service, and neither is refused anything. Without
// the grants of relay.api.sub.test and relay.api.>, the command is refused
// at once, naming the subject, and relay run logs its refused subscription
// and runs on.
func TestSubTestPermissionsOfTheDoc(t *testing.T) {
	t.Parallel()
	t.Run("granted", func(t *testing.T) {
		t.Parallel()
		url := startDocNATS(t, docAccount(t))
		rcv := newReceiver(t)
		r := startRelay(t, url, append(creds("relay"), "--allow-private-targets")...)
		waitRunning(t, r)
		mustRelayAs(t, url, "relay-admin", "sub", "add", "demo", "--url", rcv.URL, "--secret", testSecret)
		out := mustRelayAs(t, url, "relay-admin", "sub", "test", "demo")
		require.Contains(t, out, "status: 200\n")
		require.Equal(t, 1, rcv.count())
		require.NotContains(t, r.stderr.String(), "refused permission")
	})
	t.Run("refused", func(t *testing.T) {
		t.Parallel()
		account := docAccount(t)
		require.Equal(t, 1, strings.Count(account, "\"relay.api.sub.test\"\n"), "relay-admin is granted the subject")
		require.Equal(t, 1, strings.Count(account, "[\"relay.api.>\", \"$SRV.>\"]"), "relay-service is granted the API")
		account = strings.ReplaceAll(account, "\"relay.api.sub.test\"\n", "\n")
		url := startDocNATS(t, strings.ReplaceAll(account, "[\"relay.api.>\", \"$SRV.>\"]", "[\"relay.api.none\"]"))
		r := startRelay(t, url, append(creds("relay"), "--allow-private-targets")...)
		waitRunning(t, r)
		mustRelayAs(t, url, "relay-admin", "sub", "add", "demo", "--url", "https://example.com/hook", "--secret", testSecret)
		start := time.Now()
		code, _, stderr := relayAs(t, url, "relay-admin", "sub", "test", "demo")
		require.Equal(t, exitFailure, code, stderr)
		require.Equal(t, "relay: NATS refused permission to publish to \"relay.api.sub.test\" for this user; grant it (see docs/permissions.md)\n", stderr)
		require.Less(t, time.Since(start), refusedQuickly)
		want := `NATS refused permission to subscribe to \"relay.api.sub.test\" for this user`
		testutil.Eventually(t, func() bool { return strings.Contains(r.stderr.String(), want) }, "no refusal logged: %s", r.stderr)
	})
}

// hostileReplies are reply subjects of relay's own streams, buckets and
// events that a request may name (nats pub relay.api.sub.test --reply …).
var hostileReplies = []string{"retries.wait.victim.x", "bodies.1", "events.x", "events.relay.x", "$KV.relay_refill.victim"}

// attackSubTest publishes a test request of victim with each of
// hostileReplies as its reply subject, and returns once the server has
// them: a request asked after it reaches the relay after them.
func attackSubTest(t *testing.T, nc *nats.Conn) {
	t.Helper()
	data, err := json.Marshal(testrequest.Request{Subscriber: "victim"})
	require.NoError(t, err)
	for _, reply := range hostileReplies {
		require.NoError(t, nc.PublishRequest(testrequest.Subject, reply, data))
	}
	require.NoError(t, nc.Flush())
}

// requireNoAnswerStored checks that no stream the hostile replies name
// holds a message: no answer was stored, no event published.
func requireNoAnswerStored(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	ctx := testutil.Context(t)
	for _, name := range []string{streams.Events, streams.Deliveries, streams.Retries, streams.DLQ, streams.Bodies, streams.Attempts,
		"KV_" + streams.RefillBucket} {
		s, err := js.Stream(ctx, name)
		require.NoError(t, err)
		info, err := s.Info(ctx)
		require.NoError(t, err)
		require.Zero(t, info.State.Msgs, "%s holds an answer of relay sub test", name)
	}
}

// A test request whose reply subject is one of relay's streams, buckets or
// events (the confused deputy: relay answering there with its own
// permissions) is neither made nor answered, on the embedded server and on
// a cluster of the users of docs/permissions.md, where the subscription is
// the service user's; relay sub test asked after it answers as always.
func TestSubTestAnswersOnlyOnInboxes(t *testing.T) {
	t.Parallel()
	t.Run("embedded", func(t *testing.T) {
		t.Parallel()
		listen := testutil.FreeAddr(t)
		url := "nats://" + listen
		startEmbeddedRelay(t, t.TempDir(), listen)
		rcv := newReceiver(t)
		mustRelay(t, "sub", "add", "victim", "--nats", url, "--url", rcv.URL, "--secret", testSecret)
		nc := testutil.Connect(t, url)
		attackSubTest(t, nc)
		out := mustRelay(t, "sub", "test", "victim", "--nats", url)
		require.Contains(t, out, "status: 200\n")
		require.Equal(t, 1, rcv.count(), "only the request asked from an inbox is made")
		js, err := jetstream.New(nc)
		require.NoError(t, err)
		requireNoAnswerStored(t, js)
	})
	t.Run("doc users", func(t *testing.T) {
		t.Parallel()
		srv := startDocServer(t, docAccount(t))
		url := srv.ClientURL()
		r := startRelay(t, url, append(creds("relay"), "--allow-private-targets")...)
		waitRunning(t, r)
		rcv := newReceiver(t)
		mustRelayAs(t, url, "relay-admin", "sub", "add", "victim", "--url", rcv.URL, "--secret", testSecret)
		attackSubTest(t, connectAs(t, url, "relay-admin").Conn())
		out := mustRelayAs(t, url, "relay-admin", "sub", "test", "victim")
		require.Contains(t, out, "status: 200\n")
		require.Equal(t, 1, rcv.count(), "only the request asked from an inbox is made")
		requireNoAnswerStored(t, connectAs(t, url, "relay"))
		require.NotContains(t, r.stderr.String(), "refused permission")
		require.NotContains(t, r.stderr.String(), "answered from relay's own connection")

		// Whatever relay's code does, the server holds the line: the
		// subscription is the service user's, who may publish to inboxes
		// alone.
		require.Equal(t, []string{"relay-service"}, subTestServers(t, srv))
	})
	t.Run("relay's user in the URL", func(t *testing.T) {
		// nats.go prefers a URL's user to the options given with it: the
		// service connection must not run as relay's user for it.
		t.Parallel()
		srv := startDocServer(t, docAccount(t))
		url := strings.Replace(srv.ClientURL(), "nats://", "nats://relay:"+docPasswords["relay"]+"@", 1)
		r := startRelay(t, url, "--service-user", "relay-service", "--service-password", docPasswords["relay-service"])
		waitRunning(t, r)
		require.Equal(t, []string{"relay-service"}, subTestServers(t, srv))
	})
	t.Run("no service user", func(t *testing.T) {
		t.Parallel()
		n := testutil.StartRelayNATS(t)
		r := startRelay(t, n.URL, "--allow-private-targets")
		waitRunning(t, r)
		rcv := newReceiver(t)
		mustRelay(t, "sub", "add", "victim", "--nats", n.URL, "--url", rcv.URL, "--secret", testSecret)
		attackSubTest(t, n.Conn)
		out := mustRelay(t, "sub", "test", "victim", "--nats", n.URL)
		require.Contains(t, out, "status: 200\n")
		require.Equal(t, 1, rcv.count(), "only the request asked from an inbox is made")
		requireNoAnswerStored(t, n.JS)
		require.Equal(t, 1, strings.Count(r.stderr.String(), "answered from relay's own connection"), "warned once: %s", r.stderr)
	})
}

// subTestServers are the users of srv's connections subscribed to
// relay sub test's subject.
func subTestServers(t *testing.T, srv *server.Server) []string {
	t.Helper()
	conns, err := srv.Connz(&server.ConnzOptions{Username: true, Subscriptions: true})
	require.NoError(t, err)
	var servers []string
	for _, c := range conns.Conns {
		if slices.Contains(c.Subs, testrequest.Subject) {
			servers = append(servers, c.AuthorizedUser)
		}
	}
	return servers
}

// Service credentials NATS refuses fail relay run's start, naming them.
func TestRunRefusedServiceUserFailsTheStart(t *testing.T) {
	t.Parallel()
	url := startDocNATS(t, docAccount(t))
	code, _, stderr := relayCmd(t, "run", "--nats", url, "--user", "relay", "--password", docPasswords["relay"], "--metrics", "",
		"--service-user", "relay-service", "--service-password", "wrong")
	require.Equal(t, exitFailure, code, stderr)
	require.Contains(t, stderr, "as the service user")
	require.NotContains(t, stderr, "wrong")
}
