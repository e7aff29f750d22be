package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/relay-dev/relay/internal/deadletter"
	"github.com/relay-dev/relay/internal/deliver"
	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/internal/testutil"
)

func TestInvalidCommandLinesExit2WithOneLineAndWriteNothing(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	add := func(args ...string) []string {
		return append([]string{"sub", "add", "--nats", n.URL}, args...)
	}
	ok := []string{"--url", "https://example.com/hook", "--secret", testSecret}
	tests := []struct {
		name string
		args []string
		want string // part of the one-line message
	}{
		{"bad id", add(append([]string{"bad id!"}, ok...)...), "ID"},
		{"long id", add(append([]string{strings.Repeat("a", 65)}, ok...)...), "ID"},
		{"no url", add("s", "--secret", testSecret), "url"},
		{"ftp url", add("s", "--url", "ftp://example.com/", "--secret", testSecret), "--url"},
		{"url without host", add("s", "--url", "http:///path", "--secret", testSecret), "--url"},
		{"secret without prefix", add("s", "--url", "https://example.com/", "--secret", "abc"), "--secret"},
		{"secret too short", add("s", "--url", "https://example.com/", "--secret", "whsec_YWJj"), "--secret"},
		{"secret not base64", add("s", "--url", "https://example.com/", "--secret", "whsec_!!!!"), "--secret"},
		{"negative rate", add(append([]string{"s", "--rate", "-1"}, ok...)...), "--rate"},
		{"negative burst", add(append([]string{"s", "--burst", "-1"}, ok...)...), "--burst"},
		{"zero timeout", add(append([]string{"s", "--timeout", "0s"}, ok...)...), "--timeout"},
		{"timeout not a duration", add(append([]string{"s", "--timeout", "soon"}, ok...)...), "timeout"},
		{"zero max attempts", add(append([]string{"s", "--max-attempts", "0"}, ok...)...), "--max-attempts"},
		{"zero in flight", add(append([]string{"s", "--max-in-flight", "0"}, ok...)...), "--max-in-flight"},
		// The breaker's flags: one rule, the subscriber's, in its words.
		{"breaker window too short", add(append([]string{"s", "--breaker-window", "500ms"}, ok...)...), "--breaker-window: must be from 1s to 10m0s, got 500ms"},
		{"breaker rate above 1", add(append([]string{"s", "--breaker-failure-rate", "2"}, ok...)...), "--breaker-failure-rate: must be a share of requests above 0 and at most 1, such as 0.5, got 2"},
		{"zero breaker rate", add(append([]string{"s", "--breaker-failure-rate", "0"}, ok...)...), "--breaker-failure-rate: must be a share of requests above 0 and at most 1, such as 0.5, got 0"},
		{"zero breaker min requests", add(append([]string{"s", "--breaker-min-requests", "0"}, ok...)...), "--breaker-min-requests: must be from 1 to 100000, got 0"},
		{"zero breaker consecutive", add(append([]string{"s", "--breaker-consecutive", "0"}, ok...)...), "--breaker-consecutive: must be from 1 to 100000, got 0"},
		{"zero breaker window", add(append([]string{"s", "--breaker-window", "0s"}, ok...)...), "--breaker-window: must be from 1s to 10m0s, got 0s"},
		{"bad filter", add(append([]string{"s", "--events", "video.>.x"}, ok...)...), "--events"},
		{"bad header", add(append([]string{"s", "--header", "no colon"}, ok...)...), "--header"},
		{"reserved header", add(append([]string{"s", "--header", "webhook-id: x"}, ok...)...), "--header"},
		{"bad lane", add(append([]string{"s", "--lane", "fast"}, ok...)...), "--lane"},
		{"retry max below base", add(append([]string{"s", "--retry-base", "10s", "--retry-max", "1s"}, ok...)...), "--retry-max"},
		{"unknown flag", add(append([]string{"s", "--colour", "red"}, ok...)...), "unknown flag"},
		{"two ids", add(append([]string{"s", "t"}, ok...)...), "expects a subscriber ID, got 2 arguments (see relay sub add --help)"},
		{"unknown command", []string{"frobnicate"}, "unknown command"},
		{"unknown sub command", []string{"sub", "tset", "x"}, `unknown command "tset" for "relay sub"; its commands: add,`},
		{"unknown dlq command", []string{"dlq", "replya"}, `unknown command "replya" for "relay dlq"; its commands: ls,`},
		{"run lanes zero", []string{"run", "--nats", n.URL, "--lanes", "0"}, "--lanes"},
		{"run bad listen", []string{"run", "--listen", "nowhere"}, "--listen"},
		{"run bad log level", []string{"run", "--nats", n.URL, "--log-level", "loud"}, "--log-level"},
		{"run bad replicas", []string{"run", "--nats", n.URL, "--replicas", "2"}, "--replicas"},
		{"run bad metrics subscribers", []string{"run", "--nats", n.URL, "--metrics-subscribers", "top:0"}, `--metrics-subscribers: must be all, top:N (N at least 1) or none, got "top:0"`},
		{"run replicas on the embedded server", []string{"run", "--replicas", "3"}, "--replicas"},
		{"run service user on the embedded server", []string{"run", "--service-user", "relay-service"}, "go with --nats"},
		{"run service password without user", []string{"run", "--nats", n.URL, "--service-password", "pw"}, "--service-password: needs --service-user"},
		{"run zero ack wait", []string{"run", "--nats", n.URL, "--ack-wait", "0s"}, "--ack-wait"},
		{"run ack wait past the duplicate window", []string{"run", "--nats", n.URL, "--ack-wait", "61s"}, "--ack-wait"},
		{"run short max pause", []string{"run", "--nats", n.URL, "--max-pause", "10ms"}, "--max-pause"},
		{"run events max age under the duplicate window", []string{"run", "--nats", n.URL, "--events-max-age", "1m"}, "--events-max-age: must be at least 2m0s"},
		{"run zero events max age", []string{"run", "--nats", n.URL, "--events-max-age", "0s"}, "--events-max-age"},
		{"run events max age not a duration", []string{"run", "--nats", n.URL, "--events-max-age", "a week"}, "events-max-age"},
		{"get bad id", []string{"sub", "get", "a b", "--nats", n.URL}, "ID"},
		{"listen bad status", []string{"listen", "--status", "99"}, "--status"},
		{"listen bad fail rate", []string{"listen", "--fail-rate", "2"}, "--fail-rate"},
		{"listen bad secret", []string{"listen", "--secret", "nope"}, "secret"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, _, stderr := relayCmd(t, tt.args...)
			if code != exitUsage {
				t.Fatalf("exit %d, want %d; stderr: %s", code, exitUsage, stderr)
			}
			if lines := strings.Count(strings.TrimSpace(stderr), "\n"); lines != 0 {
				t.Fatalf("stderr has %d lines, want one: %q", lines+1, stderr)
			}
			if !strings.Contains(stderr, tt.want) {
				t.Fatalf("stderr %q does not mention %q", stderr, tt.want)
			}
		})
	}
	t.Cleanup(func() {
		store, err := subscribers.Open(context.Background(), n.JS)
		if err != nil {
			t.Error(err)
			return
		}
		subs, err := store.List(context.Background())
		if err != nil || len(subs) != 0 {
			t.Errorf("invalid commands wrote subscribers: %v %v", subs, err)
		}
	})
}

