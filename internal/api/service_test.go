package api

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/relay-dev/relay/internal/subscribers"
	rtest "github.com/relay-dev/relay/internal/testutil"
)

// The service answers on relay.api.v1.<group>.<verb> what the HTTP API
// answers, errors in Nats-Service-Error-Code, finds itself on
// $SRV.PING.relay, and answers nothing on a reply subject of relay's own.
func TestService(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	ctx := rtest.Context(t)
	if err := b.store.Put(ctx, subscribers.Subscriber{ID: "a", URL: "https://example.com/hook", Secrets: []string{secret}}); err != nil {
		t.Fatal(err)
	}
	svc, err := StartService(b.n.Conn, b.ops, "1.2.3", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = svc.Stop() }()
	nc := rtest.Connect(t, b.n.URL)

	ping, err := nc.Request("$SRV.PING.relay", nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var id micro.Ping
	if err := json.Unmarshal(ping.Data, &id); err != nil || id.Name != ServiceName || id.Version != "1.2.3" {
		t.Fatalf("ping: %s", ping.Data)
	}

	m, err := nc.Request("relay.api.v1.subscribers.list", []byte(`{"limit":10}`), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var subs []subscribers.Shown
	if err := json.Unmarshal(m.Data, &subs); err != nil || len(subs) != 1 || subs[0].ID != "a" || strings.Contains(string(m.Data), secret) {
		t.Fatalf("subscribers.list: %s", m.Data)
	}
	for _, c := range []struct {
		subject, data, code string
	}{
		{"relay.api.v1.subscribers.get", `{"id":"zz"}`, "404"},
		{"relay.api.v1.subscribers.get", `{"id":"a b"}`, "400"},
		{"relay.api.v1.subscribers.get", `not json`, "400"},
		{"relay.api.v1.dlq.list", `{"reason":"nope"}`, "400"},
		{"relay.api.v1.dlq.get", `{"seq":9}`, "404"},
		{"relay.api.v1.events.trace", `{"id":"nope"}`, "404"},
	} {
		m, err := nc.Request(c.subject, []byte(c.data), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if got := m.Header.Get(micro.ErrorCodeHeader); got != c.code || m.Header.Get(micro.ErrorHeader) == "" {
			t.Errorf("%s %s: code %q (%s), want %s", c.subject, c.data, got, m.Header.Get(micro.ErrorHeader), c.code)
		}
	}
	// The same line as the HTTP API's detail.
	m, _ = nc.Request("relay.api.v1.dlq.list", []byte(`{"reason":"nope"}`), 5*time.Second)
	_, _, body := b.call(t, "GET", "/v1/dlq?reason=nope", b.key(t, "r", "dlq:read"), nil, nil)
	if got, want := m.Header.Get(micro.ErrorHeader), detailOf(t, body); got != want {
		t.Errorf("the service says %q, the HTTP API %q", got, want)
	}
	if code, _, _ := b.call(t, "GET", "/v1/dlq?reason=nope", "", nil, nil); code != http.StatusUnauthorized {
		t.Fatal("unauthenticated")
	}

	// A request whose reply is one of relay's own subjects is not answered.
	watch, err := nc.SubscribeSync("retries.wait.victim.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.PublishMsg(&nats.Msg{Subject: "relay.api.v1.status", Reply: "retries.wait.victim.x"}); err != nil {
		t.Fatal(err)
	}
	// A request answered after it says the first was handled first: the
	// service's subscription serves them in order.
	if _, err := nc.Request("relay.api.v1.status", nil, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if m, err := watch.NextMsg(100 * time.Millisecond); err == nil {
		t.Fatalf("answered on retries.wait.victim.x: %s", m.Data)
	}
}

// micro takes semantic versions alone: relay's own, or one made of it.
func TestServiceVersion(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"v1.4.0": "1.4.0", "1.4.0-rc.1": "1.4.0-rc.1", "dev": "0.0.0-dev", "": "0.0.0-unknown", "abc 1.2/x": "0.0.0-abc-1-2-x"} {
		if got := ServiceVersion(in); got != want || !semVer.MatchString(got) {
			t.Errorf("ServiceVersion(%q) = %q, want %q", in, got, want)
		}
	}
}
