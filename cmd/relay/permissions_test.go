package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/internal/deadletter"
	"github.com/relay-dev/relay/internal/status"
	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/internal/timeliness"
	"github.com/relay-dev/relay/streams"
)

// permissionsDoc is the permissions reference, relative to this package.
var permissionsDoc = filepath.Join("..", "..", "docs", "permissions.md")

// docPasswords are the passwords of the users of docs/permissions.md.
var docPasswords = map[string]string{
	"relay":         "relay-run-password",
	"relay-admin":   "relay-admin-password",
	"relay-status":  "relay-status-password",
	"relay-service": "relay-service-password",
	"publisher":     "publisher-password",
}

// refusedQuickly bounds how long a refused command may take: well under
// the 5 s a JetStream request waits by default, so that a command that only
// timed out fails the test.
const refusedQuickly = 3 * time.Second

// docAccount returns the ```conf block of docs/permissions.md: the tests run
// against the very text operators copy, so the page cannot drift from what
// relay needs.
func docAccount(t testing.TB) string {
	t.Helper()
	raw, err := os.ReadFile(permissionsDoc)
	if err != nil {
		t.Fatalf("reading the permissions reference: %v", err)
	}
	_, rest, found := strings.Cut(string(raw), "```conf\n")
	block, _, closed := strings.Cut(rest, "```")
	if !found || !closed {
		t.Fatal("docs/permissions.md has no ```conf block")
	}
	return block
}

// without returns the account block with a permission taken out of every
// user's list, as an operator who left it out would have it.
func without(t testing.TB, account, subject string) string {
	t.Helper()
	quoted := `"` + subject + `"`
	if !strings.Contains(account, quoted) {
		t.Fatalf("docs/permissions.md grants no %s", quoted)
	}
	account = strings.ReplaceAll(account, ", "+quoted, "")
	return strings.ReplaceAll(account, quoted+", ", "")
}

// startDocNATS starts a nats-server with account as its whole
// authorization, loaded from a file as nats-server loads its config, on a
// random loopback port with JetStream in a temporary directory, and returns
// its URL.
func startDocNATS(t testing.TB, account string) string {
	t.Helper()
	return startDocServer(t, account).ClientURL()
}

// startDocServer is startDocNATS returning the server.
func startDocServer(t testing.TB, account string) *server.Server {
	t.Helper()
	dir := t.TempDir()
	conf := fmt.Sprintf("host: 127.0.0.1\nport: -1\njetstream { store_dir: %q }\n%s", filepath.Join(dir, "jetstream"), account)
	path := filepath.Join(dir, "nats-server.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("nats-server rejects the account block of docs/permissions.md: %v", err)
	}
	opts.NoLog, opts.NoSigs = true, true
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("new server: %v", err)
	}
	srv.Start()
	t.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	return srv
}

// creds is the credential flags of a user of docs/permissions.md; relay
// run as relay answers relay sub test as relay-service, as the page says.
func creds(user string) []string {
	c := []string{"--user", user, "--password", docPasswords[user]}
	if user == "relay" {
		c = append(c, "--service-user", "relay-service", "--service-password", docPasswords["relay-service"])
	}
	return c
}

// as is creds with the server's URL.
func as(url, user string) []string {
	return append([]string{"--nats", url}, creds(user)...)
}

// relayAs runs one relay command as user.
func relayAs(t *testing.T, url, user string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return relayCmd(t, append(args, as(url, user)...)...)
}

// mustRelayAs runs one relay command as user and fails the test unless it
// exits 0.
func mustRelayAs(t *testing.T, url, user string, args ...string) string {
	t.Helper()
	return mustRelay(t, append(args, as(url, user)...)...)
}

