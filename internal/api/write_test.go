package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/relay-dev/relay/internal/apikeys"
	"github.com/relay-dev/relay/internal/deadletter"
	"github.com/relay-dev/relay/internal/subscribers"
	rtest "github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

// The write routes change subscribers as the sub commands do, each answer
// checked against the OpenAPI document: a secret generated is in the
// create's answer alone, one given never; 409 for an id that exists and for
// a removal with deliveries waiting unless force=true.
func TestSubscriberWrites(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	ctx := rtest.Context(t)
	w := b.key(t, "writer", apikeys.SubscribersWrite)
	r := b.key(t, "reader", apikeys.SubscribersRead)

	code, _, got := b.call(t, "POST", "/v1/subscribers", w, []byte(`{"id":"shop","url":"https://example.com/hook","rate":50,"events":["order.*"]}`), jsonHeader)
	var made Created
	if code != http.StatusCreated || json.Unmarshal(got, &made) != nil || !strings.HasPrefix(made.Secret, "whsec_") || made.Rate != 50 {
		t.Fatalf("create: %d %s", code, got)
	}
	stored, err := b.store.Get(ctx, "shop")
	if err != nil || len(stored.Secrets) != 1 || stored.Secrets[0] != made.Secret {
		t.Fatalf("the secret answered is not the one stored: %v %v", stored.Secrets, err)
	}
	_, _, got = b.call(t, "GET", "/v1/subscribers/shop", r, nil, nil)
	if strings.Contains(string(got), made.Secret) {
		t.Fatalf("GET shows the secret again: %s", got)
	}
	code, _, got = b.call(t, "POST", "/v1/subscribers", w, []byte(`{"id":"shop","url":"https://example.com/other"}`), jsonHeader)
	if code != http.StatusConflict || !strings.Contains(detailOf(t, got), "subscriber shop exists") {
		t.Fatalf("second create: %d %s", code, got)
	}
	code, _, got = b.call(t, "POST", "/v1/subscribers", w, []byte(`{"id":"given","url":"https://example.com/hook","secrets":["`+secret+`"]}`), jsonHeader)
	if code != http.StatusCreated || strings.Contains(string(got), secret) || strings.Contains(string(got), `"secret"`) {
		t.Fatalf("a secret given is echoed: %d %s", code, got)
	}
	code, _, got = b.call(t, "POST", "/v1/subscribers", r, []byte(`{"id":"x","url":"https://example.com/hook"}`), jsonHeader)
	if code != http.StatusForbidden {
		t.Fatalf("a reader created: %d %s", code, got)
	}

	code, _, got = b.call(t, "PATCH", "/v1/subscribers/shop", w, []byte(`{"rate":5}`), jsonHeader)
	var shown subscribers.Shown
	if code != http.StatusOK || unmarshalFresh(got, &shown) != nil || shown.Rate != 5 || shown.URL != "https://example.com/hook" || len(shown.Events) != 1 {
		t.Fatalf("update: %d %s", code, got)
	}
	code, _, got = b.call(t, "PATCH", "/v1/subscribers/shop", w, []byte(`{"timeout":"0s"}`), jsonHeader)
	if code != http.StatusBadRequest || detailOf(t, got) != "--timeout: must be a positive duration such as 10s, got 0s" {
		t.Fatalf("bad timeout: %d %s", code, got)
	}
	code, _, got = b.call(t, "PATCH", "/v1/subscribers/nope", w, []byte(`{"rate":5}`), jsonHeader)
	if code != http.StatusNotFound {
		t.Fatalf("update of none: %d %s", code, got)
	}

	code, _, got = b.call(t, "POST", "/v1/subscribers/shop/pause", w, []byte(`{"until":"30m"}`), jsonHeader)
	if code != http.StatusOK || unmarshalFresh(got, &shown) != nil || !shown.Paused || shown.PausedUntil.IsZero() {
		t.Fatalf("pause: %d %s", code, got)
	}
	code, _, got = b.call(t, "POST", "/v1/subscribers/shop/resume", w, nil, nil)
	if code != http.StatusOK || unmarshalFresh(got, &shown) != nil || shown.Paused {
		t.Fatalf("resume: %d %s", code, got)
	}
	code, _, got = b.call(t, "POST", "/v1/subscribers/shop/disable", w, nil, nil)
	if code != http.StatusOK || unmarshalFresh(got, &shown) != nil || !shown.Disabled || shown.DisabledReason != DisabledReason {
		t.Fatalf("disable: %d %s", code, got)
	}
	code, _, got = b.call(t, "POST", "/v1/subscribers/shop/enable", w, nil, nil)
	if code != http.StatusOK || unmarshalFresh(got, &shown) != nil || shown.Disabled {
		t.Fatalf("enable: %d %s", code, got)
	}
	code, _, got = b.call(t, "POST", "/v1/subscribers/shop/rotate-secret", w, []byte(`{"grace":"1h"}`), jsonHeader)
	var rotated Created
	if code != http.StatusOK || json.Unmarshal(got, &rotated) != nil || !strings.HasPrefix(rotated.Secret, "whsec_") || rotated.Secret == made.Secret {
		t.Fatalf("rotate: %d %s", code, got)
	}

	// A delivery waits: the removal is refused unless forced.
	if _, err := b.n.JS.Publish(ctx, strings.Replace(streams.SubscriberDeliveries("shop"), "*", streams.OverflowLane, 1), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	code, _, got = b.call(t, "DELETE", "/v1/subscribers/shop", w, nil, nil)
	if code != http.StatusConflict || !strings.Contains(detailOf(t, got), "1 deliveries waiting") {
		t.Fatalf("delete with a delivery waiting: %d %s", code, got)
	}
	code, _, got = b.call(t, "DELETE", "/v1/subscribers/shop?force=true", w, nil, nil)
	var del Deleted
	if code != http.StatusOK || json.Unmarshal(got, &del) != nil || del.Dropped.Queued != 1 {
		t.Fatalf("forced delete: %d %s", code, got)
	}
	if _, err := b.store.Get(ctx, "shop"); err == nil {
		t.Fatal("still there")
	}
}

// A replay over HTTP puts a dead letter back on its lane; a purge removes
// the rest; the NATS service does both alike.
func TestDeadLetterWrites(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	ctx := rtest.Context(t)
	key := b.key(t, "dlq", apikeys.DLQWrite)
	if err := b.store.Put(ctx, subscribers.Subscriber{ID: "shop", URL: "https://example.com/hook", Secrets: []string{secret}}); err != nil {
		t.Fatal(err)
	}
	lane := subscribers.LaneFor("shop", b.ops.SharedLanes)
	if _, err := b.n.JS.CreateOrUpdateConsumer(ctx, streams.Deliveries, jetstream.ConsumerConfig{Durable: streams.LaneConsumer(lane),
		FilterSubject: streams.LaneFilter(lane), AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		h := nats.Header{streams.HeaderEventID: {fmt.Sprintf("evt_%d", i)}, streams.HeaderEventType: {"order.paid"}}
		d := deadletter.Death{Subscriber: "shop", Reason: deadletter.Rejected, Attempts: 1, LastStatus: 400, LastError: "400 Bad Request",
			OriginSeq: uint64(i + 1), FirstAttemptAt: time.Now(), DeadAt: time.Now()}
		if _, err := deadletter.Publish(ctx, b.n.JS, []byte(`{"n":1}`), h, d); err != nil {
			t.Fatal(err)
		}
	}
	code, _, got := b.call(t, "POST", "/v1/dlq/replay", key, []byte(`{"subscriber":"shop","dry_run":true}`), jsonHeader)
	var rep Replayed
	if code != http.StatusOK || json.Unmarshal(got, &rep) != nil || !rep.DryRun || rep.Replayed != 3 {
		t.Fatalf("dry run: %d %s", code, got)
	}
	code, _, got = b.call(t, "POST", "/v1/dlq/replay", key, []byte(`{"reason":"nope"}`), jsonHeader)
	if code != http.StatusBadRequest || !strings.HasPrefix(detailOf(t, got), "--reason: ") {
		t.Fatalf("bad filter: %d %s", code, got)
	}
	code, _, got = b.call(t, "POST", "/v1/dlq/replay", key, []byte(`{"event":"evt_0"}`), jsonHeader)
	if code != http.StatusOK || json.Unmarshal(got, &rep) != nil || rep.Replayed != 1 {
		t.Fatalf("replay: %d %s", code, got)
	}
	svc, err := StartService(b.n.Conn, b.ops, "1.2.3", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = svc.Stop() }()
	nc := rtest.Connect(t, b.n.URL)
	m, err := nc.Request("relay.api.v1.dlq.purge", []byte(`{"event":"evt_1"}`), 5*time.Second)
	if err != nil || m.Header.Get(micro.ErrorCodeHeader) != "" || string(m.Data) != `{"purged":1}` {
		t.Fatalf("service purge: %v %s %v", err, m.Data, m.Header)
	}
	code, _, got = b.call(t, "DELETE", "/v1/dlq?subscriber=shop", key, nil, nil)
	if code != http.StatusOK || string(got) != "{\"purged\":1}\n" && string(got) != `{"purged":1}` {
		t.Fatalf("purge: %d %s", code, got)
	}
}

var jsonHeader = http.Header{"Content-Type": {"application/json"}}

// unmarshalFresh decodes into a zeroed v: fields left out (omitempty)
// are not kept from before.
func unmarshalFresh[T any](data []byte, v *T) error {
	var zero T
	*v = zero
	return json.Unmarshal(data, v)
}

// The service's writes answer as the HTTP API's: the secret generated in
// the create alone, 409 in Nats-Service-Error-Code for an id that exists.
func TestServiceWrites(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	svc, err := StartService(b.n.Conn, b.ops, "1.2.3", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = svc.Stop() }()
	nc := rtest.Connect(t, b.n.URL)
	ask := func(verb, data string) *nats.Msg {
		t.Helper()
		m, err := nc.Request("relay.api.v1.subscribers."+verb, []byte(data), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	m := ask("create", `{"id":"shop","url":"https://example.com/hook","owner":"cust_1"}`)
	var made Created
	if json.Unmarshal(m.Data, &made) != nil || !strings.HasPrefix(made.Secret, "whsec_") || made.Owner != "cust_1" {
		t.Fatalf("create: %s %v", m.Data, m.Header)
	}
	if m := ask("create", `{"id":"shop","url":"https://example.com/hook"}`); m.Header.Get(micro.ErrorCodeHeader) != "409" {
		t.Fatalf("a second create: %s %v", m.Data, m.Header)
	}
	if m := ask("update", `{"id":"shop","rate":3,"nope":1}`); m.Header.Get(micro.ErrorCodeHeader) != "400" || !strings.Contains(m.Header.Get(micro.ErrorHeader), `unknown field "nope"`) {
		t.Fatalf("a field misspelt: %s %v", m.Data, m.Header)
	}
	var shown subscribers.Shown
	if m := ask("update", `{"id":"shop","rate":3}`); unmarshalFresh(m.Data, &shown) != nil || shown.Rate != 3 {
		t.Fatalf("update: %s %v", m.Data, m.Header)
	}
	if m := ask("pause", `{"id":"shop"}`); unmarshalFresh(m.Data, &shown) != nil || !shown.Paused {
		t.Fatalf("pause: %s %v", m.Data, m.Header)
	}
	if m := ask("delete", `{"id":"shop"}`); m.Header.Get(micro.ErrorCodeHeader) != "" || !strings.Contains(string(m.Data), `"id":"shop"`) {
		t.Fatalf("delete: %s %v", m.Data, m.Header)
	}
	if m := ask("delete", `{"id":"shop"}`); m.Header.Get(micro.ErrorCodeHeader) != "404" {
		t.Fatalf("delete again: %s %v", m.Data, m.Header)
	}
}
