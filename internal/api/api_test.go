package api

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/relay-dev/relay/internal/api/apitest"
	"github.com/relay-dev/relay/internal/apikeys"
	"github.com/relay-dev/relay/internal/deadletter"
	"github.com/relay-dev/relay/internal/subscribers"
	rtest "github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

var secret = "whsec_" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0xA1}, 32))

type bundle struct {
	srv   *httptest.Server
	ops   *Ops
	store *subscribers.Store
	keys  *apikeys.Store
	reg   *prometheus.Registry
	n     *rtest.NATS
	v     *apikeys.Verifier
	spec  *apitest.Checker
}

func setup(t *testing.T, cfg Config) *bundle {
	t.Helper()
	n := rtest.StartRelayNATS(t)
	ctx := rtest.Context(t)
	store, err := subscribers.Open(ctx, n.JS)
	if err != nil {
		t.Fatal(err)
	}
	if err := streams.EnsureKeys(ctx, n.JS, 0); err != nil {
		t.Fatal(err)
	}
	keys, err := apikeys.Open(ctx, n.JS)
	if err != nil {
		t.Fatal(err)
	}
	v := apikeys.NewVerifier(keys, nil)
	runCtx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { v.Run(runCtx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	<-v.Ready()
	ops := &Ops{JS: n.JS, Store: store, SharedLanes: 16}
	reg := prometheus.NewRegistry()
	cfg.Ops, cfg.Keys, cfg.Registerer = ops, v, reg
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s)
	t.Cleanup(hs.Close)
	return &bundle{srv: hs, ops: ops, store: store, keys: keys, reg: reg, n: n, v: v, spec: apitest.New(t, OpenAPI)}
}

// key makes a key with scopes and waits until the verifier takes it.
func (b *bundle) key(t *testing.T, name string, scopes ...apikeys.Scope) string {
	t.Helper()
	k, err := b.keys.Add(rtest.Context(t), name, scopes)
	if err != nil {
		t.Fatal(err)
	}
	rtest.Eventually(t, func() bool { _, err := b.v.Verify(k); return err == nil }, "the key %s was never taken", name)
	return k
}

// call makes a request and checks both it and its answer against the
// OpenAPI document: the request must match it unless the answer is 400
// (a request the document refuses too), the answer always.
func (b *bundle) call(t *testing.T, method, path, key string, body []byte, h http.Header) (int, http.Header, []byte) {
	t.Helper()
	newReq := func() *http.Request {
		req, err := http.NewRequest(method, b.srv.URL+path, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		for k, vs := range h {
			req.Header[k] = vs
		}
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		return req
	}
	resp, err := http.DefaultClient.Do(newReq())
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	b.spec.Check(t, newReq(), resp.StatusCode, resp.Header, got)
	if resp.StatusCode >= 400 {
		checkProblem(t, resp.StatusCode, resp.Header, got)
	}
	return resp.StatusCode, resp.Header, got
}

// checkProblem checks an error answer is RFC 9457's.
func checkProblem(t *testing.T, code int, h http.Header, body []byte) {
	t.Helper()
	var p problem
	if h.Get("Content-Type") != "application/problem+json" || json.Unmarshal(body, &p) != nil || p.Status != code || p.Detail == "" {
		t.Errorf("answer %d is not a problem+json with a detail: %s %s", code, h.Get("Content-Type"), body)
	}
}

func detailOf(t *testing.T, body []byte) string {
	t.Helper()
	var p problem
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatalf("not a problem: %s", body)
	}
	return p.Detail
}

// No key, an unknown key: 401 with WWW-Authenticate: Bearer; a key
// without the scope: 403; admin grants all; the OpenAPI document needs
// none; an unknown route is a 404 problem. The access is counted by route
// and code.
func TestAuth(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	publisher := b.key(t, "publisher", apikeys.Publish)
	admin := b.key(t, "ops", apikeys.Admin)
	for _, key := range []string{"", "rk_nope", "Basic abc", publisher + "x"} {
		code, h, _ := b.call(t, "GET", "/v1/status", key, nil, nil)
		if code != http.StatusUnauthorized || !strings.HasPrefix(h.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("key %.6q: %d, WWW-Authenticate %q; want 401 Bearer", key, code, h.Get("WWW-Authenticate"))
		}
	}
	code, _, body := b.call(t, "GET", "/v1/status", publisher, nil, nil)
	if code != http.StatusForbidden || !strings.Contains(detailOf(t, body), "status:read") || strings.Contains(string(body), publisher) {
		t.Errorf("a key without the scope: %d %s, want 403 naming the scope, not the key", code, body)
	}
	if code, _, body := b.call(t, "GET", "/v1/status", admin, nil, nil); code != http.StatusOK || strings.TrimSpace(string(body)) != "[]" {
		t.Errorf("admin: %d %s, want 200 []", code, body)
	}
	if code, _, body := b.call(t, "GET", "/v1/openapi.json", "", nil, nil); code != http.StatusOK || !bytes.Equal(body, OpenAPI) {
		t.Errorf("openapi.json without a key: %d", code)
	}
	if code, _, _ := b.call(t, "GET", "/v1/nothing", admin, nil, nil); code != http.StatusNotFound {
		t.Errorf("an unknown route: %d, want 404", code)
	}
	if got := counter(t, b.reg, "GET /v1/status", "403"); got != 1 {
		t.Errorf("relay_api_requests_total{route=\"GET /v1/status\",code=\"403\"} = %v, want 1", got)
	}
}

// counter is relay_api_requests_total of route and code.
func counter(t *testing.T, reg *prometheus.Registry, route, code string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "relay_api_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["route"] == route && labels["code"] == code {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// An event is stored byte for byte under events.<type> with the headers
// that pass through; the same Idempotency-Key again is a duplicate of the
// same sequence; no key makes an id; a bad type is 400 with the line of
// relay sub test --type; a body over EVENTS' max message size is 413.
func TestPublish(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	key := b.key(t, "backend", apikeys.Publish)
	body := []byte(`{"order":1042,  "x":"\u00e9"}`)
	h := http.Header{"Idempotency-Key": {"order-1042"}, "Content-Type": {"application/json"},
		"Relay-Deadline": {"2030-01-01T00:00:00Z"}, "Traceparent": {"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}
	code, _, got := b.call(t, "POST", "/v1/events/order.paid", key, body, h)
	var p Published
	if code != http.StatusAccepted || json.Unmarshal(got, &p) != nil || p.ID != "order-1042" || p.Seq == 0 || p.Duplicate {
		t.Fatalf("publish: %d %s", code, got)
	}
	code, _, got = b.call(t, "POST", "/v1/events/order.paid", key, body, h)
	var again Published
	if code != http.StatusAccepted || json.Unmarshal(got, &again) != nil || !again.Duplicate || again.Seq != p.Seq {
		t.Fatalf("the same key again: %d %s, want 202 duplicate of seq %d", code, got, p.Seq)
	}
	events, err := b.n.JS.Stream(rtest.Context(t), "EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	m, err := events.GetMsg(rtest.Context(t), p.Seq)
	if err != nil {
		t.Fatal(err)
	}
	if m.Subject != "events.order.paid" || !bytes.Equal(m.Data, body) || m.Header.Get("Nats-Msg-Id") != "order-1042" ||
		m.Header.Get("Relay-Deadline") != "2030-01-01T00:00:00Z" || m.Header.Get("traceparent") == "" || m.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("stored %s %q %v", m.Subject, m.Data, m.Header)
	}
	code, _, got = b.call(t, "POST", "/v1/events/order.paid", key, []byte(`{}`), http.Header{"Content-Type": {"application/json"}})
	var made Published
	if code != http.StatusAccepted || json.Unmarshal(got, &made) != nil || made.ID == "" || made.Seq != p.Seq+1 {
		t.Fatalf("without a key: %d %s", code, got)
	}
	for _, bad := range []string{"order..paid", "order.*", "relay.subscriber.paused"} {
		code, _, got := b.call(t, "POST", "/v1/events/"+bad, key, []byte(`{}`), http.Header{"Content-Type": {"application/json"}})
		if code != http.StatusBadRequest || !strings.Contains(detailOf(t, got), bad) {
			t.Errorf("type %q: %d %s, want 400 naming it", bad, code, got)
		}
	}
	// A type past a NATS control line closed relay's connection, and relay
	// with it: refused by its length, and the relay still publishes after.
	long := strings.Repeat("a", 4100)
	code, _, got = b.call(t, "POST", "/v1/events/"+long, key, []byte(`{}`), http.Header{"Content-Type": {"application/json"}})
	if code != http.StatusBadRequest || !strings.Contains(detailOf(t, got), "at most 255 bytes") {
		t.Errorf("a type of 4,100 bytes: %d %s, want 400 saying how long a type may be", code, got)
	}
	// relay's own operational events are stored under ids beginning
	// relay:; a publisher's key taking one would make relay's a duplicate.
	code, _, got = b.call(t, "POST", "/v1/events/order.paid", key, []byte(`{}`),
		http.Header{"Content-Type": {"application/json"}, "Idempotency-Key": {"relay:circuit-closed:shop:1765000000000"}})
	if code != http.StatusBadRequest || !strings.Contains(detailOf(t, got), "relay's own") {
		t.Errorf("an Idempotency-Key of relay's own: %d %s, want 400", code, got)
	}
	// Headers relay would dead-letter as malformed are refused at once.
	for name, v := range map[string]string{"Relay-Deliver-At": "tomorrow", "Relay-Deadline": "2030-13-01"} {
		code, _, got := b.call(t, "POST", "/v1/events/order.paid", key, []byte(`{}`), http.Header{"Content-Type": {"application/json"}, name: {v}})
		if code != http.StatusBadRequest || !strings.Contains(detailOf(t, got), name) {
			t.Errorf("%s: %s: %d %s, want 400 naming it", name, v, code, got)
		}
	}
	limit, err := b.ops.MaxEventBody(rtest.Context(t))
	if err != nil {
		t.Fatal(err)
	}
	big := append([]byte(`"`), bytes.Repeat([]byte("a"), int(limit))...)
	big = append(big, '"')
	code, _, got = b.call(t, "POST", "/v1/events/order.paid", key, big, http.Header{"Content-Type": {"application/json"}})
	if code != http.StatusRequestEntityTooLarge {
		t.Fatalf("a body over %d bytes: %d %s, want 413", limit, code, got)
	}
}

// A subscriber is shown as relay sub get --json shows it, secrets
// masked; an unknown id is 404, a bad one 400; the list is paged by id.
func TestSubscribers(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	key := b.key(t, "reader", apikeys.SubscribersRead)
	ctx := rtest.Context(t)
	for _, id := range []string{"a", "b", "c"} {
		if err := b.store.Put(ctx, subscribers.Subscriber{ID: id, URL: "https://example.com/hook?token=t0p", Secrets: []string{secret}}); err != nil {
			t.Fatal(err)
		}
	}
	code, _, got := b.call(t, "GET", "/v1/subscribers/b", key, nil, nil)
	if code != http.StatusOK || strings.Contains(string(got), secret) || strings.Contains(string(got), "t0p") {
		t.Fatalf("get: %d %s, want 200 masked", code, got)
	}
	sub, _ := b.store.Get(ctx, "b")
	want, _ := json.Marshal(sub.Show(false))
	var gotV, wantV any
	_ = json.Unmarshal(got, &gotV)
	_ = json.Unmarshal(want, &wantV)
	if !jsonEqual(gotV, wantV) {
		t.Fatalf("get shows %s, relay sub get --json %s", got, want)
	}
	if code, _, got := b.call(t, "GET", "/v1/subscribers/zz", key, nil, nil); code != http.StatusNotFound {
		t.Fatalf("unknown: %d %s", code, got)
	}
	if code, _, got := b.call(t, "GET", "/v1/subscribers/a%20b", key, nil, nil); code != http.StatusBadRequest || !strings.Contains(detailOf(t, got), "A-Z a-z 0-9") {
		t.Fatalf("bad id: %d %s", code, got)
	}
	var ids []string
	cursor := ""
	for range 4 {
		path := "/v1/subscribers?limit=2"
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		code, h, got := b.call(t, "GET", path, key, nil, nil)
		var page []subscribers.Shown
		if code != http.StatusOK || json.Unmarshal(got, &page) != nil {
			t.Fatalf("list: %d %s", code, got)
		}
		for _, s := range page {
			ids = append(ids, s.ID)
		}
		if cursor = h.Get(NextCursorHeader); cursor == "" {
			break
		}
	}
	if strings.Join(ids, ",") != "a,b,c" {
		t.Fatalf("pages gave %v, want a,b,c", ids)
	}
	if code, _, _ := b.call(t, "GET", "/v1/subscribers?limit=5000", key, nil, nil); code != http.StatusBadRequest {
		t.Fatalf("limit 5000: %d, want 400", code)
	}
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

// The dead letters: an empty list, a bad filter 400 with the line of
// relay dlq ls naming the parameter, an unknown sequence 404; trace of an
// unknown event 404; status 200.
func TestReads(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	key := b.key(t, "reader", apikeys.DLQRead, apikeys.EventsRead, apikeys.StatusRead)
	if code, _, got := b.call(t, "GET", "/v1/dlq?subscriber=a&since=24h", key, nil, nil); code != http.StatusOK || strings.TrimSpace(string(got)) != "[]" {
		t.Fatalf("dlq: %d %s", code, got)
	}
	code, _, got := b.call(t, "GET", "/v1/dlq?reason=nope", key, nil, nil)
	if code != http.StatusBadRequest || !strings.HasPrefix(detailOf(t, got), `--reason: "nope" is not a reason`) {
		t.Fatalf("bad reason: %d %s", code, got)
	}
	if code, _, got := b.call(t, "GET", "/v1/dlq/7", key, nil, nil); code != http.StatusNotFound {
		t.Fatalf("unknown entry: %d %s", code, got)
	}
	if code, _, got := b.call(t, "GET", "/v1/events/nope/trace", key, nil, nil); code != http.StatusNotFound || !strings.Contains(detailOf(t, got), `no records of event "nope"`) {
		t.Fatalf("trace of an unknown event: %d %s", code, got)
	}
}

// A key over its rate gets 429 with Retry-After; another key is not held.
func TestRate(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{KeyRate: 0.001, KeyBurst: 3})
	slow := b.key(t, "slow", apikeys.StatusRead)
	other := b.key(t, "other", apikeys.StatusRead)
	var code int
	var h http.Header
	for range 5 {
		if code, h, _ = b.call(t, "GET", "/v1/status", slow, nil, nil); code == http.StatusTooManyRequests {
			break
		}
	}
	if code != http.StatusTooManyRequests || h.Get("Retry-After") == "" {
		t.Fatalf("over the rate: %d, Retry-After %q", code, h.Get("Retry-After"))
	}
	if code, _, _ := b.call(t, "GET", "/v1/status", other, nil, nil); code == http.StatusTooManyRequests {
		t.Fatal("another key is held by the first's rate")
	}
}

// Dead letters as relay dlq ls and show give them, paged by sequence and
// filtered by the same words; a status row a subscriber.
func TestDeadLettersAndStatus(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	key := b.key(t, "reader", apikeys.DLQRead, apikeys.StatusRead)
	ctx := rtest.Context(t)
	if err := b.store.Put(ctx, subscribers.Subscriber{ID: "shop", URL: "https://example.com/hook", Secrets: []string{secret}}); err != nil {
		t.Fatal(err)
	}
	for i, reason := range []deadletter.Reason{deadletter.Rejected, deadletter.MaxAttempts, deadletter.Rejected} {
		h := nats.Header{streams.HeaderEventID: {fmt.Sprintf("evt_%d", i)}, streams.HeaderEventType: {"order.paid"}}
		body := []byte(`{"n":1}`)
		if i == 2 {
			body = []byte{0xff, 0xfe}
		}
		d := deadletter.Death{Subscriber: "shop", Reason: reason, Attempts: 1, LastStatus: 400, LastError: "400 Bad Request",
			OriginSeq: uint64(i + 1), FirstAttemptAt: time.Now(), DeadAt: time.Now()}
		if _, err := deadletter.Publish(ctx, b.n.JS, body, h, d); err != nil {
			t.Fatal(err)
		}
	}
	code, h, got := b.call(t, "GET", "/v1/dlq?reason=rejected&limit=1", key, nil, nil)
	var page []deadletter.Entry
	if code != http.StatusOK || json.Unmarshal(got, &page) != nil || len(page) != 1 || page[0].EventID != "evt_0" || h.Get(NextCursorHeader) == "" {
		t.Fatalf("first page: %d %s %v", code, got, h)
	}
	code, h, got = b.call(t, "GET", "/v1/dlq?reason=rejected&limit=1&cursor="+h.Get(NextCursorHeader), key, nil, nil)
	if code != http.StatusOK || json.Unmarshal(got, &page) != nil || len(page) != 1 || page[0].EventID != "evt_2" || h.Get(NextCursorHeader) != "" {
		t.Fatalf("second page: %d %s %v", code, got, h)
	}
	for _, e := range []deadletter.Entry{page[0]} {
		code, _, got := b.call(t, "GET", fmt.Sprintf("/v1/dlq/%d", e.DLQSeq), key, nil, nil)
		m, err := deadletter.Get(ctx, b.n.JS, e.DLQSeq)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(m.Show())
		var gotV, wantV any
		_ = json.Unmarshal(got, &gotV)
		_ = json.Unmarshal(want, &wantV)
		if code != http.StatusOK || !jsonEqual(gotV, wantV) || !strings.Contains(string(got), "body_base64") {
			t.Fatalf("GET /v1/dlq/%d: %d %s, want relay dlq show --json's %s", e.DLQSeq, code, got, want)
		}
	}
	code, _, got = b.call(t, "GET", "/v1/status", key, nil, nil)
	var rows []map[string]any
	if code != http.StatusOK || json.Unmarshal(got, &rows) != nil || len(rows) != 1 || rows[0]["subscriber"] != "shop" {
		t.Fatalf("status: %d %s", code, got)
	}
}

// Past MaxConcurrent requests at once, a request is answered 503 with
// Retry-After, and served again once a slot is free.
func TestConcurrencyBound(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{MaxConcurrent: 1})
	key := b.key(t, "k", apikeys.Admin)
	// A publish whose body never ends holds the one slot.
	pr, pw := io.Pipe()
	req, err := http.NewRequest("POST", b.srv.URL+"/v1/events/order.paid", pr)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	var wg sync.WaitGroup
	wg.Go(func() {
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	})
	t.Cleanup(func() { _ = pw.Close(); wg.Wait() }) // a failure leaves no request open
	if _, err := pw.Write([]byte(`{"a":`)); err != nil {
		t.Fatal(err)
	}
	// The publish holds the slot, seen in the server: a request of the
	// test's own sent before it would take the slot first, and the
	// publish would be the one refused.
	srv := b.srv.Config.Handler.(*Server)
	rtest.Eventually(t, func() bool { return len(srv.slots) == 1 }, "the publish never held the slot")
	var h http.Header
	rtest.Eventually(t, func() bool {
		var code int
		code, h, _ = b.call(t, "GET", "/v1/status", key, nil, nil)
		return code == http.StatusServiceUnavailable
	}, "a second request was never refused while the slot was held")
	if h.Get("Retry-After") == "" {
		t.Error("503 without Retry-After")
	}
	_, _ = pw.Write([]byte(`1}`))
	pw.Close()
	wg.Wait()
	if code, _, got := b.call(t, "GET", "/v1/status", key, nil, nil); code != http.StatusOK {
		t.Fatalf("once the slot is free: %d %s", code, got)
	}
}
