package commands

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/relay-dev/relay/internal/attempts"
	"github.com/relay-dev/relay/internal/testutil"
)

// TestTraceSaysWhySubscribersGotNothing: of four subscribers of an event's
// type, one is disabled (it gets no copy, and relay sub disable, its help
// and relay sub get say so), one paused, one removed once its copy waited,
// one healthy. relay trace names each: disabled, held by its pause, removed
// (dropped, not dead-lettered), delivered. Before, the disabled one was
// missing from the trace, and disable's help said it held deliveries.
func TestTraceSaysWhySubscribersGotNothing(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	rcv := newSink(t, http.StatusOK)
	startRelay(t, n.URL, "relay-0")
	for _, id := range []string{"off", "held", "gone", "on"} {
		mustRelay(t, "sub", "add", id, "--nats", n.URL, "--url", rcv.URL+"/"+id, "--secret", testSecret, "--events", "order.*")
	}
	if out := mustRelay(t, "sub", "disable", "--help"); !strings.Contains(out, "not copied") || strings.Contains(out, "Hold deliveries") {
		t.Fatalf("relay sub disable --help:\n%s", out)
	}
	if out := mustRelay(t, "sub", "disable", "off", "--nats", n.URL); !strings.Contains(out, "new events are not copied") {
		t.Fatalf("relay sub disable: %q", out)
	}
	if out := mustRelay(t, "sub", "get", "off", "--nats", n.URL); !strings.Contains(out, "new events:") || !strings.Contains(out, "not copied while it is disabled") {
		t.Fatalf("relay sub get of a disabled subscriber:\n%s", out)
	}
	mustRelay(t, "sub", "pause", "held", "--nats", n.URL)
	mustRelay(t, "sub", "pause", "gone", "--nats", n.URL)

	publish(t, n.JS, "order.created", "order", 1)
	testutil.Eventually(t, func() bool { return rcv.count() == 1 }, "the healthy subscriber gets nothing")
	testutil.Eventually(t, func() bool { return statusOf(t, n.URL, "gone").Pending == 1 }, "the paused copy does not wait")
	mustRelay(t, "sub", "rm", "gone", "--nats", n.URL, "--yes")

	var tr attempts.Trace
	if err := json.Unmarshal([]byte(mustRelay(t, "trace", "order-0", "--nats", n.URL, "--json")), &tr); err != nil {
		t.Fatal(err)
	}
	if len(tr.Disabled) != 1 || tr.Disabled[0] != "off" {
		t.Errorf("disabled %v, want [off]", tr.Disabled)
	}
	states := map[string]attempts.Delivery{}
	for _, d := range tr.Deliveries {
		states[d.Subscriber] = d
	}
	if d := states["on"]; d.State != attempts.StateDelivered {
		t.Errorf("on: %+v, want delivered", d)
	}
	if d := states["held"]; !strings.Contains(d.Why, "its subscriber is paused") {
		t.Errorf("held: %+v, want its pause named", d)
	}
	if d := states["gone"]; d.State != attempts.StateRemoved {
		t.Errorf("gone: %+v, want removed", d)
	}
	if _, ok := states["off"]; ok {
		t.Errorf("off has a delivery: %+v", states["off"])
	}
	out := mustRelay(t, "trace", "order-0", "--nats", n.URL)
	for _, want := range []string{"off", "disabled", "not copied: it was disabled", "removed", "its subscriber was removed"} {
		if !strings.Contains(out, want) {
			t.Errorf("relay trace lacks %q:\n%s", want, out)
		}
	}
}
