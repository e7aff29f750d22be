package lanes_test

import (
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/internal/testutil"
)

// TestUnconfirmedKeepAliveLetsGoAndComesBack: a relay whose keep-alives
// the server takes but never confirms (their empty replies lost on the way
// back, as on a link that drops them or a server too loaded to answer)
// lets each held delivery go unsent once three quarters of its ack wait
// have passed since it arrived, and counts it in
// relay_deliveries_let_go_total; JetStream delivers it again when its ack
// wait ends. Every delivery arrives, each exactly once.
func TestUnconfirmedKeepAliveLetsGoAndComesBack(t *testing.T) {
	t.Parallel()
	const events = 8
	b := setup(t)
	b.ackWait = 4 * time.Second
	var dropped atomic.Int64
	b.throughProxyDropping(t, func(payload []byte) bool {
		// The server's answer to an ack sent as a request is the only
		// empty message it sends the relay here (deliveries carry {}).
		if len(payload) == 0 {
			dropped.Add(1)
			return true
		}
		return false
	})
	// One a second: the last ones wait in the lane past three quarters of
	// the ack wait.
	sub := b.put(t, subscribers.Subscriber{ID: "slow", Rate: 1, Burst: 1})
	b.enqueue(t, sub, 4, events)
	b.flush(t)
	b.startLanes(t, 4)
	testutil.Eventually(t, func() bool { return b.arr.count("slow") >= events }, "%d of %d delivered", b.arr.count("slow"), events)
	b.waitSettled(t)
	ids := b.arr.webhookIDs("slow")
	slices.Sort(ids)
	if got := len(slices.Compact(ids)); got != events || b.arr.count("slow") != events {
		t.Fatalf("%d requests, %d distinct webhook-ids; want %d of each", b.arr.count("slow"), got, events)
	}
	letGo := b.letGo(t)
	t.Logf("%d keep-alive answers lost, %d deliveries let go", dropped.Load(), letGo)
	if dropped.Load() == 0 || letGo == 0 {
		t.Fatal("no delivery let go: the test did not test it")
	}
}
