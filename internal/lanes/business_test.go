package lanes_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/relay-dev/relay/internal/deadletter"
	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

func rfc3339(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// A delivery that reaches its lane before its Relay-Deliver-At by another
// way than its schedule (a replay, a copy published by hand) waits in
// RETRIES until it is due and is sent then, not before; one due at or after
// its deadline is dead-lettered expired without a request.
func TestEarlyDeliveryWaitsUntilItIsDue(t *testing.T) {
	t.Parallel()
	b := setup(t)
	early := b.put(t, subscribers.Subscriber{ID: "early"})
	never := b.put(t, subscribers.Subscriber{ID: "never"})
	due := time.Now().Add(1500 * time.Millisecond)
	b.enqueue(t, early, 4, 3, streams.HeaderDeliverAt, rfc3339(due))
	b.enqueue(t, never, 4, 1, streams.HeaderDeliverAt, rfc3339(due), streams.HeaderDeadline, rfc3339(due))
	b.flush(t)
	b.startLanes(t, 4)

	testutil.Eventually(t, func() bool { return b.arr.count("early") == 3 }, "early: not delivered once due")
	for i, at := range b.arr.times("early") {
		if at.Before(due) {
			t.Errorf("early: request %d at %v, %v before its due time", i, at.Format(time.RFC3339Nano), due.Sub(at))
		}
	}
	d := b.deadLetters(t, "never", 1)[0]
	if d.Reason != deadletter.Expired || d.Attempts != 0 || d.DueAt == nil || !d.DueAt.Equal(due.UTC()) {
		t.Fatalf("never: %+v", d)
	}
	b.waitSettled(t)
	if n := b.arr.count("never"); n != 0 {
		t.Fatalf("never: %d requests for a delivery due at its deadline", n)
	}
}

// A Retry-After pause that outlasts the deadline of what the subscriber
// holds dead-letters all of it as deadline as soon as the pause is known,
// long before the deadline itself, with no request after the 429.
func TestPausePastTheDeadlineDeadLettersAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sub := b.put(t, subscribers.Subscriber{ID: "paused", MaxInFlight: 1})
	b.arr.answer("paused", func(_ int, w http.ResponseWriter) {
		w.Header().Set("Retry-After", "600")
		w.WriteHeader(http.StatusTooManyRequests)
	})
	deadline := time.Now().Add(time.Minute)
	b.enqueue(t, sub, 4, 10, streams.HeaderDeadline, rfc3339(deadline))
	b.flush(t)
	b.startLanes(t, 4)

	dead := b.deadLetters(t, "paused", 10)
	for _, d := range dead {
		if d.Reason != deadletter.Deadline {
			t.Errorf("dead letter %d: reason %s, want deadline", d.DLQSeq, d.Reason)
		}
		if !d.DeadAt.Before(deadline) {
			t.Errorf("dead letter %d died at %v, not before its deadline %v", d.DLQSeq, d.DeadAt, deadline)
		}
		if d.Deadline == nil || !d.Deadline.Equal(deadline.UTC()) {
			t.Errorf("dead letter %d keeps deadline %v, want %v", d.DLQSeq, d.Deadline, deadline.UTC())
		}
	}
	b.waitSettled(t)
	if n := b.arr.count("paused"); n != 1 {
		t.Fatalf("%d requests, want only the one answered 429", n)
	}
}

// A backlog at a low rate whose deadline passes while it waits for tokens:
// what the rate allows before the deadline is sent, the rest is
// dead-lettered as deadline without a request, and no request is begun
// after the deadline (the receiver may see one arrive a moment after it,
// on a loaded host).
func TestRateLimitedBacklogDiesAtItsDeadline(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.starts = &starts{}
	sub := b.put(t, subscribers.Subscriber{ID: "slow", Rate: 5, Burst: 1})
	// The deadline counts from lanes that consume already: on a loaded
	// machine their start alone can take longer than it.
	warm := b.put(t, subscribers.Subscriber{ID: "warm"})
	b.enqueue(t, warm, 4, 1)
	b.flush(t)
	b.startLanes(t, 4)
	testutil.Eventually(t, func() bool { return b.arr.count("warm") == 1 }, "lanes not consuming")
	const n = 40
	deadline := time.Now().Add(2 * time.Second)
	b.enqueue(t, sub, 4, n, streams.HeaderDeadline, rfc3339(deadline))
	b.flush(t)

	testutil.Eventually(t, func() bool {
		got, err := deadletter.List(testutil.Context(t), b.n.JS, deadletter.Filter{Subscriber: "slow"}, 0)
		return err == nil && len(got)+b.arr.count("slow") == n
	}, "not every delivery was sent or dead-lettered")
	b.waitSettled(t)
	sent := b.starts.times("slow")
	if got := b.arr.count("slow"); len(sent) != got {
		t.Fatalf("%d requests begun, %d arrived", len(sent), got)
	}
	for i, at := range sent {
		if !at.Before(deadline) {
			t.Errorf("request %d begun at %v, after the deadline %v", i, at, deadline)
		}
	}
	if len(sent) == 0 || len(sent) > 1+5*3 {
		t.Errorf("%d sent, want at most burst + rate × (deadline + a lease)", len(sent))
	}
	dead := b.deadLetters(t, "slow", n-len(sent))
	for _, d := range dead {
		if d.Reason != deadletter.Deadline || d.Attempts != 0 {
			t.Errorf("dead letter %d: %s after %d attempts, want deadline after 0", d.DLQSeq, d.Reason, d.Attempts)
		}
	}
}
