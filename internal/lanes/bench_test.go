package lanes_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"runtime/pprof"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/sourcegraph/conc/pool"

	"github.com/relay-dev/relay/internal/deliver"
	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

// BenchmarkDrain measures how fast the lanes drain a backlog to one
// unlimited subscriber, against the naive loop (pull,
// signed POST, ack, 64 in flight) run on the same machine in the same
// process: compare the two deliveries/s figures of one run, not across runs.
//
//	go test -run '^$' -bench Drain -benchtime 20000x ./internal/lanes/
//
// spread is the lanes again with the deliveries spread over b.N/2
// subscribers, two each, on 16 shared lanes (the benchmark engine's scale
// scenario without the fan-out): what a subscriber's first deliveries cost
// beyond the deliveries themselves.
func BenchmarkDrain(b *testing.B) {
	b.Run("naive", func(b *testing.B) { benchDrain(b, true) })
	b.Run("lanes", func(b *testing.B) { benchDrain(b, false) })
	b.Run("spread", benchSpread)
}

// drainBundle starts a server, a receiver that counts what it is sent and
// the subscriber store, for the drain benchmarks.
func drainBundle(b *testing.B) (*bundle, *atomic.Int64) {
	n := testutil.StartRelayNATS(b)
	got := new(atomic.Int64)
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	b.Cleanup(rcv.Close)
	store, err := subscribers.Open(testutil.Context(b), n.JS)
	if err != nil {
		b.Fatal(err)
	}
	return &bundle{n: n, store: store, rcv: rcv}, got
}

func benchSpread(b *testing.B) {
	const shared, each = 16, 2
	bd, got := drainBundle(b)
	subs := max(1, b.N/each)
	for i := range subs {
		sub := subscribers.Subscriber{ID: fmt.Sprintf("spread-%05d", i), URL: bd.rcv.URL + "/spread", Secrets: []string{secret}, MaxInFlight: 64}
		if err := bd.store.Put(testutil.Context(b), sub); err != nil {
			b.Fatal(err)
		}
		bd.enqueue(b, sub, shared, each)
	}
	bd.flush(b)

	b.ResetTimer()
	start := time.Now()
	bd.startLanes(b, shared)
	waitDrained(b, got, subs*each, start)
}

// waitDrained waits until the receiver got n deliveries and reports how
// fast they came since start.
func waitDrained(b *testing.B, got *atomic.Int64, n int, start time.Time) {
	for got.Load() < int64(n) {
		time.Sleep(5 * time.Millisecond)
	}
	b.ReportMetric(float64(n)/time.Since(start).Seconds(), "deliveries/s")
}

func benchDrain(b *testing.B, naive bool) {
	bd, got := drainBundle(b)
	sub := subscribers.Subscriber{ID: "bench", URL: bd.rcv.URL + "/bench", Secrets: []string{secret}, MaxInFlight: 64}
	if err := bd.store.Put(testutil.Context(b), sub); err != nil {
		b.Fatal(err)
	}
	sub, _ = bd.store.Get(testutil.Context(b), "bench")
	bd.enqueue(b, sub, 4, b.N)
	bd.flush(b)

	b.ResetTimer()
	start := time.Now()
	if naive {
		naiveDrain(b, bd.n.JS, sub, got)
	} else {
		bd.startLanes(b, 4)
	}
	waitDrained(b, got, b.N, start)
}

