package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

func TestSignedDeliveryOfTheExactBody(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	rcv := newReceiver(t)
	mustRelay(t, "sub", "add", "demo", "--nats", n.URL, "--url", rcv.URL+"/hook", "--secret", testSecret,
		"--events", "video.*", "--header", "Authorization: Bearer abc")
	startRelay(t, n.URL, "--allow-private-targets")

	body := []byte(`{"id":"evt_01","video_id":"vv_9f31c2"}`)
	publish(t, n.JS, "video.trending", "evt_01", body, "Content-Type", "application/vnd.demo+json")
	testutil.Eventually(t, func() bool { return rcv.count() == 1 }, "no delivery")

	d := rcv.deliveries()[0]
	if !bytes.Equal(d.body, body) {
		t.Fatalf("body = %q, want %q", d.body, body)
	}
	if got := d.header.Get("webhook-id"); got != "evt_01" {
		t.Fatalf("webhook-id = %q", got)
	}
	if got := d.header.Get("Content-Type"); got != "application/vnd.demo+json" {
		t.Fatalf("content-type = %q", got)
	}
	if got := d.header.Get("Authorization"); got != "Bearer abc" {
		t.Fatalf("subscriber header = %q", got)
	}
	if d.path != "/hook" {
		t.Fatalf("path = %q", d.path)
	}
	verify(t, d)
}

func TestRepublishedMsgIDIsDeliveredOnce(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	rcv := newReceiver(t)
	mustRelay(t, "sub", "add", "demo", "--nats", n.URL, "--url", rcv.URL, "--secret", testSecret)
	r := startRelay(t, n.URL, "--allow-private-targets")

	first := publish(t, n.JS, "video.trending", "evt_dup", []byte(`{"n":1}`))
	second := publish(t, n.JS, "video.trending", "evt_dup", []byte(`{"n":2}`))
	if first.Duplicate || !second.Duplicate {
		t.Fatalf("PubAck duplicate flags: first %v, second %v", first.Duplicate, second.Duplicate)
	}
	waitIdle(t, n.JS)
	if got := rcv.count(); got != 1 {
		t.Fatalf("deliveries = %d, want 1; relay log:\n%s", got, r.stderr.String())
	}
}

// TestEventIDIsTheHeaderElseTheSequence: the body is opaque. Two events
// that share a body "id" (an entity's: an order paid, then shipped) are two
// deliveries, and an event without Nats-Msg-Id gets EVENTS-<sequence>.
func TestEventIDIsTheHeaderElseTheSequence(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	rcv := newReceiver(t)
	mustRelay(t, "sub", "add", "demo", "--nats", n.URL, "--url", rcv.URL, "--secret", testSecret)
	startRelay(t, n.URL, "--allow-private-targets")

	paid := publish(t, n.JS, "order.paid", "", []byte(`{"id":"ord_1","status":"paid"}`))
	shipped := publish(t, n.JS, "order.shipped", "", []byte(`{"id":"ord_1","status":"shipped"}`))
	publish(t, n.JS, "order.paid", "evt_hdr", []byte(`{"id":"ord_2"}`))
	waitIdle(t, n.JS)
	ids := map[string]bool{}
	for _, d := range rcv.deliveries() {
		ids[d.header.Get("webhook-id")] = true
	}
	want := []string{fmt.Sprintf("EVENTS-%d", paid.Sequence), fmt.Sprintf("EVENTS-%d", shipped.Sequence), "evt_hdr"}
	for _, id := range want {
		if !ids[id] {
			t.Errorf("no delivery with webhook-id %s", id)
		}
	}
	if len(ids) != 3 || rcv.count() != 3 {
		t.Fatalf("webhook-ids %v (%d requests), want %v", ids, rcv.count(), want)
	}
}

func TestFiltersRouteEventsToTheirSubscribers(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	videos, orders, all := newReceiver(t), newReceiver(t), newReceiver(t)
	mustRelay(t, "sub", "add", "videos", "--nats", n.URL, "--url", videos.URL, "--secret", testSecret, "--events", "video.*")
	mustRelay(t, "sub", "add", "orders", "--nats", n.URL, "--url", orders.URL, "--secret", testSecret, "--events", "order.>,refund.issued")
	mustRelay(t, "sub", "add", "all", "--nats", n.URL, "--url", all.URL, "--secret", testSecret)
	startRelay(t, n.URL, "--allow-private-targets")

	for i, typ := range []string{"video.trending", "video.a.b", "order.shipped", "order.eu.paid", "refund.issued", "user.created"} {
		publish(t, n.JS, typ, fmt.Sprintf("e%d", i), []byte(`{}`))
	}
	waitIdle(t, n.JS)
	types := func(r *webhookSink) string {
		var out []string
		for _, d := range r.deliveries() {
			out = append(out, d.header.Get("webhook-id"))
		}
		return strings.Join(sortStrings(out), ",")
	}
	if got := types(videos); got != "e0" {
		t.Errorf("videos got %s", got)
	}
	if got := types(orders); got != "e2,e3,e4" {
		t.Errorf("orders got %s", got)
	}
	if got := types(all); got != "e0,e1,e2,e3,e4,e5" {
		t.Errorf("all got %s", got)
	}
}

