package cli

import (
	"net/http"
	"net/http/httptest"
	"os/exec"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/relay-dev/relay/internal/testutil"
)

// maxWidth is the width every line relay prints fits, --wide and --json
// aside.
const maxWidth = 100

// checkWidth fails the test for each line of r's output wider than
// maxWidth, but an error's: it is one line, "relay: …", for a script to
// read whole.
func checkWidth(t *testing.T, r result) {
	t.Helper()
	for _, out := range []string{r.stdout, r.stderr} {
		for line := range strings.Lines(out) {
			line = strings.TrimRight(line, "\n")
			if out == r.stderr && strings.HasPrefix(line, "relay: ") {
				continue
			}
			if n := utf8.RuneCountInString(line); n > maxWidth {
				t.Errorf("relay %s: a line of %d columns:\n%s", strings.Join(r.args, " "), n, line)
			}
		}
	}
}

// TestEveryCommandFitsAHundredColumns runs every command with typical
// data (subscribers delivered to, retrying, paused by Retry-After and by an
// operator, dead-lettered by a dial error, signing with ed25519, with a
// content filter; events whose ids are escaped in their webhook-id) and
// every command's --help, and fails on a line wider than 100 columns.
func TestEveryCommandFitsAHundredColumns(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ok := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(ok.Close)
	var failed atomic.Int64
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		failed.Add(1)
		w.WriteHeader(http.StatusInternalServerError)
	}))
	t.Cleanup(failing.Close)
	throttled := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", "600")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	t.Cleanup(throttled.Close)

	e.must("sub", "add", "billing-eu", "--url", ok.URL+"/webhooks/relay?token=abc", "--secret", testSecret,
		"--events", "order.*,invoice.*", "--rate", "50", "--filter", `body.total > 100 && body.currency == "EUR"`)
	e.must("sub", "add", "crm-sync", "--url", failing.URL+"/hooks", "--secret", testSecret, "--events", "order.*",
		"--retry-base", "1s", "--retry-max", "1s")
	e.must("sub", "add", "partner-acme", "--url", throttled.URL+"/in", "--secret", testSecret, "--events", "order.*")
	e.must("sub", "add", "warehouse", "--url", "http://127.0.0.1:1/hooks", "--secret", testSecret, "--events", "order.*",
		"--max-attempts", "1")
	e.must("sub", "add", "analytics", "--url", ok.URL+"/a", "--signing", "ed25519", "--events", "order.*,video.*")
	e.must("sub", "add", "audit-log", "--url", ok.URL+"/audit", "--secret", testSecret, "--events", ">")
	e.must("sub", "pause", "audit-log", "--until", "2h")
	for _, id := range []string{"order.42.created", "order.43.created", "evt_01J9ZQ3K7M8N"} {
		e.publish("order.created", id, `{"order":42,"total":180,"currency":"EUR","lines":[{"sku":"A-1","qty":2}]}`)
	}
	testutil.Eventually(t, func() bool {
		return strings.Contains(e.run("dlq", "ls").stdout, "order.43.created") && failed.Load() >= 2 &&
			strings.Contains(e.run("status").stdout, "Retry-After")
	}, "the dead letters, the retries and the Retry-After pause")

	runs := [][]string{
		{"status"}, {"status", "--streams"}, {"status", "--limit", "2"},
		{"dlq", "ls"}, {"dlq", "ls", "--event", "order~2E42~2Ecreated"}, {"dlq", "show", "1"},
		{"dlq", "replay", "--dry-run"}, {"dlq", "purge"},
		{"sub", "ls"}, {"sub", "test", "billing-eu"},
		{"trace", "order.42.created"}, {"trace", "order~2E43~2Ecreated"}, {"trace", "evt_01J9ZQ3K7M8N", "--filtered"},
		{"trace", "nope"}, {"sub", "get", "nope"}, {"version"},
	}
	for _, id := range []string{"billing-eu", "crm-sync", "partner-acme", "warehouse", "analytics", "audit-log"} {
		runs = append(runs, []string{"status", "--subscriber", id}, []string{"sub", "get", id})
	}
	for _, args := range runs {
		r := e.run(args...)
		if r.stdout == "" && r.stderr == "" {
			t.Errorf("relay %s printed nothing", strings.Join(args, " "))
		}
		checkWidth(t, r)
	}
	// What the narrow tables must still say: sub ls the signing scheme and
	// the filter, dlq ls the end of a dial error, status a pause's end once.
	ls := e.must("sub", "ls").stdout
	for _, want := range []string{"SIGNING", "ed25519", "hmac", `filter: body.total > 100 && body.currency == "EUR"`} {
		if !strings.Contains(ls, want) {
			t.Errorf("relay sub ls lacks %q:\n%s", want, ls)
		}
	}
	if dlq := e.must("dlq", "ls").stdout; !regexp.MustCompile(`(?m)^\d+\s+warehouse\s.*connect: connection refused$`).MatchString(dlq) {
		t.Errorf("relay dlq ls does not end warehouse's error with why:\n%s", dlq)
	}
	for line := range strings.Lines(e.must("status").stdout) {
		if strings.HasPrefix(line, "partner-acme ") && (!strings.Contains(line, "paused by Retry-After, ") || !strings.Contains(line, " left")) {
			t.Errorf("relay status: partner-acme's pause: %q", line)
		}
	}
	for line := range strings.Lines(e.must("status", "--wide").stdout) {
		if strings.HasPrefix(line, "partner-acme ") && len(regexp.MustCompile(`\d{4}-\d\d-\d\dT`).FindAllString(line, -1)) != 1 {
			t.Errorf("relay status --wide does not show partner-acme's pause end once: %q", line)
		}
	}
	for _, args := range [][]string{{"status", "--wide"}, {"dlq", "ls", "--wide"}, {"trace", "order.42.created", "--wide"}, {"sub", "ls", "--wide"}} {
		if r := e.must(args...); !strings.Contains(r.stdout, "\n") {
			t.Errorf("relay %s printed %q", strings.Join(args, " "), r.stdout)
		}
	}

	// Commands that change a subscriber, and what they leave to show: a
	// resume that ends two things (an operator's pause, a Retry-After's),
	// a disabled subscriber, a rate its burst follows.
	for _, args := range [][]string{
		{"sub", "pause", "partner-acme"}, {"sub", "resume", "partner-acme"},
		{"sub", "disable", "crm-sync"}, {"sub", "get", "crm-sync"}, {"sub", "enable", "crm-sync"},
		{"sub", "update", "billing-eu", "--rate", "5"},
		{"sub", "add", "generated", "--url", ok.URL + "/g"}, {"sub", "add", "generated-key", "--url", ok.URL + "/k", "--signing", "ed25519"},
		{"sub", "update", "generated", "--signing", "both"},
	} {
		checkWidth(t, e.must(args...))
	}
	// relay listen's lines, for a delivery whose webhook-id escapes its id.
	addr := testutil.FreeAddr(t)
	out := &testutil.Buffer{}
	listen := exec.Command(e.bin, "listen", "--addr", addr, "--secret", testSecret)
	listen.Stdout, listen.Stderr = out, out
	p := testutil.StartProcess(t, listen)
	t.Cleanup(func() { _ = p.Stop(syscall.SIGTERM, 10*time.Second) })
	e.must("sub", "add", "local", "--url", "http://"+addr+"/webhooks/relay", "--secret", testSecret, "--events", "invoice.*")
	e.publish("invoice.paid", "invoice.2026.000421.paid", `{"invoice":"2026-000421","customer":{"id":"cus_9f31c2","name":"Acme Corporation"},"amount":{"value":18000,"currency":"EUR"},"lines":[{"sku":"A-1","qty":2}]}`)
	testutil.Eventually(t, func() bool { return strings.Contains(out.String(), "signature: ok") }, "relay listen printed no delivery: %s", out)
	checkWidth(t, result{args: []string{"listen"}, stdout: out.String()})

	// Every command's --help.
	for _, path := range commandPaths(t, e) {
		checkWidth(t, runBin(t, e.bin, nil, append(path, "--help")...))
	}
}

// commandLine is a command's line in "Available Commands:".
var commandLine = regexp.MustCompile(`^  ([a-z][a-z0-9-]*)\s`)

// commandPaths lists every command of relay's, found from the root's help
// down, each as its path of words.
func commandPaths(t *testing.T, e *env) [][]string {
	t.Helper()
	var paths [][]string
	var walk func(path []string)
	walk = func(path []string) {
		paths = append(paths, path)
		help := runBin(t, e.bin, nil, append(path, "--help")...).stdout
		_, list, ok := strings.Cut(help, "Available Commands:\n")
		if !ok {
			return
		}
		list, _, _ = strings.Cut(list, "\n\n")
		for line := range strings.Lines(list) {
			if m := commandLine.FindStringSubmatch(line); m != nil && m[1] != "help" {
				walk(append(append([]string{}, path...), m[1]))
			}
		}
	}
	walk([]string{})
	if len(paths) < 20 {
		t.Fatalf("found %d commands: %v", len(paths), paths)
	}
	return paths
}