// connectAs opens a JetStream connection as user, closed when the test ends.
// A subject NATS refuses it fails the test naming the subject, and closes
// the connection, so that what waited for an answer fails at once instead
// of timing out.
func connectAs(t testing.TB, url, user string) jetstream.JetStream {
	t.Helper()
	var once sync.Once
	nc, err := nats.Connect(url, nats.UserInfo(user, docPasswords[user]),
		nats.ErrorHandler(func(nc *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrPermissionViolation) {
				err = permissionError(err)
			}
			once.Do(func() {
				t.Errorf("%s: %v", user, err)
				nc.Close()
			})
		}))
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// waitRunning waits until relay run says it runs, and fails the test at once
// with its log if it exits first, as it does when NATS refuses its start.
func waitRunning(t *testing.T, r *runningRelay) {
	t.Helper()
	testutil.Eventually(t, func() bool {
		select {
		case code := <-r.done:
			r.done <- code
			t.Fatalf("relay run exited %d before running: %s", code, r.stderr.String())
		default:
		}
		return strings.Contains(r.stderr.String(), `msg="relay running"`)
	}, "relay run did not start: %s", r.stderr)
}

// TestPermissionsOfTheDocRunEveryCommand runs the life of subscribers with
// each command as the user docs/permissions.md gives it, through every path
// of relay run that talks to NATS in its own way: relay run creates the
// streams and buckets (a first start); the publisher publishes; an event is
// delivered; a failed attempt is retried by the mover; a 410 Gone disables
// its subscriber; a rejection is dead-lettered, shown, replayed and purged;
// a pause holds a delivery in the overflow and a resume brings it back; a
// subscriber with a dedicated lane and parked deliveries, and one with a
// queued delivery, are removed; a second relay run starts on the streams
// that exist and changes one. Any subject the page forgets is refused:
// the refused command fails the test with the subject, and relay run logs
// it, which fails the test too.
func TestPermissionsOfTheDocRunEveryCommand(t *testing.T) {
	t.Parallel()
	url := startDocNATS(t, docAccount(t))
	ok, bad, gone, flaky := newReceiver(t), newReceiver(t), newReceiver(t), newReceiver(t)
	bad.setStatus(http.StatusBadRequest)
	gone.setStatus(http.StatusGone)
	flaky.setStatus(http.StatusInternalServerError)
	retried := failOnce(t)
	r := startRelay(t, url, append(creds("relay"), "--allow-private-targets")...)
	waitRunning(t, r)
	// await fails at once when relay run logs a refusal, rather than wait
	// for what the refusal holds up.
	await := func(cond func() bool, what string) {
		t.Helper()
		testutil.Eventually(t, func() bool {
			if log := r.stderr.String(); strings.Contains(log, "refused permission") {
				t.Fatalf("relay run was refused a permission:\n%s", log)
			}
			return cond()
		}, "%s: %s", what, r.stderr)
	}

	admin := func(args ...string) string { return mustRelayAs(t, url, "relay-admin", args...) }
	reader := func(args ...string) string { return mustRelayAs(t, url, "relay-status", args...) }
	detail := func(id string) status.Detail {
		var d status.Detail
		if err := json.Unmarshal([]byte(reader("status", "--subscriber", id, "--json")), &d); err != nil {
			t.Fatal(err)
		}
		return d
	}
	secret := []string{"--secret", testSecret}
	admin(append([]string{"sub", "add", "ok", "--url", ok.URL, "--events", "video.*,note.*"}, secret...)...)
	admin(append([]string{"sub", "add", "bad", "--url", bad.URL, "--events", "video.*"}, secret...)...)
	admin(append([]string{"sub", "add", "gone", "--url", gone.URL, "--events", "video.*"}, secret...)...)
	admin(append([]string{"sub", "add", "flaky", "--url", flaky.URL, "--events", "video.*", "--lane", "dedicated",
		"--retry-base", "1h", "--max-attempts", "3"}, secret...)...)
	admin(append([]string{"sub", "add", "retried", "--url", retried.URL, "--events", "retry.*", "--retry-base", "100ms"}, secret...)...)
	admin("sub", "update", "ok", "--rate", "100")
	admin("sub", "get", "ok")
	if out := reader("sub", "ls"); !strings.Contains(out, "flaky") {
		t.Fatalf("relay sub ls as relay-status:\n%s", out)
	}

	js := connectAs(t, url, "publisher")
	publish(t, js, "video.trending", "evt_1", []byte(`{"n":1}`))
	publish(t, js, "video.trending", "evt_2", []byte(`{"n":2}`))
	publish(t, js, "retry.me", "evt_r", []byte(`{}`))
	await(func() bool { return ok.count() == 2 }, "no delivery to ok")
	verify(t, ok.deliveries()[0])
	await(func() bool { return retried.count() == 2 }, "the retry was not delivered")
	// Its two attempts are recorded, and relay-status reads them.
	// (The records are written a moment after the deliveries: until then
	// relay trace finds none and exits 1.)
	await(func() bool {
		code, out, errOut := relayAs(t, url, "relay-status", "trace", "evt_r")
		if strings.Contains(errOut, "refused permission") {
			t.Fatalf("relay trace as relay-status: %s", errOut)
		}
		return code == 0 && strings.Count(out, "retried ") == 3 // its state and its two attempts
	}, "relay trace does not show the retry's two attempts")
	if d := detail("retried"); len(d.LastFailedAttempts) != 1 || d.LastFailedAttempts[0].Status != http.StatusServiceUnavailable {
		t.Fatalf("relay status --subscriber retried: last failed attempts %+v", d.LastFailedAttempts)
	}
	await(func() bool { return strings.Contains(reader("sub", "get", "gone"), "disabled (410 Gone") }, "gone was not disabled")

	var dead []deadletter.Entry
	await(func() bool {
		return json.Unmarshal([]byte(admin("dlq", "ls", "--subscriber", "bad", "--json")), &dead) == nil && len(dead) == 2
	}, "no dead letters of bad")
	await(func() bool { d := detail("flaky"); return d.Parked != nil && *d.Parked == 2 }, "flaky's deliveries were not parked")
	if d := detail("bad"); len(d.LastErrors) != 2 {
		t.Fatalf("relay status --subscriber bad: last errors %+v", d.LastErrors)
	}
	if out := reader("status"); !strings.Contains(out, "retried") {
		t.Fatalf("relay status as relay-status:\n%s", out)
	}

	bad.setStatus(http.StatusOK)
	admin("dlq", "show", fmt.Sprint(dead[0].DLQSeq))
	admin("dlq", "replay", "--seq", fmt.Sprint(dead[0].DLQSeq))
	await(func() bool { return bad.count() == 3 }, "the replayed dead letter was not delivered")
	if out := admin("dlq", "purge", "--subscriber", "bad", "--yes"); !strings.Contains(out, "purged 1 ") {
		t.Fatalf("relay dlq purge: %s", out)
	}

	// A paused subscriber's delivery waits in its overflow; resumed, its
	// lane reads it back and purges it there.
	admin("sub", "pause", "ok")
	publish(t, js, "note.held", "evt_3", []byte(`{"n":3}`))
	await(func() bool { return detail("ok").Overflow == 1 }, "ok's delivery is not held")
	admin("sub", "resume", "ok")
	await(func() bool { return ok.count() == 3 }, "ok's held delivery was not sent")

	admin("sub", "pause", "ok")
	publish(t, js, "note.held", "evt_4", []byte(`{"n":4}`))
	await(func() bool { return detail("ok").Pending == 1 }, "ok's delivery is not held")
	if out := admin("sub", "rm", "ok", "--yes"); !strings.Contains(out, "1 queued, 0 parked and 0 scheduled") {
		t.Fatalf("relay sub rm ok: %s", out)
	}
	if out := admin("sub", "rm", "flaky", "--yes"); !strings.Contains(out, "0 queued, 2 parked and 0 scheduled") {
		t.Fatalf("relay sub rm flaky: %s", out)
	}
	// The relay deletes the dedicated lane of a removed subscriber.
	lanes := connectAs(t, url, "relay-status")
	await(func() bool {
		_, err := lanes.Consumer(testutil.Context(t), streams.Deliveries, "lane_d_flaky")
		return errors.Is(err, jetstream.ErrConsumerNotFound)
	}, "the dedicated lane of flaky was not deleted")

	// Its stop, which ends its watches, must not be refused either; nor a
	// second start on the streams that now exist, which updates the one
	// whose definition it changes.
	stop := func(r *runningRelay) {
		t.Helper()
		if code := r.stop(); code != 0 {
			t.Fatalf("relay run exited %d: %s", code, r.stderr)
		}
		if strings.Contains(r.stderr.String(), "refused permission") {
			t.Fatalf("relay run was refused a permission:\n%s", r.stderr)
		}
	}
	stop(r)
	again := startRelay(t, url, append(creds("relay"), "--dlq-max-age", "48h")...)
	waitRunning(t, again)
	stop(again)
}