func TestSubscriberAddedRemovedDisabledInARunningRelay(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	rcv := newReceiver(t)
	startRelay(t, n.URL, "--allow-private-targets")

	publish(t, n.JS, "x", "before", []byte(`{}`))
	waitIdle(t, n.JS)

	mustRelay(t, "sub", "add", "late", "--nats", n.URL, "--url", rcv.URL, "--secret", testSecret, "--lane", "dedicated")
	// The running relay sees the subscriber and starts its dedicated lane
	// without a restart.
	testutil.Eventually(t, func() bool {
		_, err := n.JS.Consumer(testutil.Context(t), streams.Deliveries, "lane_d_late")
		return err == nil
	}, "dedicated lane not started")
	probes := 0
	testutil.Eventually(t, func() bool {
		probes++
		publish(t, n.JS, "x", fmt.Sprintf("probe-%d", probes), []byte(`{}`))
		waitIdle(t, n.JS)
		return rcv.count() > 0
	}, "subscriber added to a running relay got nothing")

	mustRelay(t, "sub", "disable", "late", "--nats", n.URL)
	out := mustRelay(t, "sub", "get", "late", "--nats", n.URL)
	if !strings.Contains(out, "disabled") {
		t.Fatalf("sub get after disable:\n%s", out)
	}
	// Once the relay sees the change, new events are no longer fanned out to
	// the subscriber.
	testutil.Eventually(t, func() bool {
		before := rcv.count()
		probes++
		publish(t, n.JS, "x", fmt.Sprintf("while-disabled-%d", probes), []byte(`{}`))
		waitIdle(t, n.JS)
		return rcv.count() == before
	}, "disabled subscriber still receives")

	mustRelay(t, "sub", "enable", "late", "--nats", n.URL)
	testutil.Eventually(t, func() bool {
		before := rcv.count()
		probes++
		publish(t, n.JS, "x", fmt.Sprintf("enabled-%d", probes), []byte(`{}`))
		waitIdle(t, n.JS)
		return rcv.count() > before
	}, "enabled subscriber gets nothing")

	out = mustRelay(t, "sub", "rm", "late", "--nats", n.URL, "--yes")
	if !strings.Contains(out, "removed") {
		t.Fatalf("sub rm: %s", out)
	}
	testutil.Eventually(t, func() bool {
		_, err := n.JS.Consumer(testutil.Context(t), streams.Deliveries, "lane_d_late")
		return err != nil
	}, "dedicated lane of a removed subscriber not deleted")
	before := rcv.count()
	publish(t, n.JS, "x", "after-rm", []byte(`{}`))
	waitIdle(t, n.JS)
	if rcv.count() != before {
		t.Fatal("removed subscriber still receives")
	}
	for _, d := range rcv.deliveries() {
		if id := d.header.Get("webhook-id"); id == "before" {
			t.Fatal("a subscriber got an event published before it was added")
		}
	}
}

func TestOddPayloadsAreDeliveredByteForByte(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	rcv := newReceiver(t)
	mustRelay(t, "sub", "add", "demo", "--nats", n.URL, "--url", rcv.URL, "--secret", testSecret)
	startRelay(t, n.URL, "--allow-private-targets")

	binary := make([]byte, 256)
	for i := range binary {
		binary[i] = byte(i)
	}
	cfg, err := streams.Config(streams.Events)
	if err != nil {
		t.Fatal(err)
	}
	// The largest event EVENTS takes, less room for the publisher's headers.
	nearMax := bytes.Repeat([]byte("x"), int(cfg.MaxMsgSize)-256)
	bodies := map[string][]byte{
		"empty":    {},
		"binary":   binary,
		"text":     []byte("plain text, not JSON\n"),
		"near-max": nearMax,
	}
	for id, body := range bodies {
		publish(t, n.JS, "odd", id, body)
	}
	testutil.Eventually(t, func() bool { return rcv.count() == len(bodies) }, "not all odd payloads delivered")
	for _, d := range rcv.deliveries() {
		id := d.header.Get("webhook-id")
		if !bytes.Equal(d.body, bodies[id]) {
			t.Errorf("%s: body of %d bytes differs from the %d published", id, len(d.body), len(bodies[id]))
		}
		verify(t, d)
	}
}
