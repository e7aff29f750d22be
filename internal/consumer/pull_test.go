package consumer

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sourcegraph/conc"
	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/testutil"
)

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// handled records what a pull loop handed over, acking each message.
type handled struct {
	mu   sync.Mutex
	seqs map[uint64]uint64 // stream sequence → number of deliveries seen
	n    int
}

func (h *handled) handle(t *testing.T) func(jetstream.Msg) {
	return func(msg jetstream.Msg) {
		md, err := msg.Metadata()
		if err != nil {
			t.Errorf("metadata: %v", err)
			return
		}
		h.mu.Lock()
		h.seqs[md.Sequence.Stream] = md.NumDelivered
		h.n++
		h.mu.Unlock()
		if err := msg.Ack(); err != nil {
			t.Errorf("ack: %v", err)
		}
	}
}

func (h *handled) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.seqs)
}

// startStream creates a stream and a durable pull consumer with a long ack
// wait: a message sent to an inbox nobody reads would come back only after
// it, delivered twice.
func startStream(t *testing.T) (jetstream.JetStream, jetstream.Consumer) {
	t.Helper()
	n := testutil.StartNATS(t)
	ctx := testutil.Context(t)
	_, err := n.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}})
	require.NoError(t, err)
	cons, err := n.JS.CreateConsumer(ctx, "S", jetstream.ConsumerConfig{
		Durable: "c", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Minute,
	})
	require.NoError(t, err)
	return n.JS, cons
}

// impatientLoop runs a pull loop on startStream's consumer that gives each
// request up after 50 ms, long before the server ends it (MaxWait), and
// returns what it handled, the func that tells it to stop, and the one that
// waits until it has.
func impatientLoop(t *testing.T, js jetstream.JetStream) (got *handled, stop, wait func()) {
	t.Helper()
	p, err := newPuller(js.Conn(), "S", "c", 64)
	require.NoError(t, err)
	p.life = 50 * time.Millisecond
	got = &handled{seqs: map[uint64]uint64{}}
	ctx, cancel := context.WithCancel(context.Background())
	var wg conc.WaitGroup
	wg.Go(func() {
		if err := p.run(ctx, discard, got.handle(t)); err != nil {
			t.Errorf("pull: %v", err)
		}
	})
	return got, cancel, func() {
		wg.Wait()
		p.close()
	}
}

func publish(t *testing.T, js jetstream.JetStream, from, n int) {
	t.Helper()
	for i := from; i < from+n; i++ {
		_, err := js.Publish(testutil.Context(t), "s."+strconv.Itoa(i), []byte(strconv.Itoa(i)))
		require.NoError(t, err)
	}
}

// TestPullHandlesWhatALateRequestBrings: the server fills pull requests
// that the loop had already given up on (here the loop's patience is made
// shorter than the server's; on a machine starved of CPU it is the server's
// that starts late). Their messages are handled, each delivered once: none
// waits unread for the consumer's ack wait. (With an inbox per request,
// dropped as the request is given up, what the server sends just before it
// learns of the drop was lost for the ack wait: a lane stalled for a minute
// after a few seconds of load.)
func TestPullHandlesWhatALateRequestBrings(t *testing.T) {
	t.Parallel()
	js, cons := startStream(t)
	got, stop, wait := impatientLoop(t, js)
	defer func() {
		stop()
		wait()
	}()
	// Several requests have been given up by now and still wait on the
	// server; what is published next goes to them first.
	<-time.After(300 * time.Millisecond)
	publish(t, js, 0, 500)
	testutil.Eventually(t, func() bool { return got.count() == 500 }, "%d of 500 handled", got.count())
	got.mu.Lock()
	defer got.mu.Unlock()
	for seq, delivered := range got.seqs {
		require.EqualValues(t, 1, delivered, "message %d was delivered again: the first delivery went unread", seq)
	}
	info, err := cons.Info(testutil.Context(t))
	require.NoError(t, err)
	require.Zero(t, info.NumPending)
}

// TestPullTakesAnEmptyEventWithAStatusHeaderForAnEvent: an event with no
// body and a Status header of its own is a message of the stream, handled
// like any other, not the server's word about a pull request.
func TestPullTakesAnEmptyEventWithAStatusHeaderForAnEvent(t *testing.T) {
	t.Parallel()
	js, cons := startStream(t)
	msg := nats.NewMsg("s.status")
	msg.Header.Set("Status", "408")
	_, err := js.PublishMsg(testutil.Context(t), msg)
	require.NoError(t, err)
	publish(t, js, 0, 1)
	got := &handled{seqs: map[uint64]uint64{}}
	ctx, cancel := context.WithCancel(context.Background())
	var wg conc.WaitGroup
	wg.Go(func() {
		if err := Pull(ctx, js, cons, 16, discard, got.handle(t)); err != nil {
			t.Errorf("pull: %v", err)
		}
	})
	testutil.Eventually(t, func() bool { return got.count() == 2 }, "%d of 2 handled", got.count())
	cancel()
	wg.Wait()
}

