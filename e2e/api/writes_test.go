package api

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/relay-dev/relay/internal/testutil"
)

var jsonHeader = http.Header{"Content-Type": {"application/json"}}

// A subscriber made over HTTP is seen by relay sub get and gets its
// deliveries signed with the secret the POST answered, the one time it is
// shown; a second POST of the id is 409; a PATCH of the rate is seen by
// relay sub get; a dead letter replayed over HTTP is delivered again; a
// DELETE removes it for relay sub get too.
func TestSubscriberWritesOverHTTP(t *testing.T) {
	t.Parallel()
	n := testutil.StartNATS(t)
	r := startRelay(t, n.URL)
	r.readSpec(t)
	var reject atomic.Bool
	reject.Store(true)
	var mu sync.Mutex
	var got []delivery
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		mu.Lock()
		got = append(got, delivery{body: b, header: req.Header.Clone()})
		mu.Unlock()
		if reject.Load() {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	deliveries := func() []delivery {
		mu.Lock()
		defer mu.Unlock()
		return append([]delivery(nil), got...)
	}
	code, out, stderr := r.cli(t, "key", "add", "backend", "--scopes", "publish,subscribers:read,subscribers:write,dlq:read,dlq:write")
	if code != 0 {
		t.Fatalf("relay key add: exit %d, %s", code, stderr)
	}
	key := strings.TrimSpace(out)

	body, _ := json.Marshal(map[string]any{"id": "shop", "url": srv.URL, "events": []string{"order.*"}, "max_attempts": 1})
	code, _, ans := r.do(t, "POST", "/v1/subscribers", key, body, jsonHeader)
	var made struct {
		ID     string `json:"id"`
		Secret string `json:"secret"`
	}
	if code != http.StatusCreated || json.Unmarshal(ans, &made) != nil || made.ID != "shop" || !strings.HasPrefix(made.Secret, "whsec_") {
		t.Fatalf("POST /v1/subscribers: %d %s", code, ans)
	}
	code, out, stderr = r.cli(t, "sub", "get", "shop", "--json")
	var shown map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &shown) != nil || shown["url"] != srv.URL || strings.Contains(out, made.Secret) {
		t.Fatalf("relay sub get shop --json: exit %d, %s %s", code, out, stderr)
	}
	if code, _, ans := r.do(t, "GET", "/v1/subscribers/shop", key, nil, nil); code != http.StatusOK || strings.Contains(string(ans), made.Secret) {
		t.Fatalf("GET shows the secret again: %d %s", code, ans)
	}
	if code, _, ans := r.do(t, "POST", "/v1/subscribers", key, body, jsonHeader); code != http.StatusConflict || !strings.Contains(detail(t, ans), "subscriber shop exists") {
		t.Fatalf("a second POST: %d %s", code, ans)
	}

	// Rejected once: a dead letter, which a replay over HTTP delivers.
	if code, _, ans := r.do(t, "POST", "/v1/events/order.paid", key, []byte(`{"order":7}`), http.Header{"Idempotency-Key": {"order-7"}, "Content-Type": {"application/json"}}); code != http.StatusAccepted {
		t.Fatalf("publish: %d %s", code, ans)
	}
	testutil.Eventually(t, func() bool {
		code, _, ans := r.do(t, "GET", "/v1/dlq?subscriber=shop", key, nil, nil)
		var entries []map[string]any
		return code == http.StatusOK && json.Unmarshal(ans, &entries) == nil && len(entries) == 1
	}, "the rejected delivery never reached the DLQ")
	reject.Store(false)
	code, _, ans = r.do(t, "POST", "/v1/dlq/replay", key, []byte(`{"subscriber":"shop","dry_run":true}`), jsonHeader)
	if code != http.StatusOK || !strings.Contains(string(ans), `"replayed":1`) {
		t.Fatalf("dry run: %d %s", code, ans)
	}
	if len(deliveries()) != 1 {
		t.Fatal("a dry run delivered")
	}
	code, _, ans = r.do(t, "POST", "/v1/dlq/replay", key, []byte(`{"subscriber":"shop"}`), jsonHeader)
	if code != http.StatusOK || !strings.Contains(string(ans), `"replayed":1`) {
		t.Fatalf("replay: %d %s", code, ans)
	}
	testutil.Eventually(t, func() bool { return len(deliveries()) == 2 }, "the replayed dead letter was never delivered")
	wh, err := standardwebhooks.NewWebhook(made.Secret)
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range deliveries() {
		if d.header.Get("webhook-id") != "order-7" || string(d.body) != `{"order":7}` {
			t.Fatalf("delivery %d: id %q, body %s", i, d.header.Get("webhook-id"), d.body)
		}
		if err := wh.Verify(d.body, d.header); err != nil {
			t.Fatalf("delivery %d is not signed with the secret the POST answered: %v", i, err)
		}
	}

	if code, _, ans := r.do(t, "PATCH", "/v1/subscribers/shop", key, []byte(`{"rate":7}`), jsonHeader); code != http.StatusOK {
		t.Fatalf("PATCH: %d %s", code, ans)
	}
	_, out, _ = r.cli(t, "sub", "get", "shop", "--json")
	if json.Unmarshal([]byte(out), &shown) != nil || shown["rate"] != 7.0 || shown["url"] != srv.URL {
		t.Fatalf("relay sub get after PATCH rate 7: %s", out)
	}
	if code, _, ans := r.do(t, "DELETE", "/v1/subscribers/shop", key, nil, nil); code != http.StatusOK {
		t.Fatalf("DELETE: %d %s", code, ans)
	}
	if code, _, stderr := r.cli(t, "sub", "get", "shop"); code != 1 || !strings.Contains(stderr, "no such subscriber") {
		t.Fatalf("relay sub get after DELETE: exit %d, %s", code, stderr)
	}
}

