package consumer

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sourcegraph/conc"
	"github.com/stretchr/testify/require"
)

// A message's metadata is its reply subject's, parsed once (the fan-out
// reads it twice for every event), and a reply subject that does not parse
// gives the same error each time.
func TestMessageMetadata(t *testing.T) {
	t.Parallel()
	js, _ := startStream(t)
	publish(t, js, 1, 3)

	p, err := newPuller(js.Conn(), "S", "c", 64)
	require.NoError(t, err)
	defer p.close()
	ctx, cancel := context.WithCancel(context.Background())
	var (
		mu  sync.Mutex
		got []jetstream.Msg
	)
	var wg conc.WaitGroup
	wg.Go(func() {
		_ = p.run(ctx, discard, func(msg jetstream.Msg) {
			mu.Lock()
			defer mu.Unlock()
			if got = append(got, msg); len(got) == 3 {
				cancel()
			}
		})
	})
	wg.Wait()
	require.Len(t, got, 3)

	for i, msg := range got {
		md, err := msg.Metadata()
		require.NoError(t, err)
		require.Equal(t, uint64(i+1), md.Sequence.Stream)
		require.Equal(t, uint64(i+1), md.Sequence.Consumer)
		require.Equal(t, uint64(1), md.NumDelivered)
		require.Equal(t, uint64(2-i), md.NumPending)
		require.Equal(t, "S", md.Stream)
		require.Equal(t, "c", md.Consumer)
		require.False(t, md.Timestamp.IsZero())

		again, err := msg.Metadata()
		require.NoError(t, err)
		require.Same(t, md, again, "parsed once")
		require.NoError(t, msg.Ack())
	}

	m := &message{msg: &nats.Msg{Subject: "s.1", Reply: "_INBOX.abc"}}
	_, err = m.Metadata()
	require.Error(t, err)
	_, again := m.Metadata()
	require.Equal(t, err, again, "the same error each time")
}

// A message is stamped as the client reads it, not as the loop's handler
// gets it: the messages of a burst that wait behind a slow handler carry
// the time they came, which the ack wait JetStream gave them counts from.
func TestReceivedAtIsWhenTheClientReadIt(t *testing.T) {
	t.Parallel()
	js, _ := startStream(t)
	publish(t, js, 0, 3)

	p, err := newPuller(js.Conn(), "S", "c", 64)
	require.NoError(t, err)
	defer p.close()
	ctx, cancel := context.WithCancel(context.Background())
	var (
		got      []jetstream.Msg
		firstEnd time.Time
	)
	var wg conc.WaitGroup
	wg.Go(func() {
		_ = p.run(ctx, discard, func(msg jetstream.Msg) {
			got = append(got, msg)
			if len(got) == 1 {
				// Slow on the first until the others have come (or the
				// check below fails).
				for range 3000 {
					p.queue.mu.Lock()
					n := len(p.queue.msgs)
					p.queue.mu.Unlock()
					if n == 2 {
						break
					}
					time.Sleep(10 * time.Millisecond)
				}
				firstEnd = time.Now()
			}
			_ = msg.Ack()
			if len(got) == 3 {
				cancel()
			}
		})
	})
	wg.Wait()
	require.Len(t, got, 3)
	for _, msg := range got[1:] {
		at, ok := ReceivedAt(msg)
		require.True(t, ok)
		require.True(t, at.Before(firstEnd), "stamped when it came, before the handler was free for it")
	}
	_, ok := ReceivedAt(&message{msg: &nats.Msg{}})
	require.False(t, ok, "a message built elsewhere has no time of its own")
}
