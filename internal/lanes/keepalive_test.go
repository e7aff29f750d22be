package lanes_test

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
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

// TestLetGoIsHeldByTheServerAloneAndNoStall is the picture of a lane that
// stood still with deliveries "acked by no one, none pending, no pull
// waiting", made on purpose: the server takes a lane's keep-alives but its
// answers never come back, and the deliveries the lane still held three
// quarters of an ack wait after their receipt are let go. Until the server's
// ack wait for them ends they are the server's alone: the lane consumer
// counts them unacknowledged, with nothing pending, while the lane pulls (a
// pull request waits) and holds nothing, so the stall watch, which looks at
// what the lane holds, says nothing. Stopped then, as a failed test's
// cleanup stops its lanes before it logs the consumers, the same consumer
// shows no pull waiting either: the log of a stopped relay cannot tell a
// lane that stood still from one that waits for the server.
func TestLetGoIsHeldByTheServerAloneAndNoStall(t *testing.T) {
	t.Parallel()
	const (
		events = 14
		shared = 4
	)
	b := setup(t)
	b.ackWait = 12 * time.Second
	b.throughProxyDropping(t, func(payload []byte) bool { return len(payload) == 0 })
	// One a second: about ten go out within three quarters of the ack
	// wait, and the others are let go.
	sub := b.put(t, subscribers.Subscriber{ID: "slow", Rate: 1, Burst: 1})
	b.enqueue(t, sub, shared, events)
	b.flush(t)
	stop := b.startLanes(t, shared)
	cons := streams.LaneConsumer(sub.Lane(shared))

	// Every delivery sent or let go: the lane holds none of them.
	testutil.Eventually(t, func() bool { return b.letGo(t) > 0 && b.arr.count("slow")+b.letGo(t) >= events },
		"%d sent, %d let go of %d", b.arr.count("slow"), b.letGo(t), events)
	letGo := b.letGo(t)
	require.Equal(t, events, b.arr.count("slow")+letGo, "a delivery sent twice or let go twice")
	// Within the server's ack wait for them, which runs 12 s from the last
	// round that renewed them (3 s before the let-go at most), the server
	// holds them alone, and takes the acks of the others.
	running := b.consumerInfo(t, cons)
	testutil.Eventually(t, func() bool {
		running = b.consumerInfo(t, cons)
		// A pull request waits but between the end of one and the next.
		return running.NumAckPending == letGo && running.NumWaiting > 0 && b.arr.count("slow")+letGo == events
	}, "%s: ack pending %d, waiting %d, %d let go, %d sent of %d", cons, running.NumAckPending, running.NumWaiting, letGo, b.arr.count("slow"), events)
	t.Logf("running: %d let go; %s pending %d, waiting %d, ack pending %d", letGo, cons, running.NumPending, running.NumWaiting, running.NumAckPending)
	require.Zero(t, running.NumPending, "nothing left to deliver")
	require.Zero(t, b.stalls(t), "the stall watch reported a lane that holds nothing")

	stop()
	stopped := b.consumerInfo(t, cons)
	t.Logf("stopped: %s pending %d, waiting %d, ack pending %d", cons, stopped.NumPending, stopped.NumWaiting, stopped.NumAckPending)
	require.Zero(t, stopped.NumWaiting, "a stopped relay leaves a pull waiting")
	require.Equal(t, letGo, stopped.NumAckPending)
}

// heldLog is a log handler that holds the first record whose message
// contains hold until release is closed, and tells held when it holds it:
// a log whose writes block (a full pipe, a slow disk).
type heldLog struct {
	slog.Handler
	hold    string
	once    *sync.Once
	held    chan struct{}
	release chan struct{}
}

func (h heldLog) Handle(ctx context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.hold) {
		h.once.Do(func() {
			close(h.held)
			<-h.release
		})
	}
	return h.Handler.Handle(ctx, r)
}

func (h heldLog) WithAttrs(attrs []slog.Attr) slog.Handler {
	h.Handler = h.Handler.WithAttrs(attrs)
	return h
}

func (h heldLog) WithGroup(name string) slog.Handler {
	h.Handler = h.Handler.WithGroup(name)
	return h
}

// TestLetGoWhoseLogBlocksHoldsNoLaneMate: while the log of a let-go blocks
// (the let-go of a throttled subscriber's deliveries whose keep-alives the
// server never confirms), the lane goes on pulling and sending: a delivery
// of that subscriber is taken and one of a lane-mate is delivered. A let-go
// logged under its scheduler's lock held the lane's pull loop at that
// subscriber's next delivery, and every lane-mate behind it.
func TestLetGoWhoseLogBlocksHoldsNoLaneMate(t *testing.T) {
	t.Parallel()
	const shared = 1 // one lane for all
	b := setup(t)
	b.ackWait = 4 * time.Second
	b.throughProxyDropping(t, func(payload []byte) bool { return len(payload) == 0 })
	h := heldLog{Handler: slog.NewTextHandler(io.Discard, nil), hold: "letting go", once: new(sync.Once),
		held: make(chan struct{}), release: make(chan struct{})}
	b.logger = slog.New(h)
	slow := b.put(t, subscribers.Subscriber{ID: "slow", Rate: 1, Burst: 1})
	mate := b.put(t, subscribers.Subscriber{ID: "mate"})
	b.enqueue(t, slow, shared, 8)
	b.flush(t)
	b.startLanes(t, shared)
	release := sync.OnceFunc(func() { close(h.release) })
	t.Cleanup(release) // before the lanes stop
	select {
	case <-h.held:
	case <-testutil.Context(t).Done():
		t.Fatal("no let-go logged")
	}
	// The let-go's log blocks now.
	b.enqueue(t, slow, shared, 1)
	b.enqueue(t, mate, shared, 1)
	b.flush(t)
	testutil.Eventually(t, func() bool { return b.arr.count("mate") == 1 }, "the lane-mate's delivery not sent while a let-go's log blocks")
	release()
}
