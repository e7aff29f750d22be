package api

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/relay-dev/relay/internal/api/apitest"
	"github.com/relay-dev/relay/internal/testutil"
)

const relayPkg = "github.com/relay-dev/relay/cmd/relay"

var secret = "whsec_" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0x5A}, 32))

// relay is a running relay run and how to reach it.
type relay struct {
	bin, nats, api string
	log            string
	client         *http.Client
	// spec checks every request and answer against the OpenAPI document
	// the relay serves; nil until read.
	spec *apitest.Checker
}

// startRelay starts the built relay against url with the HTTP API on a
// free port (TLS with cert and key when given), and waits until it is
// ready. It is stopped when the test ends.
func startRelay(t *testing.T, url string, extra ...string) *relay {
	t.Helper()
	return runRelay(t, url, append([]string{"--nats", url}, extra...))
}

// startEmbeddedRelay is startRelay on relay run's embedded NATS server,
// which has a service user of its own.
func startEmbeddedRelay(t *testing.T, extra ...string) *relay {
	t.Helper()
	listen := testutil.FreeAddr(t)
	return runRelay(t, "nats://"+listen, append([]string{"--data", t.TempDir(), "--listen", listen}, extra...))
}

// runRelay starts relay run with extra, its NATS server at url.
func runRelay(t *testing.T, url string, extra []string) *relay {
	t.Helper()
	bin := testutil.Build(t, relayPkg)
	metrics, api := testutil.FreeAddr(t), testutil.FreeAddr(t)
	logf, err := os.CreateTemp(t.TempDir(), "relay-*.log")
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"run", "--metrics", metrics, "--api", api, "--lanes", "2", "--allow-private-targets"}, extra...)
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	p := testutil.StartProcess(t, cmd)
	t.Cleanup(func() {
		if err := p.Stop(syscall.SIGTERM, 30*time.Second); err != nil {
			t.Errorf("relay run: %v", err)
		}
		if t.Failed() {
			out, _ := os.ReadFile(logf.Name())
			t.Logf("relay run logged:\n%s", out)
		}
	})
	testutil.Eventually(t, func() bool {
		resp, err := http.Get("http://" + metrics + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, "relay run never ready")
	return &relay{bin: bin, nats: url, api: api, log: logf.Name(), client: &http.Client{Timeout: 30 * time.Second}}
}

// readSpec reads the OpenAPI document the relay serves, without a key:
// every later answer is checked against it.
func (r *relay) readSpec(t *testing.T) {
	t.Helper()
	if code, _, _ := r.do(t, "GET", "/v1/openapi.json", "", nil, nil); code != http.StatusOK || r.spec == nil {
		t.Fatalf("GET /v1/openapi.json without a key: %d", code)
	}
}

// cli runs a relay command against the relay's NATS and returns its exit
// code, stdout and stderr.
func (r *relay) cli(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(r.bin, append(args, "--nats", r.nats)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, out.String(), errOut.String()
}

// do asks the HTTP API.
func (r *relay) do(t *testing.T, method, path, key string, body []byte, h http.Header) (int, http.Header, []byte) {
	t.Helper()
	scheme := "http://"
	if r.client.Transport != nil {
		scheme = "https://"
	}
	req, err := http.NewRequest(method, scheme+r.api+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range h {
		req.Header[k] = vs
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if r.spec == nil && path == "/v1/openapi.json" && resp.StatusCode == http.StatusOK {
		r.spec = apitest.New(t, got)
	}
	if r.spec != nil {
		again := req.Clone(req.Context())
		again.Body = io.NopCloser(bytes.NewReader(body))
		r.spec.Check(t, again, resp.StatusCode, resp.Header, got)
	}
	return resp.StatusCode, resp.Header, got
}

// receiver is a webhook endpoint that keeps what it gets.
type receiver struct {
	mu   sync.Mutex
	got  []delivery
	seen chan struct{}
}

type delivery struct {
	body   []byte
	header http.Header
}

func newReceiver(t *testing.T) (*receiver, string) {
	rc := &receiver{seen: make(chan struct{}, 16)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		rc.got = append(rc.got, delivery{body: b, header: r.Header.Clone()})
		rc.mu.Unlock()
		select {
		case rc.seen <- struct{}{}:
		default:
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	return rc, srv.URL
}

func (rc *receiver) deliveries() []delivery {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]delivery(nil), rc.got...)
}

func detail(t *testing.T, body []byte) string {
	t.Helper()
	var p struct {
		Detail string `json:"detail"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatalf("not a problem+json: %s", body)
	}
	return p.Detail
}

// The whole way in for a program: a key made with relay key add and listed
// without its secret; a subscriber relay sub add made, shown over HTTP as
// relay sub get --json shows it; an event published over HTTP twice with
// one Idempotency-Key, stored once and delivered once, signed, byte for
// byte, traced over HTTP; 401, 403, 404 and 413; the access log naming the
// key, never the key; a removed key refused.
func TestHTTPAPI(t *testing.T) {
	t.Parallel()
	n := testutil.StartNATS(t)
	r := startRelay(t, n.URL)
	// A second relay: a key removed is refused by every relay.
	r2 := startRelay(t, n.URL)
	rc, url := newReceiver(t)
	r.readSpec(t)
	r2.readSpec(t)

	if code, out, stderr := r.cli(t, "key", "ls", "--json"); code != 0 || strings.TrimSpace(out) != "[]" {
		t.Fatalf("relay key ls --json before any key: exit %d, %q, %s", code, out, stderr)
	}
	code, out, stderr := r.cli(t, "key", "add", "backend", "--scopes", "publish,subscribers:read,events:read")
	key := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(key, "rk_") || strings.Count(out, "\n") != 1 {
		t.Fatalf("relay key add: exit %d, stdout %q, stderr %s", code, out, stderr)
	}
	if code, _, stderr := r.cli(t, "key", "add", "backend", "--scopes", "admin"); code != 2 || !strings.Contains(stderr, "backend") {
		t.Fatalf("a second key add of one name: exit %d, %s; want 2 naming it", code, stderr)
	}
	if code, _, stderr := r.cli(t, "key", "add", "x", "--scopes", "publish,everything"); code != 2 || !strings.Contains(stderr, `"everything" is not a scope`) {
		t.Fatalf("an unknown scope: exit %d, %s; want 2 naming it", code, stderr)
	}
	code, out, _ = r.cli(t, "key", "ls", "--json")
	var keys []map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &keys) != nil || len(keys) != 1 || keys[0]["name"] != "backend" ||
		strings.Contains(out, key[3:]) || strings.Contains(out, "hash") {
		t.Fatalf("relay key ls --json: exit %d, %s", code, out)
	}
	if code, _, stderr := r.cli(t, "sub", "add", "shop", "--url", url, "--secret", secret, "--events", "order.*"); code != 0 {
		t.Fatalf("relay sub add: exit %d, %s", code, stderr)
	}

	// Seen over HTTP as the CLI shows it.
	_, cliOut, _ := r.cli(t, "sub", "get", "shop", "--json")
	code, _, got := r.do(t, "GET", "/v1/subscribers/shop", key, nil, nil)
	var fromCLI, fromAPI any
	_ = json.Unmarshal([]byte(cliOut), &fromCLI)
	_ = json.Unmarshal(got, &fromAPI)
	a, _ := json.Marshal(fromCLI)
	b, _ := json.Marshal(fromAPI)
	if code != http.StatusOK || !bytes.Equal(a, b) || strings.Contains(string(got), secret) {
		t.Fatalf("GET /v1/subscribers/shop: %d %s\nrelay sub get --json: %s", code, got, cliOut)
	}

	// Published twice, stored once, delivered once.
	body := []byte("{\"order\": 1042, \"note\": \"caf\u00e9\"}\n")
	h := http.Header{"Idempotency-Key": {"order-1042"}, "Content-Type": {"application/json"}}
	var first, second struct {
		ID        string `json:"id"`
		Seq       uint64 `json:"seq"`
		Duplicate bool   `json:"duplicate"`
	}
	code, _, got = r.do(t, "POST", "/v1/events/order.paid", key, body, h)
	if code != http.StatusAccepted || json.Unmarshal(got, &first) != nil || first.ID != "order-1042" || first.Duplicate {
		t.Fatalf("publish: %d %s", code, got)
	}
	code, _, got = r.do(t, "POST", "/v1/events/order.paid", key, body, h)
	if code != http.StatusAccepted || json.Unmarshal(got, &second) != nil || !second.Duplicate || second.Seq != first.Seq {
		t.Fatalf("publish again: %d %s", code, got)
	}
	var trace struct {
		Deliveries []struct {
			Subscriber string `json:"subscriber"`
			State      string `json:"state"`
		} `json:"deliveries"`
	}
	testutil.Eventually(t, func() bool {
		code, _, got := r.do(t, "GET", "/v1/events/order-1042/trace", key, nil, nil)
		return code == http.StatusOK && json.Unmarshal(got, &trace) == nil && len(trace.Deliveries) == 1 && trace.Deliveries[0].State == "delivered"
	}, "the trace over HTTP never said delivered")
	// A later event on the same lane arrives after the first: had the
	// duplicate been copied, it would have been delivered by then.
	if code, _, got := r.do(t, "POST", "/v1/events/order.shipped", key, []byte(`{}`), http.Header{"Content-Type": {"application/json"}}); code != http.StatusAccepted {
		t.Fatalf("publish: %d %s", code, got)
	}
	testutil.Eventually(t, func() bool { return len(rc.deliveries()) >= 2 }, "the second event never arrived")
	ds := rc.deliveries()
	if len(ds) != 2 || !bytes.Equal(ds[0].body, body) || ds[0].header.Get("webhook-id") != "order-1042" {
		t.Fatalf("got %d deliveries; the first %q, id %q", len(ds), ds[0].body, ds[0].header.Get("webhook-id"))
	}
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	if err := wh.Verify(ds[0].body, ds[0].header); err != nil {
		t.Fatalf("the delivery's signature: %v", err)
	}

	// The errors.
	if code, h, _ := r.do(t, "GET", "/v1/subscribers/shop", "", nil, nil); code != http.StatusUnauthorized || !strings.HasPrefix(h.Get("WWW-Authenticate"), "Bearer") {
		t.Errorf("no key: %d %q", code, h.Get("WWW-Authenticate"))
	}
	if code, h, got := r.do(t, "GET", "/v1/status", key, nil, nil); code != http.StatusForbidden || h.Get("Content-Type") != "application/problem+json" {
		t.Errorf("a missing scope: %d %s", code, got)
	}
	if code, _, got := r.do(t, "GET", "/v1/subscribers/nobody", key, nil, nil); code != http.StatusNotFound || !strings.Contains(detail(t, got), "nobody") {
		t.Errorf("an unknown subscriber: %d %s", code, got)
	}
	if code, _, got := r.do(t, "POST", "/v1/events/order.paid", key, bytes.Repeat([]byte("a"), 2<<20), nil); code != http.StatusRequestEntityTooLarge {
		t.Errorf("2 MiB: %d %s", code, got)
	}
	if code, _, got := r.do(t, "POST", "/v1/events/order..paid", key, []byte(`{}`), nil); code != http.StatusBadRequest || !strings.Contains(detail(t, got), "is not an event type") {
		t.Errorf("a bad type: %d %s", code, got)
	}

	// Removed: refused, by the relay that took it and by the other.
	testutil.Eventually(t, func() bool {
		code, _, _ := r2.do(t, "GET", "/v1/subscribers/shop", key, nil, nil)
		return code == http.StatusOK
	}, "the second relay never took the key")
	if code, _, stderr := r.cli(t, "key", "rm", "backend"); code != 0 {
		t.Fatalf("relay key rm: exit %d, %s", code, stderr)
	}
	removed := time.Now()
	for i, relay := range []*relay{r, r2} {
		testutil.Eventually(t, func() bool {
			code, _, _ := relay.do(t, "GET", "/v1/subscribers/shop", key, nil, nil)
			return code == http.StatusUnauthorized
		}, "a removed key still works on relay %d", i+1)
	}
	took := time.Since(removed)
	t.Logf("a removed key was refused by both relays %s after relay key rm returned", took)
	if took > time.Second {
		t.Errorf("a removed key was refused only %s after relay key rm, not within a second", took)
	}

	log, err := os.ReadFile(r.log)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), "key=backend") || strings.Contains(string(log), key[3:]) {
		t.Errorf("the access log does not name the key, or holds the key")
	}
}

// The API over TLS with --api-tls-cert and --api-tls-key.
func TestHTTPAPIOverTLS(t *testing.T) {
	t.Parallel()
	n := testutil.StartNATS(t)
	ca := testutil.NewCA(t, "relay test CA")
	cert := ca.Server(t, "127.0.0.1", "localhost")
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "api.pem"), filepath.Join(dir, "api.key")
	if err := os.WriteFile(certFile, []byte(cert.CertPEM), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, []byte(cert.KeyPEM), 0o600); err != nil {
		t.Fatal(err)
	}
	r := startRelay(t, n.URL, "--api-tls-cert", certFile, "--api-tls-key", keyFile)
	r.client.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}
	if code, _, got := r.do(t, "GET", "/v1/openapi.json", "", nil, nil); code != http.StatusOK || !strings.Contains(string(got), `"openapi": "3.1.0"`) {
		t.Fatalf("openapi.json over TLS: %d", code)
	}
}

// The NATS service, registered by a relay on its embedded server (which
// has a service user): found by $SRV.PING.relay and nats micro ls, asked
// with nats req; an unknown id answers 404 in Nats-Service-Error-Code.
func TestNATSService(t *testing.T) {
	t.Parallel()
	natsCLI := natsCLI(t)
	r := startEmbeddedRelay(t)
	if code, _, stderr := r.cli(t, "sub", "add", "shop", "--url", "https://example.com/hook", "--secret", secret); code != 0 {
		t.Fatalf("relay sub add: exit %d, %s", code, stderr)
	}
	nats := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, natsCLI, append([]string{"--server", r.nats}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("nats %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	if out := nats("micro", "ls"); !strings.Contains(out, "relay") {
		t.Errorf("nats micro ls does not list relay:\n%s", out)
	}
	if out := nats("req", "$SRV.PING.relay", ""); !strings.Contains(out, `"name":"relay"`) {
		t.Errorf("$SRV.PING.relay:\n%s", out)
	}
	out := nats("req", "--raw", "relay.api.v1.subscribers.list", "{}")
	var subs []map[string]any
	if err := json.Unmarshal([]byte(out), &subs); err != nil || len(subs) != 1 || subs[0]["id"] != "shop" || strings.Contains(out, secret) {
		t.Errorf("relay.api.v1.subscribers.list:\n%s", out)
	}
	nc := testutil.Connect(t, r.nats)
	m, err := nc.Request("relay.api.v1.subscribers.get", []byte(`{"id":"nobody"}`), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if m.Header.Get("Nats-Service-Error-Code") != "404" {
		t.Errorf("an unknown id: %v %s", m.Header, m.Data)
	}
}

// Without a service user relay does not register the NATS service: micro
// answers $SRV.PING on any reply subject, unchecked, from relay's own
// connection, which could then overwrite a subscriber in its bucket. relay
// warns instead, and relay sub test keeps working.
func TestNATSServiceNeedsAServiceUser(t *testing.T) {
	t.Parallel()
	n := testutil.StartNATS(t)
	r := startRelay(t, n.URL)
	if code, _, stderr := r.cli(t, "sub", "add", "shop", "--url", "https://example.com/hook", "--secret", secret); code != 0 {
		t.Fatalf("relay sub add: exit %d, %s", code, stderr)
	}
	nc := testutil.Connect(t, n.URL)
	for _, subject := range []string{"$SRV.PING.relay", "$SRV.INFO.relay", "relay.api.v1.status"} {
		if m, err := nc.Request(subject, nil, 10*time.Second); !errors.Is(err, natsgo.ErrNoResponders) {
			t.Errorf("%s answered without a service user: %v %v", subject, m, err)
		}
	}
	logged, err := os.ReadFile(r.log)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(string(logged), "the NATS service relay is not registered"); got != 1 || !strings.Contains(string(logged), "--service-user or --service-creds") {
		t.Errorf("warned %d times, want once, naming the flags:\n%s", got, logged)
	}
	// relay sub test, the legacy path, still answers from relay's own
	// connection (on an inbox).
	if m, err := nc.Request("relay.api.sub.test", []byte(`{}`), 10*time.Second); err != nil {
		t.Errorf("relay.api.sub.test: %v", err)
	} else if len(m.Data) == 0 {
		t.Errorf("relay.api.sub.test: an empty answer")
	}
}

// natsCLI is the nats CLI's path, or skips the test saying how to get it.
func natsCLI(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("nats"); err == nil {
		return p
	}
	out, err := exec.Command("go", "env", "GOPATH").Output()
	if err == nil {
		p := filepath.Join(strings.TrimSpace(string(out)), "bin", "nats")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Skip("the nats CLI is not installed: go install github.com/nats-io/natscli/nats@v0.5.0")
	return ""
}

// The TLS flags go together and with --api: exit 2 at once otherwise.
func TestAPIFlagsExit2(t *testing.T) {
	t.Parallel()
	bin := testutil.Build(t, relayPkg)
	for _, args := range [][]string{{"--api", "127.0.0.1:0", "--api-tls-cert", "c.pem"}, {"--api-tls-cert", "c.pem", "--api-tls-key", "k.pem"}} {
		cmd := exec.Command(bin, append([]string{"run", "--nats", "nats://127.0.0.1:1"}, args...)...)
		out, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "--api") {
			t.Errorf("relay run %v: %v, %s; want exit 2 naming the flags", args, err, out)
		}
	}
}

// One set of rules: a table of bad filters through relay dlq ls, GET
// /v1/dlq and relay.api.v1.dlq.list gets one line from all three.
func TestOneSetOfRules(t *testing.T) {
	t.Parallel()
	// On its embedded server: the NATS service needs a service user.
	r := startEmbeddedRelay(t)
	r.readSpec(t)
	code, out, stderr := r.cli(t, "key", "add", "reader", "--scopes", "dlq:read,subscribers:read")
	if code != 0 {
		t.Fatalf("relay key add: exit %d, %s", code, stderr)
	}
	key := strings.TrimSpace(out)
	nc := testutil.Connect(t, r.nats)
	for _, c := range []struct {
		flag, value string
	}{
		{"reason", "nope"}, {"subscriber", "a b"}, {"type", "a,b"}, {"type", "video..x"}, {"since", "yesterday"}, {"until", "tomorrow"},
	} {
		code, _, stderr := r.cli(t, "dlq", "ls", "--"+c.flag, c.value)
		cli := strings.TrimSpace(strings.TrimPrefix(stderr, "relay: "))
		if code != 2 {
			t.Fatalf("relay dlq ls --%s %q: exit %d, %s", c.flag, c.value, code, stderr)
		}
		q := url.Values{c.flag: {c.value}}
		hc, _, got := r.do(t, "GET", "/v1/dlq?"+q.Encode(), key, nil, nil)
		if hc != http.StatusBadRequest || detail(t, got) != cli {
			t.Errorf("--%s %q: the CLI says %q, the HTTP API %d %q", c.flag, c.value, cli, hc, detail(t, got))
		}
		req, _ := json.Marshal(map[string]string{c.flag: c.value})
		m, err := nc.Request("relay.api.v1.dlq.list", req, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if m.Header.Get("Nats-Service-Error-Code") != "400" || m.Header.Get("Nats-Service-Error") != cli {
			t.Errorf("--%s %q: the CLI says %q, the service %s %q", c.flag, c.value, cli, m.Header.Get("Nats-Service-Error-Code"), m.Header.Get("Nats-Service-Error"))
		}
	}
	// A subscriber id that cannot be one (400, exit 2), and one that is
	// not there (404, exit 1).
	for _, c := range []struct {
		id       string
		exit     int
		httpCode int
	}{{"a b", 2, http.StatusBadRequest}, {"nobody", 1, http.StatusNotFound}} {
		code, _, stderr := r.cli(t, "sub", "get", c.id)
		// The CLI adds where to look next, which only a terminal's user
		// can follow: the message before it is the one all three give.
		cli := strings.TrimSuffix(strings.TrimSpace(strings.TrimPrefix(stderr, "relay: ")), " (relay sub ls lists them)")
		if code != c.exit {
			t.Fatalf("relay sub get %q: exit %d, %s", c.id, code, stderr)
		}
		hc, _, got := r.do(t, "GET", "/v1/subscribers/"+url.PathEscape(c.id), key, nil, nil)
		if hc != c.httpCode || detail(t, got) != cli {
			t.Errorf("sub get %q: the CLI says %q, the HTTP API %d %q", c.id, cli, hc, detail(t, got))
		}
		req, _ := json.Marshal(map[string]string{"id": c.id})
		m, err := nc.Request("relay.api.v1.subscribers.get", req, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if m.Header.Get("Nats-Service-Error-Code") != strconv.Itoa(c.httpCode) || m.Header.Get("Nats-Service-Error") != cli {
			t.Errorf("sub get %q: the CLI says %q, the service %s %q", c.id, cli, m.Header.Get("Nats-Service-Error-Code"), m.Header.Get("Nats-Service-Error"))
		}
	}
}
