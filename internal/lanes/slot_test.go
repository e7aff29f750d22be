package lanes_test

import (
	"bytes"
	"fmt"
	"net/http"
	"runtime/pprof"
	"testing"

	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

// TestWaitForASlotHoldsNoGoroutine: with --max-requests taken by one
// request that hangs, the other subscribers' held deliveries wait for a
// slot with no goroutine of their schedulers waiting (a hundred thousand
// subscribers would otherwise cost as many goroutines and their stacks);
// once the request ends, every delivery is sent, each once.
func TestWaitForASlotHoldsNoGoroutine(t *testing.T) {
	t.Parallel()
	const subs, shared = 200, 4
	b := setup(t)
	b.maxRequests = 1
	hang := make(chan struct{})
	lanes := map[string]bool{}
	for i := range subs {
		sub := b.put(t, subscribers.Subscriber{ID: fmt.Sprintf("slot-%03d", i)})
		b.arr.answer(sub.ID, func(n int, w http.ResponseWriter) {
			<-hang
			w.WriteHeader(http.StatusNoContent)
		})
		b.enqueue(t, sub, shared, 1)
		lanes[sub.Lane(shared)] = true
	}
	b.flush(t)
	b.startLanes(t, shared)
	released := false
	release := func() {
		if !released {
			released = true
			close(hang)
		}
	}
	defer release()

	// Every delivery is the relay's, and no scheduler loop waits: at most
	// the one whose request hangs.
	testutil.Eventually(t, func() bool {
		return ackPending(t, b, lanes) == subs && schedulerGoroutines(t) <= 1
	}, "not all %d deliveries pending an ack with no scheduler's loop waiting", subs)

	release()
	testutil.Eventually(t, func() bool { return b.arr.total() >= subs }, "%d of %d delivered", b.arr.total(), subs)
	b.waitSettled(t)
	for i := range subs {
		if n := b.arr.count(fmt.Sprintf("slot-%03d", i)); n != 1 {
			t.Fatalf("slot-%03d got %d requests, want 1", i, n)
		}
	}
}

// ackPending sums the deliveries the lanes' consumers wait an ack for.
func ackPending(t *testing.T, b *bundle, lanes map[string]bool) int {
	t.Helper()
	n := 0
	for lane := range lanes {
		cons, err := b.n.JS.Consumer(testutil.Context(t), streams.Deliveries, streams.LaneConsumer(lane))
		if err != nil {
			return -1
		}
		info, err := cons.Info(testutil.Context(t))
		if err != nil {
			return -1
		}
		n += info.NumAckPending
	}
	return n
}

// schedulerGoroutines counts the goroutines in a scheduler's loop.
func schedulerGoroutines(t *testing.T) int {
	t.Helper()
	var buf bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&buf, 2); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range bytes.Split(buf.Bytes(), []byte("\n\n")) {
		if bytes.Contains(g, []byte("lanes.(*scheduler).loop")) {
			n++
		}
	}
	return n
}
