package api

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/relay-dev/relay/internal/testutil"
)

// permissionsDoc is the page whose ```conf blocks the test runs against.
var permissionsDoc = filepath.Join("..", "..", "docs", "permissions.md")

// confBlocks are the ```conf blocks of docs/permissions.md, in order.
func confBlocks(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile(permissionsDoc)
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	rest := string(raw)
	for {
		var found bool
		if _, rest, found = strings.Cut(rest, "```conf\n"); !found {
			return blocks
		}
		block, after, _ := strings.Cut(rest, "```")
		blocks = append(blocks, block)
		rest = after
	}
}

// startConfNATS starts a nats-server whose authorization is account.
func startConfNATS(t *testing.T, account string) string {
	t.Helper()
	dir := t.TempDir()
	conf := fmt.Sprintf("host: 127.0.0.1\nport: -1\njetstream { store_dir: %q }\n%s", filepath.Join(dir, "js"), account)
	path := filepath.Join(dir, "nats-server.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("nats-server rejects the account of docs/permissions.md: %v", err)
	}
	opts.NoLog, opts.NoSigs = true, true
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	return srv.ClientURL()
}

// The users of docs/permissions.md, with the HTTP API's grants put in the
// relay user's list as the page says: relay key as relay-admin, relay run
// --api as relay (answering as relay-service), and every route answered
// without a refusal.
func TestPermissionsOfTheDoc(t *testing.T) {
	t.Parallel()
	blocks := confBlocks(t)
	if len(blocks) < 2 {
		t.Fatalf("docs/permissions.md has %d ```conf blocks, want the account and the HTTP API's grants", len(blocks))
	}
	const base = `"events.relay.>"`
	if strings.Count(blocks[0], base) != 1 {
		t.Fatalf("the account grants %s %d times, want once", base, strings.Count(blocks[0], base))
	}
	url := startConfNATS(t, strings.Replace(blocks[0], base, blocks[1], 1))
	admin := []string{"--user", "relay-admin", "--password", "relay-admin-password"}
	r := startRelay(t, url, "--user", "relay", "--password", "relay-run-password",
		"--service-user", "relay-service", "--service-password", "relay-service-password")
	r.readSpec(t)

	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(ok.Close)
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusBadRequest) }))
	t.Cleanup(bad.Close)
	code, out, stderr := r.cli(t, append([]string{"key", "add", "ops", "--scopes", "admin"}, admin...)...)
	key := strings.TrimSpace(out)
	if code != 0 {
		t.Fatalf("relay key add as relay-admin: exit %d, %s", code, stderr)
	}
	if code, _, stderr := r.cli(t, append([]string{"key", "ls"}, admin...)...); code != 0 {
		t.Fatalf("relay key ls as relay-admin: exit %d, %s", code, stderr)
	}
	for id, target := range map[string]string{"good": ok.URL, "bad": bad.URL} {
		if code, _, stderr := r.cli(t, append([]string{"sub", "add", id, "--url", target, "--secret", secret, "--events", id + ".*"}, admin...)...); code != 0 {
			t.Fatalf("relay sub add as relay-admin: exit %d, %s", code, stderr)
		}
	}
	testutil.Eventually(t, func() bool {
		code, _, _ := r.do(t, "GET", "/v1/subscribers/good", key, nil, nil)
		return code == http.StatusOK
	}, "the key was never taken")
	for _, typ := range []string{"good.x", "bad.x"} {
		if code, _, got := r.do(t, "POST", "/v1/events/"+typ, key, []byte(`{}`), http.Header{"Idempotency-Key": {typ}, "Content-Type": {"application/json"}}); code != http.StatusAccepted {
			t.Fatalf("publish %s: %d %s", typ, code, got)
		}
	}
	testutil.Eventually(t, func() bool {
		code, _, got := r.do(t, "GET", "/v1/dlq?subscriber=bad", key, nil, nil)
		return code == http.StatusOK && strings.Contains(string(got), `"dlq_seq"`)
	}, "the dead letter was never listed")
	testutil.Eventually(t, func() bool {
		code, _, got := r.do(t, "GET", "/v1/events/good.x/trace", key, nil, nil)
		return code == http.StatusOK && strings.Contains(string(got), `"delivered"`)
	}, "the trace never said delivered")
	for _, path := range []string{"/v1/status", "/v1/subscribers", "/v1/dlq/1"} {
		if code, _, got := r.do(t, "GET", path, key, nil, nil); code != http.StatusOK {
			t.Errorf("GET %s: %d %s", path, code, got)
		}
	}
	// The writes: a subscriber made, changed, paused, resumed, disabled,
	// enabled, rotated and removed with a delivery waiting; a dead letter
	// replayed, the rest purged.
	jh := http.Header{"Content-Type": {"application/json"}}
	writes := []struct {
		method, path, body string
		code               int
	}{
		{"POST", "/v1/subscribers", `{"id":"api","url":"` + ok.URL + `","events":["api.*"]}`, http.StatusCreated},
		{"PATCH", "/v1/subscribers/api", `{"rate":5}`, http.StatusOK},
		{"POST", "/v1/subscribers/api/pause", `{}`, http.StatusOK},
		{"POST", "/v1/subscribers/api/resume", `{}`, http.StatusOK},
		{"POST", "/v1/subscribers/api/disable", `{}`, http.StatusOK},
		{"POST", "/v1/subscribers/api/enable", `{}`, http.StatusOK},
		{"POST", "/v1/subscribers/api/rotate-secret", `{"grace":"1h"}`, http.StatusOK},
		{"POST", "/v1/subscribers/api/pause", `{}`, http.StatusOK},
		{"POST", "/v1/events/api.x", `{}`, http.StatusAccepted},
		{"DELETE", "/v1/subscribers/api?force=true", "", http.StatusOK},
		{"POST", "/v1/dlq/replay", `{"subscriber":"bad"}`, http.StatusOK},
		{"DELETE", "/v1/dlq", "", http.StatusOK},
	}
	for _, w := range writes {
		if code, _, got := r.do(t, w.method, w.path, key, []byte(w.body), jh); code != w.code {
			t.Errorf("%s %s: %d %s", w.method, w.path, code, got)
		}
	}
	log, err := os.ReadFile(r.log)
	if err != nil {
		t.Fatal(err)
	}
	for _, refused := range []string{"ermission", "refused"} {
		if strings.Contains(string(log), refused) {
			t.Errorf("relay run logged a refusal (%q):\n%s", refused, log)
		}
	}
}