// TestPullCountsEachRequestsEndOnce: the server's word that a request ended
// ends that request only; one about a request the loop gave up on ends
// none, so the loop never takes a live request for ended and piles up
// requests on the server.
func TestPullCountsEachRequestsEndOnce(t *testing.T) {
	t.Parallel()
	status := func(reply, code, desc string, pending int) *nats.Msg {
		m := nats.NewMsg(reply)
		m.Header.Set("Status", code)
		m.Header.Set("Description", desc)
		m.Header.Set("Nats-Pending-Messages", strconv.Itoa(pending))
		return m
	}
	for _, tc := range []struct {
		name    string
		msg     *nats.Msg
		out     int // requests out after
		credit  int
		wantErr bool
	}{
		{"the end of a request given up on", status("in.1", "408", "Request Timeout", 16), 2, 24, false},
		{"the oldest's end", status("in.2", "408", "Request Timeout", 16), 1, 8, false},
		{"the newest's end", status("in.3", "408", "Request Timeout", 8), 1, 16, false},
		{"a new leader", status("in.2", "409", "Leadership Change", 16), 1, 8, false},
		{"no consumer", status("in.2", "503", "", 0), 1, 16, true},
		{"an unknown refusal about a request given up on", status("in.1", "409", "Something New", 0), 2, 24, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &puller{batch: 16, credit: 24, out: []request{{reply: "in.2"}, {reply: "in.3"}}}
			err := p.ended(tc.msg)
			require.Equal(t, tc.wantErr, err != nil, "error: %v", err)
			require.Len(t, p.out, tc.out)
			require.Equal(t, tc.credit, p.credit)
		})
	}
}

// TestMessageAnswersAsJetStreamDoes: the loop's messages speak the
// server's ack protocol: a delayed nak brings a message back, a term and an
// ack settle one for good, and a second answer is refused.
func TestMessageAnswersAsJetStreamDoes(t *testing.T) {
	t.Parallel()
	js, cons := startStream(t)
	publish(t, js, 0, 3) // s.0: nak with delay, then ack; s.1: term; s.2: double ack
	var mu sync.Mutex
	deliveries := map[string]int{}
	ctx, cancel := context.WithCancel(context.Background())
	var wg conc.WaitGroup
	// The handler runs on the loop's goroutine: it reports with Errorf.
	check := func(what string, err, want error) {
		if !errors.Is(err, want) {
			t.Errorf("%s: %v, want %v", what, err, want)
		}
	}
	wg.Go(func() {
		err := Pull(ctx, js, cons, 16, discard, func(msg jetstream.Msg) {
			mu.Lock()
			deliveries[msg.Subject()]++
			n := deliveries[msg.Subject()]
			mu.Unlock()
			switch {
			case msg.Subject() == "s.0" && n == 1:
				check("in progress", msg.InProgress(), nil)
				check("nak with delay", msg.NakWithDelay(100*time.Millisecond), nil)
			case msg.Subject() == "s.1":
				check("term", msg.TermWithReason("test"), nil)
			case msg.Subject() == "s.2":
				check("double ack", msg.DoubleAck(context.Background()), nil)
			default:
				check("ack", msg.Ack(), nil)
			}
			check("a second answer", msg.Ack(), jetstream.ErrMsgAlreadyAckd)
			check("in progress once answered", msg.InProgress(), jetstream.ErrMsgAlreadyAckd)
		})
		check("pull", err, nil)
	})
	defer func() {
		cancel()
		wg.Wait()
	}()
	testutil.Eventually(t, func() bool {
		info, err := cons.Info(testutil.Context(t))
		return err == nil && info.AckFloor.Stream == 3 && info.NumAckPending == 0
	}, "not every message settled")
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, map[string]int{"s.0": 2, "s.1": 1, "s.2": 1}, deliveries)
}

// TestPullStopsWithNothingInLimbo: a loop that stops while the server still
// holds requests it had given up on reads on until the server ends them, so
// what they bring is handled, not left unacknowledged for the ack wait.
func TestPullStopsWithNothingInLimbo(t *testing.T) {
	t.Parallel()
	js, cons := startStream(t)
	got, stop, wait := impatientLoop(t, js)
	<-time.After(300 * time.Millisecond)
	stop()
	publish(t, js, 0, 100) // to the requests the server still holds
	wait()
	info, err := cons.Info(testutil.Context(t))
	require.NoError(t, err)
	t.Logf("%d handled while stopping, %d left pending", got.count(), info.NumPending)
	require.Zero(t, info.NumAckPending, "messages sent to the stopped loop wait out their ack wait")
	require.Positive(t, got.count(), "the requests given up on brought nothing while the loop stopped")
	require.EqualValues(t, 100, uint64(got.count())+info.NumPending)
}

