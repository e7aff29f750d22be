package fanout_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/internal/fanout"
	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

// BenchmarkFanOut measures the fan-out alone, per copy: a backlog of b.N
// events, each matching every one of the subscribers, published before it
// starts, and the time until every event is acknowledged (all copies
// stored). It is there to be profiled:
//
//	go test -run '^$' -bench FanOut -benchtime 2000x -cpuprofile cpu.out ./internal/fanout/
func BenchmarkFanOut(b *testing.B) {
	for _, subs := range []int{1, 100} {
		b.Run(fmt.Sprintf("subscribers=%d", subs), func(b *testing.B) {
			n := testutil.StartRelayNATS(b)
			ctx := testutil.Context(b)
			store, err := subscribers.Open(ctx, n.JS)
			if err != nil {
				b.Fatal(err)
			}
			for i := range subs {
				s := subscribers.Subscriber{ID: fmt.Sprintf("s%03d", i), URL: "https://example.com/hook",
					Secrets: []string{testSecret}, Events: []string{"x"}}
				if err := store.Put(ctx, s); err != nil {
					b.Fatal(err)
				}
			}
			watchCtx, cancel := context.WithCancel(ctx)
			defer cancel()
			live, err := store.Watch(watchCtx)
			if err != nil {
				b.Fatal(err)
			}
			body := []byte(`{"type":"video.trending","video_id":"vv_9f31c2","views":120000}`)
			futures := make([]jetstream.PubAckFuture, 0, b.N)
			for i := range b.N {
				f, err := n.JS.PublishAsync(fanout.SubjectPrefix+"x", body, jetstream.WithMsgID("e"+strconv.Itoa(i)))
				if err != nil {
					b.Fatal(err)
				}
				futures = append(futures, f)
			}
			var last uint64
			for _, f := range futures {
				select {
				case ack := <-f.Ok():
					last = ack.Sequence
				case err := <-f.Err():
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			start := time.Now()
			runCtx, stop := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				done <- fanout.Run(runCtx, fanout.Config{JS: n.JS, Subscribers: live, SharedLanes: sharedLanes})
			}()
			for {
				info, err := n.JS.Consumer(ctx, streams.Events, fanout.ConsumerName)
				if err == nil && info.CachedInfo().AckFloor.Stream >= last {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			took := time.Since(start)
			b.StopTimer()
			stop()
			if err := <-done; err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N*subs)/took.Seconds(), "copies/s")
		})
	}
}