// failOnce is a webhook receiver that answers its first request 503 and
// every later one 200, so that a delivery succeeds on its first retry.
func failOnce(t *testing.T) *webhookSink {
	t.Helper()
	return failFirst(t, 1, http.StatusServiceUnavailable, nil)
}

// failFirst is a webhook receiver that answers its first n requests status,
// with the headers h, and every later one 200.
func failFirst(t *testing.T, n, status int, h http.Header) *webhookSink {
	t.Helper()
	r := &webhookSink{status: http.StatusOK}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		_, _ = io.Copy(io.Discard, req.Body)
		r.mu.Lock()
		r.got = append(r.got, delivery{header: req.Header.Clone(), path: req.URL.Path})
		failing := len(r.got) <= n
		r.mu.Unlock()
		if failing {
			for k, v := range h {
				w.Header()[k] = v
			}
			w.WriteHeader(status)
		}
	}))
	t.Cleanup(r.Close)
	return r
}

// TestPermissionRefusedIsNamedAtOnce runs commands as users the page does
// not give them to: each must exit 1 at once with one line naming the
// subject NATS refused, not time out with "context deadline exceeded".
func TestPermissionRefusedIsNamedAtOnce(t *testing.T) {
	t.Parallel()
	url := startDocNATS(t, docAccount(t))
	// The streams exist, as created by relay's own user, and hold a
	// subscriber and a dead letter, so that the commands get as far as
	// reading them.
	relayJS := connectAs(t, url, "relay")
	if err := streams.Ensure(testutil.Context(t), relayJS, streams.Options{}); err != nil {
		t.Fatalf("streams.Ensure as relay: %v", err)
	}
	mustRelayAs(t, url, "relay-admin", "sub", "add", "seeded", "--url", "https://example.com/hook", "--secret", testSecret)
	if _, err := relayJS.Publish(testutil.Context(t), "dlq.seeded.rejected", []byte("{}")); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		name, user string
		args       []string
		refused    string
	}{
		{"status as the publisher", "publisher", []string{"status"}, `publish to "$JS.API.STREAM.INFO.KV_relay_subscribers"`},
		// relay-admin reads relay_ratelimit for relay sub resume, not
		// EVENTS.
		{"status as relay-admin", "relay-admin", []string{"status"}, `publish to "$JS.API.STREAM.INFO.EVENTS"`},
		// A frame of --watch that fails is reported and the next one
		// drawn; a refusal ends the watch.
		{"status --watch as relay-admin", "relay-admin", []string{"status", "--watch", "--interval", "100ms"}, `publish to "$JS.API.STREAM.INFO.EVENTS"`},
		{"sub add as relay-status", "relay-status", []string{"sub", "add", "demo", "--url", "https://example.com/hook", "--secret", testSecret}, `publish to "$KV.relay_subscribers.demo"`},
		{"dlq ls as relay-status", "relay-status", []string{"dlq", "ls"}, `publish to "$JS.API.CONSUMER.CREATE.DLQ.`},
		{"dlq purge as relay-status", "relay-status", []string{"dlq", "purge", "--yes"}, `publish to "$JS.API.STREAM.PURGE.DLQ"`},
		{"run as relay-admin", "relay-admin", []string{"run", "--metrics", ""}, `publish to "$JS.API.STREAM.INFO.ATTEMPTS"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			code, _, stderr := relayAs(t, url, c.user, c.args...)
			took := time.Since(start)
			// relay run logs before it fails; its error is the last line.
			lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
			last := lines[len(lines)-1]
			want := "relay: NATS refused permission to " + c.refused
			if code != exitFailure || !strings.HasPrefix(last, want) || !strings.HasSuffix(last, "for this user; grant it (see docs/permissions.md)") ||
				strings.Count(stderr, "relay: ") != 1 {
				t.Fatalf("exit %d, stderr %q; want exit 1 and one error line starting %q", code, stderr, want)
			}
			if took > refusedQuickly {
				t.Fatalf("took %s to report the refusal, want less than %s", took, refusedQuickly)
			}
		})
	}
}

// TestPermissionsOfTheDocCoverDeadlineCounts runs the life of a
// subscriber's deadline counts as the users of docs/permissions.md: relay
// creates relay_timeliness and writes the counts (a create, then a
// compare-and-set on the entry), relay-status reads them in relay status,
// relay-admin deletes them with relay sub rm. A missing grant is refused,
// and the refusal fails the test with its subject.
func TestPermissionsOfTheDocCoverDeadlineCounts(t *testing.T) {
	t.Parallel()
	url := startDocNATS(t, docAccount(t))
	ctx := testutil.Context(t)
	relayJS := connectAs(t, url, "relay")
	if err := streams.Ensure(ctx, relayJS, streams.Options{}); err != nil {
		t.Fatalf("streams.Ensure as relay: %v", err)
	}
	kv, err := relayJS.KeyValue(ctx, streams.TimelinessBucket)
	if err != nil {
		t.Fatalf("opening %s as relay: %v", streams.TimelinessBucket, err)
	}
	mustRelayAs(t, url, "relay-admin", "sub", "add", "crm", "--url", "https://example.com/hook", "--secret", testSecret)
	r := timeliness.NewRecorder(kv)
	r.Met("crm")
	r.Met("crm")
	if err := r.Flush(ctx); err != nil {
		t.Fatalf("first flush as relay: %v", err)
	}
	r.Missed("crm")
	if err := r.Flush(ctx); err != nil {
		t.Fatalf("second flush as relay: %v", err)
	}
	var d status.Detail
	if err := json.Unmarshal([]byte(mustRelayAs(t, url, "relay-status", "status", "--subscriber", "crm", "--json")), &d); err != nil {
		t.Fatal(err)
	}
	if d.Met != 2 || d.Missed != 1 {
		t.Fatalf("relay status as relay-status: met %d, missed %d; want 2, 1", d.Met, d.Missed)
	}
	if out := mustRelayAs(t, url, "relay-status", "status"); !strings.Contains(out, "in time 66.7% (2 met, 1 missed)") {
		t.Fatalf("relay status as relay-status:\n%s", out)
	}
	code, _, stderr := relayAs(t, url, "relay-admin", "sub", "rm", "crm")
	if code != 0 || stderr != "" {
		t.Fatalf("relay sub rm as relay-admin: exit %d, stderr %q", code, stderr)
	}
	if c, err := timeliness.Read(ctx, kv, "crm"); err != nil || c != (timeliness.Counts{}) {
		t.Fatalf("the counts of crm after relay sub rm: %+v, %v; want none", c, err)
	}
}

// TestPermissionsCoverFlowControl lists a subscriber bucket larger than a
// watch's flow-control window (the server asks the client to confirm after
// 1 MiB): with the page's permissions relay run, relay sub ls and relay
// status read it all; without $JS.FC the listing is refused, which shows the
// grant is needed and that the listing reached the window.
func TestPermissionsCoverFlowControl(t *testing.T) {
	t.Parallel()
	fill := func(t *testing.T, url string) {
		if err := streams.Ensure(testutil.Context(t), connectAs(t, url, "relay"), streams.Options{}); err != nil {
			t.Fatalf("streams.Ensure as relay: %v", err)
		}
		js := connectAs(t, url, "relay-admin")
		long := "https://example.com/" + strings.Repeat("x", 2000)
		for i := range largeBucket {
			sub := subscribers.Subscriber{ID: fmt.Sprintf("s%04d", i), URL: long, Secrets: []string{testSecret}, Disabled: true}
			sub.SetDefaults()
			raw, err := json.Marshal(sub)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := js.PublishAsync("$KV."+streams.SubscribersBucket+"."+sub.ID, raw); err != nil {
				t.Fatal(err)
			}
		}
		select {
		case <-js.PublishAsyncComplete():
		case <-time.After(10 * time.Second):
			t.Fatal("filling the bucket: no PubAcks")
		}
	}
	t.Run("granted", func(t *testing.T) {
		t.Parallel()
		url := startDocNATS(t, docAccount(t))
		fill(t, url)
		for _, user := range []string{"relay-admin", "relay-status"} {
			if out := mustRelayAs(t, url, user, "sub", "ls"); strings.Count(out, "\n") != largeBucket+1 {
				t.Fatalf("relay sub ls as %s listed %d lines, want %d", user, strings.Count(out, "\n"), largeBucket+1)
			}
		}
		mustRelayAs(t, url, "relay-status", "status")
		waitRunning(t, startRelay(t, url, creds("relay")...))
	})
	t.Run("refused", func(t *testing.T) {
		t.Parallel()
		url := startDocNATS(t, without(t, docAccount(t), "$JS.FC.KV_relay_subscribers.>"))
		fill(t, url)
		code, _, stderr := relayAs(t, url, "relay-admin", "sub", "ls")
		if want := `relay: NATS refused permission to publish to "$JS.FC.KV_relay_subscribers.`; code != exitFailure || !strings.HasPrefix(stderr, want) {
			t.Fatalf("exit %d, stderr %q; want exit 1 and %q", code, stderr, want)
		}
	})
}