// TestPullStopsOnceNoRequestCanBeFilled: the messages a request given up on
// brings are counted against the request still out, which the loop then
// takes as filled while the server still holds it. A loop that stops then
// reads on until every request it sent has ended: once it returns, nothing
// more comes to its inbox (a message sent there after the inbox is dropped
// would wait out its ack wait).
func TestPullStopsOnceNoRequestCanBeFilled(t *testing.T) {
	t.Parallel()
	js, _ := startStream(t)
	p, err := newPuller(js.Conn(), "S", "c", 4)
	require.NoError(t, err)
	defer p.close()
	send := func(expires time.Duration) {
		body, err := json.Marshal(pullRequest{Batch: p.batch, Expires: expires})
		require.NoError(t, err)
		require.NoError(t, p.send(body))
	}
	send(300 * time.Millisecond) // given up on at once; the server ends it first
	p.giveUp()
	send(MaxWait)
	require.NoError(t, js.Conn().Flush())
	// The server takes its waiting requests in turns: these fill part of
	// each, and the loop counts all four against the one it has out.
	publish(t, js, 0, 4)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	got := &handled{seqs: map[uint64]uint64{}}
	require.NoError(t, p.run(ctx, discard, got.handle(t)))
	require.Equal(t, 4, got.count())

	publish(t, js, 4, 1)
	msg, _, err := p.queue.next(300 * time.Millisecond)
	if err == nil {
		t.Fatalf("a request of the stopped loop was still held by the server: it sent %s %q", msg.Subject, msg.Header.Get("Status"))
	}
	require.ErrorIs(t, err, nats.ErrTimeout)
}

// TestPullRequestBringsAtMostPullBytes: a pull request for a batch of 256
// 16 KiB messages brings no more than PullBytes, not the 4 MiB the batch
// alone would allow. What the requests out may bring is what the server
// may have waiting for the relay's connection when the relay is slow to
// read; past the server's max_pending (64 MiB by default) it cuts the
// connection, and the acks sent meanwhile are lost.
func TestPullRequestBringsAtMostPullBytes(t *testing.T) {
	js, cons := startStream(t)
	ctx := testutil.Context(t)
	body := make([]byte, 16<<10)
	for i := range 400 {
		_, err := js.PublishAsync("s."+strconv.Itoa(i), body)
		require.NoError(t, err)
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		t.Fatal("publishing did not complete")
	}
	p, err := newPuller(js.Conn(), "S", "c", 256)
	require.NoError(t, err)
	release := make(chan struct{})
	loopCtx, cancel := context.WithCancel(context.Background())
	var wg conc.WaitGroup
	wg.Go(func() {
		// The handler holds the loop at the first message: no other
		// request is sent, and the first one is filled as far as it may be.
		_ = p.run(loopCtx, discard, func(m jetstream.Msg) {
			<-release
			_ = m.Ack()
		})
	})
	defer func() {
		cancel()
		close(release)
		wg.Wait()
		p.close()
	}()
	var info *jetstream.ConsumerInfo
	testutil.Eventually(t, func() bool {
		info, err = cons.Info(ctx)
		return err == nil && info.NumAckPending > 0 && info.NumWaiting == 0
	}, "the pull request was not filled: %+v", info)
	sent := info.NumAckPending * len(body)
	t.Logf("one request brought %d messages of %d bytes, %d bytes in all (max_bytes %d)", info.NumAckPending, len(body), sent, pullBytes(js.Conn()))
	require.LessOrEqual(t, sent, pullBytes(js.Conn()))
	require.Greater(t, info.NumAckPending, 1, "a request brought only one message")
}

// TestPullBringsTheLargestMessageTheServerTakes: a message as large as the
// server's max payload allows still comes: a request's max_bytes smaller
// than it would be ended at once, again and again, and the message never
// delivered.
func TestPullBringsTheLargestMessageTheServerTakes(t *testing.T) {
	js, _ := startStream(t)
	// The headers nats.go adds, and the subject, stay well under the
	// room left.
	big := make([]byte, int(js.Conn().MaxPayload())-1024)
	_, err := js.Publish(testutil.Context(t), "s.big", big)
	require.NoError(t, err)
	got, stop, wait := impatientLoop(t, js)
	testutil.Eventually(t, func() bool { return got.count() == 1 }, "the %d-byte message was not handled", len(big))
	stop()
	wait()
}