// One table of bad inputs through relay sub add|update, the HTTP API's POST
// and PATCH and the NATS service's subscribers.create|update: one line from
// all three (the CLI adds where to look next to a subscriber not found).
func TestOneSetOfRulesForWrites(t *testing.T) {
	t.Parallel()
	// On its embedded server: the NATS service needs a service user.
	r := startEmbeddedRelay(t)
	r.readSpec(t)
	code, out, stderr := r.cli(t, "key", "add", "writer", "--scopes", "subscribers:write,subscribers:read")
	if code != 0 {
		t.Fatalf("relay key add: exit %d, %s", code, stderr)
	}
	key := strings.TrimSpace(out)
	if code, _, stderr := r.cli(t, "sub", "add", "shop", "--url", "https://example.com/hook", "--secret", secret, "--owner", "cust_1"); code != 0 {
		t.Fatalf("relay sub add: exit %d, %s", code, stderr)
	}
	if code, _, ans := r.do(t, "POST", "/v1/subscribers", key, []byte(`{"id":"other","url":"https://example.com/hook","owner":"cust_2"}`), jsonHeader); code != http.StatusCreated {
		t.Fatalf("POST: %d %s", code, ans)
	}
	// The owner relay sub add gave lists it, and it alone.
	code, _, ans := r.do(t, "GET", "/v1/subscribers?owner=cust_1", key, nil, nil)
	var listed []map[string]any
	if code != http.StatusOK || json.Unmarshal(ans, &listed) != nil || len(listed) != 1 || listed[0]["id"] != "shop" || listed[0]["owner"] != "cust_1" {
		t.Fatalf("GET /v1/subscribers?owner=cust_1: %d %s", code, ans)
	}
	nc := testutil.Connect(t, r.nats)
	const hook = "https://example.com/hook"
	for _, c := range []struct {
		name   string
		update bool // relay sub update shop, PATCH, subscribers.update
		id     string
		flags  []string
		fields map[string]any
		exit   int
		code   int
	}{
		{name: "bad id", id: "a b", flags: []string{"--url", hook}, fields: map[string]any{"url": hook}, exit: 2, code: 400},
		{name: "bad URL", id: "x", flags: []string{"--url", "ftp://example.com/x"}, fields: map[string]any{"url": "ftp://example.com/x"}, exit: 2, code: 400},
		{name: "bad rate", id: "x", flags: []string{"--url", hook, "--rate", "-1"}, fields: map[string]any{"url": hook, "rate": -1}, exit: 2, code: 400},
		{name: "bad filter", id: "x", flags: []string{"--url", hook, "--filter", "body.x =="}, fields: map[string]any{"url": hook, "filter": "body.x =="}, exit: 2, code: 400},
		{name: "bad timeout", id: "x", flags: []string{"--url", hook, "--timeout", "0s"}, fields: map[string]any{"url": hook, "timeout": "0s"}, exit: 2, code: 400},
		{name: "bad events", id: "x", flags: []string{"--url", hook, "--events", "events.order"}, fields: map[string]any{"url": hook, "events": []string{"events.order"}}, exit: 2, code: 400},
		{name: "bad owner", id: "x", flags: []string{"--url", hook, "--owner", " cust"}, fields: map[string]any{"url": hook, "owner": " cust"}, exit: 2, code: 400},
		{name: "update: bad rate", update: true, id: "shop", flags: []string{"--rate", "-1"}, fields: map[string]any{"rate": -1}, exit: 2, code: 400},
		{name: "update: bad lane", update: true, id: "shop", flags: []string{"--lane", "fast"}, fields: map[string]any{"lane": "fast"}, exit: 2, code: 400},
		{name: "update: not there", update: true, id: "nobody", flags: []string{"--rate", "5"}, fields: map[string]any{"rate": 5}, exit: 1, code: 404},
	} {
		t.Run(c.name, func(t *testing.T) {
			verb, method, path, subject := "add", "POST", "/v1/subscribers", "relay.api.v1.subscribers.create"
			if c.update {
				verb, method, path, subject = "update", "PATCH", "/v1/subscribers/"+url.PathEscape(c.id), "relay.api.v1.subscribers.update"
			}
			code, _, stderr := r.cli(t, append([]string{"sub", verb, c.id}, c.flags...)...)
			cli := strings.TrimSuffix(strings.TrimSpace(strings.TrimPrefix(stderr, "relay: ")), " (relay sub ls lists them)")
			if code != c.exit {
				t.Fatalf("relay sub %s %s %v: exit %d, %s", verb, c.id, c.flags, code, stderr)
			}
			fields := map[string]any{"id": c.id}
			for k, v := range c.fields {
				fields[k] = v
			}
			body, _ := json.Marshal(fields)
			if c.update {
				body, _ = json.Marshal(c.fields)
			}
			hc, _, ans := r.do(t, method, path, key, body, jsonHeader)
			if hc != c.code || detail(t, ans) != cli {
				t.Errorf("the CLI says %q, the HTTP API %d %q", cli, hc, detail(t, ans))
			}
			req, _ := json.Marshal(fields)
			m, err := nc.Request(subject, req, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if m.Header.Get("Nats-Service-Error-Code") != strconv.Itoa(c.code) || m.Header.Get("Nats-Service-Error") != cli {
				t.Errorf("the CLI says %q, the service %s %q", cli, m.Header.Get("Nats-Service-Error-Code"), m.Header.Get("Nats-Service-Error"))
			}
		})
	}
	// A bad filter of a replay and of a purge: one line from the three.
	code, out, stderr = r.cli(t, "key", "add", "dlq", "--scopes", "dlq:write")
	if code != 0 {
		t.Fatalf("relay key add: exit %d, %s", code, stderr)
	}
	dlqKey := strings.TrimSpace(out)
	for _, c := range []struct{ flag, value string }{{"reason", "nope"}, {"since", "yesterday"}, {"subscriber", "a b"}} {
		code, _, stderr := r.cli(t, "dlq", "replay", "--"+c.flag, c.value)
		cli := strings.TrimSpace(strings.TrimPrefix(stderr, "relay: "))
		if code != 2 {
			t.Fatalf("relay dlq replay --%s %q: exit %d, %s", c.flag, c.value, code, stderr)
		}
		req, _ := json.Marshal(map[string]string{c.flag: c.value})
		if hc, _, ans := r.do(t, "POST", "/v1/dlq/replay", dlqKey, req, jsonHeader); hc != http.StatusBadRequest || detail(t, ans) != cli {
			t.Errorf("replay --%s %q: the CLI says %q, the HTTP API %d %q", c.flag, c.value, cli, hc, detail(t, ans))
		}
		q := url.Values{c.flag: {c.value}}
		if hc, _, ans := r.do(t, "DELETE", "/v1/dlq?"+q.Encode(), dlqKey, nil, nil); hc != http.StatusBadRequest || detail(t, ans) != cli {
			t.Errorf("purge --%s %q: the CLI says %q, the HTTP API %d %q", c.flag, c.value, cli, hc, detail(t, ans))
		}
		for _, subject := range []string{"relay.api.v1.dlq.replay", "relay.api.v1.dlq.purge"} {
			m, err := nc.Request(subject, req, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if m.Header.Get("Nats-Service-Error-Code") != "400" || m.Header.Get("Nats-Service-Error") != cli {
				t.Errorf("%s --%s %q: the CLI says %q, the service %q", subject, c.flag, c.value, cli, m.Header.Get("Nats-Service-Error"))
			}
		}
	}
}