// largeBucket is how many subscribers of about 2 KiB make a bucket past the
// flow-control window.
const largeBucket = 800

// TestPermissionRevokedWhileRunningIsLogged runs relay run without the
// right to publish dead letters: the start does not need it, so the relay
// runs; the refusal is logged with its subject when a delivery dies, and
// the relay goes on (and stops cleanly).
func TestPermissionRevokedWhileRunningIsLogged(t *testing.T) {
	t.Parallel()
	url := startDocNATS(t, without(t, docAccount(t), "dlq.>"))
	bad := newReceiver(t)
	bad.setStatus(400)
	// The dead letter it keeps trying to store is abandoned at the stop.
	r := startRelay(t, url, append(creds("relay"), "--allow-private-targets", "--shutdown-timeout", "0")...)
	waitRunning(t, r)
	mustRelayAs(t, url, "relay-admin", "sub", "add", "bad", "--url", bad.URL, "--secret", testSecret)
	publish(t, connectAs(t, url, "publisher"), "video.trending", "evt_1", []byte(`{}`))
	want := `msg="NATS refused permission to publish to \"dlq.bad.rejected\" for this user; grant it (see docs/permissions.md)"`
	testutil.Eventually(t, func() bool { return strings.Contains(r.stderr.String(), want) }, "no refusal logged: %s", r.stderr)
	if strings.Count(r.stderr.String(), want) != 1 {
		t.Fatalf("the refusal is logged more than once in its window:\n%s", r.stderr)
	}
}

// TestPermissionErrorNamesTheDirection reads both forms nats.go reports a
// refusal in; a subscription refusal carries a queue group after the
// subject when there is one.
func TestPermissionErrorNamesTheDirection(t *testing.T) {
	t.Parallel()
	for server, want := range map[string]string{
		`Permissions Violation for Publish to "dlq.demo.gone"`:                 `NATS refused permission to publish to "dlq.demo.gone" for this user; grant it (see docs/permissions.md)`,
		`Permissions Violation for Subscription to "$KV.relay_subscribers.>"`:  `NATS refused permission to subscribe to "$KV.relay_subscribers.>" for this user; grant it (see docs/permissions.md)`,
		`Permissions Violation for Subscription to "events.>" using queue "q"`: `NATS refused permission to subscribe to "events.>" for this user; grant it (see docs/permissions.md)`,
		`Permissions Violation for something else`:                             `NATS refused permission: nats: permissions violation: Permissions Violation for something else; grant it (see docs/permissions.md)`,
	} {
		err := permissionError(fmt.Errorf("%w: %s", nats.ErrPermissionViolation, server))
		if err.Error() != want || !errors.Is(err, errPermission) {
			t.Errorf("%s:\n got %q\nwant %q", server, err, want)
		}
	}
}
