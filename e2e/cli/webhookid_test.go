package cli

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/internal/testutil"
)

// publish publishes an event of type typ with id on the env's NATS, as
// `nats pub -J events.<type> -H Nats-Msg-Id:<id>` does.
func (e *env) publish(typ, id, body string) {
	e.t.Helper()
	nc := testutil.Connect(e.t, e.nats)
	js, err := jetstream.New(nc)
	if err != nil {
		e.t.Fatal(err)
	}
	m := nats.NewMsg("events." + typ)
	m.Data = []byte(body)
	m.Header.Set("Nats-Msg-Id", id)
	if _, err := js.PublishMsg(testutil.Context(e.t), m); err != nil {
		e.t.Fatalf("publishing %s: %v", id, err)
	}
}

// TestTraceAndDLQFindAnEventByItsWebhookID: the webhook-id a receiver
// logged (order~2E42~2Ecreated) finds the event order.42.created in relay
// trace as its id does, and relay dlq ls --event lists that event's dead
// letters alone, by either id.
func TestTraceAndDLQFindAnEventByItsWebhookID(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	seen := make(chan string, 10)
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Get("Webhook-Id")
	}))
	t.Cleanup(rcv.Close)
	e.must("sub", "add", "shop", "--url", rcv.URL+"/", "--secret", testSecret, "--events", "order.*")
	e.must("sub", "add", "down", "--url", "http://127.0.0.1:1/", "--secret", testSecret, "--events", "order.*", "--max-attempts", "1")
	e.publish("order.created", "order.42.created", `{"order":42}`)
	e.publish("order.created", "order.43.created", `{"order":43}`)
	webhookID := <-seen
	if webhookID != "order~2E42~2Ecreated" && webhookID != "order~2E43~2Ecreated" {
		t.Fatalf("the receiver saw webhook-id %q", webhookID)
	}
	webhookID = "order~2E42~2Ecreated"
	testutil.Eventually(t, func() bool {
		return strings.Contains(e.run("dlq", "ls", "--limit", "0").stdout, "order.43.created")
	}, "the dead letters of down")

	byID := e.must("trace", "order.42.created", "--json")
	byWebhookID := e.must("trace", webhookID, "--json")
	if byID.stdout != byWebhookID.stdout {
		t.Errorf("relay trace %s printed\n%s\nrelay trace order.42.created printed\n%s", webhookID, byWebhookID.stdout, byID.stdout)
	}
	if out := e.must("trace", webhookID).stdout; !strings.Contains(out, "order.42.created") || !strings.Contains(out, "webhook-id  "+webhookID) {
		t.Errorf("relay trace %s does not name the event and its webhook-id:\n%s", webhookID, out)
	}

	for _, id := range []string{"order.42.created", webhookID} {
		var entries []struct {
			EventID    string `json:"event_id"`
			Subscriber string `json:"subscriber"`
		}
		out := e.must("dlq", "ls", "--event", id, "--json").stdout
		if err := json.Unmarshal([]byte(out), &entries); err != nil {
			t.Fatalf("relay dlq ls --event %s --json: %v\n%s", id, err, out)
		}
		if len(entries) != 1 || entries[0].EventID != "order.42.created" || entries[0].Subscriber != "down" {
			t.Errorf("relay dlq ls --event %s listed %+v, want the one dead letter of order.42.created", id, entries)
		}
	}
	if out := e.must("dlq", "ls", "--event", "order.44.created").stdout; !strings.Contains(out, "no dead letters") {
		t.Errorf("relay dlq ls --event of an event with none listed:\n%s", out)
	}
}