func TestUnreachableNATSExits1(t *testing.T) {
	t.Parallel()
	code, _, stderr := relayCmd(t, "sub", "ls", "--nats", "nats://127.0.0.1:1")
	if code != exitFailure || !strings.Contains(stderr, "cannot connect") {
		t.Fatalf("exit %d: %s", code, stderr)
	}
}

func TestSubLsAndGetNeverPrintASecret(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	out := mustRelay(t, "sub", "ls", "--nats", n.URL, "--json")
	if strings.TrimSpace(out) != "[]" {
		t.Fatalf("empty ls --json = %q, want []", out)
	}
	mustRelay(t, "sub", "add", "demo", "--nats", n.URL, "--url", "https://example.com/", "--secret", testSecret, "--rate", "50")
	secretPart := strings.TrimPrefix(testSecret, "whsec_")
	for _, args := range [][]string{
		{"sub", "ls"}, {"sub", "ls", "--json"}, {"sub", "get", "demo"}, {"sub", "get", "demo", "--json"},
	} {
		out := mustRelay(t, append(args, "--nats", n.URL)...)
		if !strings.Contains(out, "demo") {
			t.Errorf("%v: no subscriber in %q", args, out)
		}
		if strings.Contains(out, secretPart) {
			t.Errorf("%v printed the whole secret: %q", args, out)
		}
	}
	code, _, stderr := relayCmd(t, "sub", "get", "nobody", "--nats", n.URL)
	if code != exitFailure || !strings.Contains(stderr, "nobody") {
		t.Fatalf("get of a missing subscriber: exit %d: %s", code, stderr)
	}
}

