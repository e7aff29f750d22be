package main

import (
	"testing"

	"github.com/relay-dev/relay/internal/testutil"
)

// TestWebhookIDIsSafeForAnyEventID: events published with ids the
// Standard Webhooks spec does not allow as webhook-ids (a dot, a space)
// arrive with a webhook-id made safe by one mapping, signed over it, with
// the event id as published in relay-event-id; a safe id arrives as it is.
// The same id published again after the duplicate window (here: the same
// event published again by hand on DELIVERIES' terms, a second event with
// that id) gets the same webhook-id.
func TestWebhookIDIsSafeForAnyEventID(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	rcv := newReceiver(t)
	mustRelay(t, "sub", "add", "ids", "--nats", n.URL, "--url", rcv.URL, "--secret", testSecret, "--events", "x")
	startRelay(t, n.URL, "--allow-private-targets")
	want := map[string]string{ // event id → webhook-id
		"order.42.created": "order~2E42~2Ecreated",
		"a b":              "a~20b",
		"evt_01":           "evt_01",
	}
	for id := range want {
		publish(t, n.JS, "x", id, []byte(`{}`))
	}
	testutil.Eventually(t, func() bool { return rcv.count() == len(want) }, "not delivered: %d", rcv.count())
	got := map[string]string{}
	for _, d := range rcv.deliveries() {
		verify(t, d)
		event := d.header.Get("Relay-Event-Id")
		if event == "" {
			event = d.header.Get("Webhook-Id")
		}
		got[event] = d.header.Get("Webhook-Id")
	}
	for id, wid := range want {
		if got[id] != wid {
			t.Errorf("event %q: webhook-id %q, want %q (all: %v)", id, got[id], wid, got)
		}
	}
}
