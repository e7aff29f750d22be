package commands

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

// TestTraceOfABroadFanOutReadsTheSubscribersOnce: relay trace of an event
// whose copies wait at many subscribers (all paused here) says of each
// that its subscriber is paused, reading the subscribers once rather than
// one key per waiting delivery, one after the other, which overran the
// trace's time on a broad fan-out.
func TestTraceOfABroadFanOutReadsTheSubscribersOnce(t *testing.T) {
	t.Parallel()
	const subs = 12
	n := testutil.StartRelayNATS(t)
	startRelay(t, n.URL, "relay-0")
	for i := range subs {
		id := fmt.Sprintf("wide-%02d", i)
		mustRelay(t, "sub", "add", id, "--nats", n.URL, "--url", "https://example.com/in", "--secret", testSecret, "--events", "order.*")
		mustRelay(t, "sub", "pause", id, "--nats", n.URL)
	}
	publish(t, n.JS, "order.created", "broad", 1)
	testutil.Eventually(t, func() bool {
		return strings.Count(mustRelay(t, "trace", "broad-0", "--nats", n.URL), "its subscriber is paused") == subs
	}, "the trace does not show the %d paused subscribers holding the event", subs)

	var reads atomic.Int64
	sub, err := n.Conn.Subscribe("$JS.API.DIRECT.GET.KV_"+streams.SubscribersBucket+".>", func(*nats.Msg) { reads.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := n.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	out := mustRelay(t, "trace", "broad-0", "--nats", n.URL)
	if err := n.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(out, "its subscriber is paused"); got != subs {
		t.Fatalf("relay trace says %d subscribers are paused, want %d:\n%s", got, subs, out)
	}
	if got := reads.Load(); got >= subs {
		t.Fatalf("relay trace read %d subscriber keys one by one for %d waiting deliveries", got, subs)
	}
}