func TestSSRFGuardRefusesLoopbackByDefault(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	rcv := newReceiver(t)
	private := newReceiver(t)
	mustRelay(t, "sub", "add", "loop", "--nats", n.URL, "--url", rcv.URL, "--secret", testSecret)
	// 10.255.255.1 would never be dialled: the guard refuses it first.
	mustRelay(t, "sub", "add", "private", "--nats", n.URL, "--url", "http://10.255.255.1:9/", "--secret", testSecret)
	mustRelay(t, "sub", "add", "mapped", "--nats", n.URL, "--url", "http://[::ffff:127.0.0.1]:"+portOf(private.URL)+"/", "--secret", testSecret)
	startRelay(t, n.URL)
	publish(t, n.JS, "x", "e1", []byte(`{}`))
	var dead []deadletter.Entry
	testutil.Eventually(t, func() bool {
		dead, _ = deadletter.List(testutil.Context(t), n.JS, deadletter.Filter{Reason: deadletter.Refused}, 0)
		return len(dead) == 3
	}, "refused deliveries not dead-lettered: %+v", dead)
	for _, d := range dead {
		if d.Attempts != 1 || d.LastStatus != 0 || !strings.Contains(d.LastError, "refused") {
			t.Errorf("dead letter %+v", d)
		}
	}
	if rcv.count() != 0 || private.count() != 0 {
		t.Fatalf("a loopback receiver was hit despite the guard")
	}
}

func portOf(url string) string { return url[strings.LastIndexByte(url, ':')+1:] }

func TestListenAcceptsGoodSignaturesAndRejectsBadOnes(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(testutil.Context(t))
	stdout := &testutil.Buffer{}
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"listen", "--addr", "127.0.0.1:0", "--secret", testSecret}, stdout, io.Discard)
	}()
	var base string
	testutil.Eventually(t, func() bool {
		sc := bufio.NewScanner(strings.NewReader(stdout.String()))
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "listening on "); ok {
				base = strings.TrimSuffix(strings.Fields(rest)[0], ",")
				return true
			}
		}
		return false
	}, "relay listen did not start")

	key, _ := deliver.ParseSecret(testSecret)
	body := []byte(`{"id":"evt_01"}`)
	post := func(sig string) int {
		ts := fmt.Sprint(time.Now().Unix())
		req, _ := http.NewRequest(http.MethodPost, base, bytes.NewReader(body))
		req.Header.Set("webhook-id", "evt_01")
		req.Header.Set("webhook-timestamp", ts)
		if sig == "" {
			sig = deliver.Sign(key, "evt_01", time.Now().Unix(), body)
		}
		req.Header.Set("webhook-signature", sig)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post(""); code/100 != 2 {
		t.Fatalf("good signature answered %d", code)
	}
	if code := post("v1,AAAA"); code != http.StatusUnauthorized {
		t.Fatalf("bad signature answered %d", code)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("relay listen exited %d", code)
	}
	out := stdout.String()
	if !strings.Contains(out, "evt_01") || !strings.Contains(out, "signature: ok") || !strings.Contains(out, "signature: bad") {
		t.Fatalf("listen output:\n%s", out)
	}
}