// naiveDrain is the baseline: one consumer, 64 goroutines each sending a
// signed POST and acking.
func naiveDrain(b *testing.B, js jetstream.JetStream, sub subscribers.Subscriber, got *atomic.Int64) {
	ctx := testutil.Context(b)
	cons, err := js.CreateOrUpdateConsumer(ctx, streams.Deliveries, jetstream.ConsumerConfig{
		Durable: "naive", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 1024,
	})
	if err != nil {
		b.Fatal(err)
	}
	client, err := deliver.NewClient(deliver.WithAllowPrivate(true))
	if err != nil {
		b.Fatal(err)
	}
	keys, _ := sub.Keys(time.Now())
	iter, err := cons.Messages()
	if err != nil {
		b.Fatal(err)
	}
	defer iter.Stop()
	p := pool.New().WithMaxGoroutines(64)
	for i := 0; i < b.N; i++ {
		msg, err := iter.Next()
		if err != nil {
			b.Fatal(err)
		}
		p.Go(func() {
			client.Send(context.Background(), deliver.Request{URL: sub.URL, ID: msg.Headers().Get(streams.HeaderEventID),
				Body: msg.Data(), Keys: keys, Timeout: 10 * time.Second})
			_ = msg.Ack()
		})
	}
	p.Wait()
}

// BenchmarkSpreadOne puts b.N subscribers, one delivery each, on 16 shared
// lanes of one relay before it starts (the scale scenario's one event to
// all, without the fan-out) and reports what the relay held at its peak
// while it delivered them: goroutines, heap in use, and the time to the
// last delivery.
//
//	go test -run '^$' -bench SpreadOne -benchtime 10000x ./internal/lanes/
//
// RELAY_BENCH_HEAP names a file for a heap profile taken at the heap's
// peak.
func BenchmarkSpreadOne(b *testing.B) {
	const shared = 16
	bd, got := drainBundle(b)
	ctx := testutil.Context(b)
	p := pool.New().WithMaxGoroutines(32).WithErrors()
	for i := range b.N {
		p.Go(func() error {
			sub := subscribers.Subscriber{ID: fmt.Sprintf("one-%06d", i), URL: bd.rcv.URL + "/one", Secrets: []string{secret}, MaxInFlight: 64}
			return bd.store.Put(ctx, sub)
		})
	}
	if err := p.Wait(); err != nil {
		b.Fatal(err)
	}
	for i := range b.N {
		sub := subscribers.Subscriber{ID: fmt.Sprintf("one-%06d", i)}
		bd.enqueue(b, sub, shared, 1)
		if i%1000 == 999 {
			bd.flush(b)
		}
	}
	bd.flush(b)
	runtime.GC()

	stop := make(chan struct{})
	sampled := make(chan peaks, 1)
	go func() { sampled <- samplePeaks(stop, os.Getenv("RELAY_BENCH_HEAP")) }()
	b.ResetTimer()
	start := time.Now()
	bd.startLanes(b, shared)
	for got.Load() < int64(b.N) {
		time.Sleep(5 * time.Millisecond)
	}
	took := time.Since(start)
	close(stop)
	pk := <-sampled
	b.ReportMetric(took.Seconds(), "s-to-last")
	b.ReportMetric(float64(pk.goroutines), "goroutines-peak")
	b.ReportMetric(float64(pk.heap)/(1<<20), "heap-MB-peak")
	b.ReportMetric(float64(pk.stacks)/(1<<20), "stack-MB-peak")
}

type peaks struct {
	goroutines   int
	heap, stacks uint64
}

// samplePeaks samples the process's goroutines, heap in use and stacks
// until stop closes, and returns their peaks; with a file name, it writes a
// heap profile there as the heap reaches a new peak (at most once a second).
func samplePeaks(stop <-chan struct{}, heapFile string) peaks {
	var pk peaks
	var ms runtime.MemStats
	var profiled time.Time
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return pk
		case <-t.C:
		}
		pk.goroutines = max(pk.goroutines, runtime.NumGoroutine())
		runtime.ReadMemStats(&ms)
		pk.stacks = max(pk.stacks, ms.StackInuse)
		if ms.HeapInuse > pk.heap {
			pk.heap = ms.HeapInuse
			if heapFile != "" && time.Since(profiled) > time.Second {
				profiled = time.Now()
				if f, err := os.Create(heapFile); err == nil {
					_ = pprof.WriteHeapProfile(f)
					_ = f.Close()
				}
			}
		}
	}
}
