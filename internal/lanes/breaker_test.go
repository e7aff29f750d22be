package lanes_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/deadletter"
	"github.com/relay-dev/relay/internal/ratelimit"
	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

// flaky answers a subscriber's requests 500 with probability p (changed at
// will), from a seeded RNG, and keeps the webhook-ids it answered 2xx.
type flaky struct {
	mu   sync.Mutex
	rng  *rand.Rand
	p    float64
	ok   map[string]bool
	sent atomic.Int64
}

func newFlaky(seed uint64, p float64) *flaky {
	return &flaky{rng: rand.New(rand.NewPCG(seed, 55)), p: p, ok: map[string]bool{}}
}

func (f *flaky) set(p float64) {
	f.mu.Lock()
	f.p = p
	f.mu.Unlock()
}

func (f *flaky) delivered() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.ok)
}

// answer makes f the arrivals' answer for subscriber id.
func (f *flaky) answer(b *bundle, id string) {
	b.arr.answer(id, func(n int, w http.ResponseWriter) {
		f.sent.Add(1)
		b.arr.mu.Lock()
		webhookID := b.arr.ids[id][n-1]
		b.arr.mu.Unlock()
		f.mu.Lock()
		fail := f.rng.Float64() < f.p
		if !fail {
			f.ok[webhookID] = true
		}
		f.mu.Unlock()
		if fail {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

// waitDelivered waits until want events were delivered, or stop says so,
// for as long as deliveries go on: a loaded host under -race delivers a
// few hundred a second, and the test judges what was delivered, not when.
func (f *flaky) waitDelivered(t *testing.T, want int, stop func() bool) {
	t.Helper()
	last, since := -1, time.Now()
	for f.delivered() < want && !stop() {
		if n := f.delivered(); n != last {
			last, since = n, time.Now()
		} else if time.Since(since) > 30*time.Second {
			t.Fatalf("%d of %d events delivered, none for 30 s", n, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// circuitWatch follows a subscriber's entry in relay_ratelimit: the
// highest Opens stored, the Failures of the first entry that opened the
// circuit, and whether an entry closed it after one had opened it.
type circuitWatch struct {
	opens, firstFailures atomic.Int64
	closed               atomic.Bool
}

func watchCircuit(t *testing.T, b *bundle, id string) *circuitWatch {
	t.Helper()
	ctx := testutil.Context(t)
	kv, err := b.n.JS.KeyValue(ctx, streams.RateLimitBucket)
	require.NoError(t, err)
	w, err := kv.Watch(ctx, id)
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Stop() })
	c := &circuitWatch{}
	go func() {
		for e := range w.Updates() {
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			var st ratelimit.State
			if json.Unmarshal(e.Value(), &st) != nil {
				continue
			}
			if st.Opens > 0 {
				c.firstFailures.CompareAndSwap(0, int64(st.Failures))
			}
			if int64(st.Opens) > c.opens.Load() {
				c.opens.Store(int64(st.Opens))
			}
			if st.Opens == 0 && st.OpenUntil.IsZero() && c.opens.Load() > 0 {
				c.closed.Store(true)
			}
		}
	}()
	return c
}

// publishPaced publishes count deliveries for sub at rate a second, in
// steps of 10 ms, and returns how long it took: the rate the host gave.
func publishPaced(t *testing.T, b *bundle, sub subscribers.Subscriber, shared, count, rate int) time.Duration {
	t.Helper()
	start := time.Now()
	const step = 10 * time.Millisecond
	per := max(1, rate*int(step)/int(time.Second))
	for i := 0; i < count; {
		for j := 0; j < per && i < count; j, i = j+1, i+1 {
			m := &nats.Msg{Subject: "deliveries." + sub.Lane(shared) + "." + sub.ID,
				Header: nats.Header{streams.HeaderEventID: []string{fmt.Sprintf("%s-%d", sub.ID, i)}}, Data: []byte(`{}`)}
			if _, err := b.n.JS.PublishMsgAsync(m); err != nil {
				b.flush(t)
				_, err = b.n.JS.PublishMsgAsync(m)
				require.NoError(t, err)
			}
		}
		if due := start.Add(time.Duration(i/per) * step); time.Until(due) > 0 {
			time.Sleep(time.Until(due))
		}
	}
	b.flush(t)
	return time.Since(start)
}

// TestRandomFailuresNeverOpenTheCircuit: a receiver failing 20 % of
// requests at random, its events published at 1,000 a second and
// delivered as fast as the host gives (the rule counts requests, not
// seconds), never has its circuit opened, and gets every event, none
// dead-lettered. With the breaker of five failures in a row it opened
// within the first few seconds.
func TestRandomFailuresNeverOpenTheCircuit(t *testing.T) {
	t.Parallel()
	const events = 3000
	b := setup(t)
	sub := b.put(t, subscribers.Subscriber{ID: "flaky", RetryBase: subscribers.Duration(10 * time.Millisecond),
		RetryMax: subscribers.Duration(100 * time.Millisecond)})
	f := newFlaky(1, 0.2)
	f.answer(b, sub.ID)
	c := watchCircuit(t, b, sub.ID)
	b.startLanes(t, 4)
	start := time.Now()
	took := publishPaced(t, b, sub, 4, events, 1000)
	f.waitDelivered(t, events, func() bool { return c.opens.Load() > 0 })
	all := time.Since(start)
	t.Logf("published %d events in %v (%.0f/s), delivered them in %v (%.0f/s): %d requests",
		events, took.Round(time.Millisecond), float64(events)/took.Seconds(), all.Round(time.Millisecond),
		float64(f.delivered())/all.Seconds(), f.sent.Load())
	if n := c.opens.Load(); n > 0 {
		t.Fatalf("the circuit opened (%d times in a row) for a receiver failing 20 %% at random, after %d failures",
			n, c.firstFailures.Load())
	}
	b.waitSettled(t)
	if dead, _ := deadletter.List(testutil.Context(t), b.n.JS, deadletter.Filter{}, 0); len(dead) != 0 {
		t.Fatalf("%d events dead-lettered", len(dead))
	}
	require.Equal(t, events, f.delivered())
}

// TestFailingSubscriberOpensTheCircuitAtOnce: a receiver failing every
// request opens the circuit at the breaker's run of failures (20, or 5 on
// a host too slow for a share), counted in requests, not seconds: 20 ms
// at 1,000 a second.
func TestFailingSubscriberOpensTheCircuitAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.limits = ratelimit.Options{Cooldown: time.Minute}
	sub := b.put(t, subscribers.Subscriber{ID: "down", RetryBase: subscribers.Duration(10 * time.Millisecond),
		RetryMax: subscribers.Duration(100 * time.Millisecond)})
	f := newFlaky(2, 1)
	f.answer(b, sub.ID)
	c := watchCircuit(t, b, sub.ID)
	b.enqueue(t, sub, 4, 500)
	b.flush(t)
	b.startLanes(t, 4)
	testutil.Eventually(t, func() bool { return c.opens.Load() > 0 }, "the circuit never opened")
	failures := c.firstFailures.Load()
	t.Logf("opened after %d failures; %d requests by the time the test saw it", failures, f.sent.Load())
	if failures != int64(ratelimit.BusyRun*ratelimit.DefaultConsecutive) && failures != ratelimit.DefaultConsecutive {
		t.Fatalf("the circuit opened after %d failures, want %d (busy) or %d (thin)", failures,
			ratelimit.BusyRun*ratelimit.DefaultConsecutive, ratelimit.DefaultConsecutive)
	}
}

// TestMostlyFailingSubscriberOpensThenClosesOnRecovery: a receiver failing
// 60 % of requests at random opens the circuit; once it recovers, the
// probe closes it, and every event is delivered.
func TestMostlyFailingSubscriberOpensThenClosesOnRecovery(t *testing.T) {
	t.Parallel()
	const events = 500
	b := setup(t)
	b.limits = ratelimit.Options{Cooldown: 100 * time.Millisecond, MaxCooldown: 400 * time.Millisecond}
	sub := b.put(t, subscribers.Subscriber{ID: "sick", MaxAttempts: 200, RetryBase: subscribers.Duration(10 * time.Millisecond),
		RetryMax: subscribers.Duration(100 * time.Millisecond)})
	f := newFlaky(3, 0.6)
	f.answer(b, sub.ID)
	c := watchCircuit(t, b, sub.ID)
	b.enqueue(t, sub, 4, events)
	b.flush(t)
	b.startLanes(t, 4)
	testutil.Eventually(t, func() bool { return c.opens.Load() > 0 }, "the circuit never opened at 60 %% failures")
	t.Logf("opened after %d failures", c.firstFailures.Load())
	f.set(0)
	testutil.Eventually(t, func() bool { return c.closed.Load() }, "the circuit never closed once the receiver recovered")
	f.waitDelivered(t, events, func() bool { return false })
	b.waitSettled(t)
	if dead, _ := deadletter.List(testutil.Context(t), b.n.JS, deadletter.Filter{}, 0); len(dead) != 0 {
		t.Fatalf("%d events dead-lettered", len(dead))
	}
}
