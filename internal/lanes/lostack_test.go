package lanes_test

import (
	"bytes"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/internal/deadletter"
	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

// throughDropProxy makes the bundle's relays reach NATS through a proxy
// that drops the first PubAck of a store in stream (RETRIES: a park or a
// hold; DLQ: a dead letter) and counts it in dropped: the server stored
// the copy, and relay never heard.
func (b *bundle) throughDropProxy(t *testing.T, stream string) *atomic.Int32 {
	t.Helper()
	dropped := new(atomic.Int32)
	b.throughProxyDropping(t, func(payload []byte) bool {
		return bytes.HasPrefix(payload, []byte(`{"stream":"`+stream+`",`)) &&
			!bytes.Contains(payload, []byte(`"duplicate":true`)) && dropped.CompareAndSwap(0, 1)
	})
	return dropped
}

// throughProxyDropping makes the bundle's relays reach NATS through a
// proxy that drops the server's messages drop accepts.
func (b *bundle) throughProxyDropping(t *testing.T, drop func(payload []byte) bool) {
	t.Helper()
	proxy := testutil.StartDropProxy(t, strings.TrimPrefix(b.n.URL, "nats://"), drop)
	nc, err := nats.Connect(proxy.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	b.relayJS = []jetstream.JetStream{js}
}

// TestParkWhosePubAckIsLostMakesOneRetry: a retry parked in RETRIES whose
// PubAck never reaches the relay is asked for again with its own id, found
// stored, and the original acked: one retry, not the parked copy and the
// original handed back until the same time.
func TestParkWhosePubAckIsLostMakesOneRetry(t *testing.T) {
	t.Parallel()
	b := setup(t)
	dropped := b.throughDropProxy(t, streams.Retries)
	sub := b.put(t, subscribers.Subscriber{ID: "flaky", RetryBase: subscribers.Duration(50 * ms), RetryMax: subscribers.Duration(200 * ms), MaxAttempts: 5})
	b.arr.answer("flaky", func(n int, w http.ResponseWriter) {
		if n == 1 {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	b.enqueue(t, sub, 4, 1)
	b.flush(t)
	b.startLanes(t, 4)
	testutil.Eventually(t, func() bool { return dropped.Load() == 1 }, "no park's PubAck dropped")
	b.waitSettled(t)
	if got := b.arr.count("flaky"); got != 2 {
		t.Fatalf("requests: %d, want 2 (the failure and one retry)", got)
	}
	if got, _ := deadletter.List(testutil.Context(t), b.n.JS, deadletter.Filter{}, 0); len(got) != 0 {
		t.Fatalf("dead letters: %+v", got)
	}
}

// TestHoldWhosePubAckIsLostSendsOnce is the same for a delivery that
// reached its lane before its Relay-Deliver-At and is held in RETRIES.
func TestHoldWhosePubAckIsLostSendsOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	dropped := b.throughDropProxy(t, streams.Retries)
	sub := b.put(t, subscribers.Subscriber{ID: "later"})
	b.enqueue(t, sub, 4, 1, streams.HeaderDeliverAt, time.Now().Add(time.Second).UTC().Format(time.RFC3339Nano))
	b.flush(t)
	b.startLanes(t, 4)
	testutil.Eventually(t, func() bool { return dropped.Load() == 1 }, "no hold's PubAck dropped")
	testutil.Eventually(t, func() bool { return b.arr.count("later") >= 1 }, "not delivered")
	b.waitSettled(t)
	if got := b.arr.count("later"); got != 1 {
		t.Fatalf("requests: %d, want 1", got)
	}
}

// TestDeadLetterWhosePubAckIsLostIsNotSentAgain: a rejected delivery whose
// dead letter's PubAck never reaches the relay is not handed back to be
// sent again; the DLQ holds one entry.
func TestDeadLetterWhosePubAckIsLostIsNotSentAgain(t *testing.T) {
	t.Parallel()
	b := setup(t)
	dropped := b.throughDropProxy(t, streams.DLQ)
	sub := b.put(t, subscribers.Subscriber{ID: "strict"})
	b.arr.answer("strict", func(_ int, w http.ResponseWriter) { w.WriteHeader(http.StatusBadRequest) })
	b.enqueue(t, sub, 4, 1)
	b.flush(t)
	b.startLanes(t, 4)
	testutil.Eventually(t, func() bool { return dropped.Load() == 1 }, "no dead letter's PubAck dropped")
	b.waitSettled(t)
	if got := b.arr.count("strict"); got != 1 {
		t.Fatalf("requests: %d, want 1", got)
	}
	if got := b.deadLetters(t, "strict", 1); got[0].Reason != deadletter.Rejected {
		t.Fatalf("dead letter: %+v", got[0])
	}
}
