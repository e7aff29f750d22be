package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/internal/fanout"
	"github.com/relay-dev/relay/internal/testutil"
)

// BenchmarkEndToEnd runs the whole relay in the test process (fan-out and
// lanes, `relay run` against an in-process server) and measures events
// published with PubAcks to one unlimited subscriber until the last 2xx. It
// is there to be profiled:
//
//	go test -run '^$' -bench EndToEnd -benchtime 20000x -cpuprofile cpu.out ./cmd/relay/
//
// bench/engine measures the built binary against the naive loop.
func BenchmarkEndToEnd(b *testing.B) {
	n := testutil.StartRelayNATS(b)
	var got atomic.Int64
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		got.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	b.Cleanup(rcv.Close)
	if code := run(context.Background(), []string{"sub", "add", "bench", "--nats", n.URL, "--url", rcv.URL, "--secret", testSecret,
		"--max-in-flight", "64"}, io.Discard, io.Discard); code != 0 {
		b.Fatalf("sub add exited %d", code)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"run", "--nats", n.URL, "--metrics", "", "--allow-private-targets"}, io.Discard, io.Discard)
	}()
	b.Cleanup(func() {
		cancel()
		<-done
	})
	// One event through first: the relay is up and its view has the
	// subscriber.
	if _, err := n.JS.Publish(testutil.Context(b), fanout.SubjectPrefix+"warm", []byte(`{}`)); err != nil {
		b.Fatal(err)
	}
	testutil.Eventually(b, func() bool { return got.Load() == 1 }, "relay did not start delivering")

	body := []byte(`{"type":"video.trending","video_id":"vv_9f31c2","views":120000}`)
	b.ResetTimer()
	start := time.Now()
	futures := make([]jetstream.PubAckFuture, 0, b.N)
	for i := range b.N {
		f, err := n.JS.PublishAsync(fanout.SubjectPrefix+"video.trending", body, jetstream.WithMsgID("e"+strconv.Itoa(i)))
		if err != nil {
			b.Fatal(err)
		}
		futures = append(futures, f)
	}
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			b.Fatal(err)
		}
	}
	for got.Load() < int64(b.N)+1 {
		time.Sleep(2 * time.Millisecond)
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "deliveries/s")
}
