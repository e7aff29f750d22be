package lanes_test

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relay-dev/relay/internal/deadletter"
	"github.com/relay-dev/relay/internal/ratelimit"
	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

const ms = time.Millisecond

func status(code int) func(int, http.ResponseWriter) {
	return func(_ int, w http.ResponseWriter) { w.WriteHeader(code) }
}

// deadLetters waits until the subscriber has want DLQ entries and returns
// them.
func (b *bundle) deadLetters(t *testing.T, id string, want int) []deadletter.Entry {
	t.Helper()
	var got []deadletter.Entry
	testutil.Eventually(t, func() bool {
		var err error
		got, err = deadletter.List(testutil.Context(t), b.n.JS, deadletter.Filter{Subscriber: id}, 0)
		return err == nil && len(got) >= want
	}, "%s: %d dead letters, want %d", id, len(got), want)
	if len(got) != want {
		t.Fatalf("%s: %d dead letters, want %d", id, len(got), want)
	}
	return got
}

// waitSettled waits until nothing is left queued, held or parked, so that a
// test can count requests knowing no more will come. Empty must be seen on
// several looks in a row: a retry's schedule firing, or a copy on its way
// between two streams, can leave both empty for an instant.
func (b *bundle) waitSettled(t *testing.T) {
	t.Helper()
	ctx := testutil.Context(t)
	empty := func() bool {
		for _, name := range []string{streams.Deliveries, streams.Retries} {
			s, err := b.n.JS.Stream(ctx, name)
			if err != nil {
				return false
			}
			info, err := s.Info(ctx)
			if err != nil || info.State.Msgs != 0 {
				return false
			}
		}
		return true
	}
	seen := 0
	testutil.Eventually(t, func() bool {
		if !empty() {
			seen = 0
			return false
		}
		seen++
		return seen >= 10 // about 100 ms of looking
	}, "deliveries not settled")
}

func TestServerErrorsAreRetriedWithTheSameWebhookID(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sub := b.put(t, subscribers.Subscriber{ID: "flaky", RetryBase: subscribers.Duration(50 * ms), RetryMax: subscribers.Duration(200 * ms), MaxAttempts: 5})
	b.arr.answer("flaky", func(n int, w http.ResponseWriter) {
		if n <= 2 {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	b.enqueue(t, sub, 4, 1)
	b.flush(t)
	b.startLanes(t, 4)
	testutil.Eventually(t, func() bool { return b.arr.count("flaky") >= 3 }, "not retried")
	b.waitSettled(t)
	ids := b.arr.webhookIDs("flaky")
	if len(ids) != 3 || ids[0] != ids[1] || ids[1] != ids[2] {
		t.Fatalf("webhook-ids of the attempts: %v, want three equal", ids)
	}
	if got, _ := deadletter.List(testutil.Context(t), b.n.JS, deadletter.Filter{}, 0); len(got) != 0 {
		t.Fatalf("dead letters: %+v", got)
	}
}

func TestFinalOutcomesAreDeadLettered(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		answer      func(int, http.ResponseWriter)
		maxAttempts int
		reason      deadletter.Reason
		requests    int
		lastStatus  int
	}{
		{"max attempts", status(http.StatusServiceUnavailable), 3, deadletter.MaxAttempts, 3, 503},
		{"timeout-like 408 counts too", status(http.StatusRequestTimeout), 2, deadletter.MaxAttempts, 2, 408},
		{"404 rejected at once", status(http.StatusNotFound), 12, deadletter.Rejected, 1, 404},
		{"redirect rejected, not followed", func(_ int, w http.ResponseWriter) {
			w.Header().Set("Location", "/elsewhere")
			w.WriteHeader(http.StatusFound)
		}, 12, deadletter.Rejected, 1, 302},
		{"410 gone", status(http.StatusGone), 12, deadletter.Gone, 1, 410},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			id := fmt.Sprintf("sub%d", i)
			sub := b.put(t, subscribers.Subscriber{ID: id, RetryBase: subscribers.Duration(20 * ms), RetryMax: subscribers.Duration(50 * ms), MaxAttempts: tt.maxAttempts})
			b.arr.answer(id, tt.answer)
			b.enqueue(t, sub, 4, 1, streams.HeaderEventType, "video.trending")
			b.flush(t)
			b.startLanes(t, 4)
			dead := b.deadLetters(t, id, 1)[0]
			b.waitSettled(t)
			if got := b.arr.count(id); got != tt.requests {
				t.Fatalf("%d requests, want %d", got, tt.requests)
			}
			if dead.Reason != tt.reason || dead.Attempts != tt.requests || dead.LastStatus != tt.lastStatus ||
				dead.EventID != id+"-0" || dead.EventType != "video.trending" || dead.FirstAttemptAt == nil {
				t.Fatalf("dead letter %+v", dead)
			}
			s, err := b.store.Get(testutil.Context(t), id)
			if err != nil {
				t.Fatal(err)
			}
			if s.Disabled != (tt.reason == deadletter.Gone) {
				t.Fatalf("disabled = %v after %s", s.Disabled, tt.reason)
			}
		})
	}
}

func TestRetryAfterIsObeyedForTheMessage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		value func(first time.Time) (string, time.Time)
	}{
		{"seconds", func(first time.Time) (string, time.Time) { return "1", first.Add(time.Second) }},
		{"http date", func(first time.Time) (string, time.Time) {
			at := first.Add(2 * time.Second).Truncate(time.Second)
			return at.UTC().Format(http.TimeFormat), at
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			// A back-off far shorter than the Retry-After: the longer wait
			// is the one obeyed.
			sub := b.put(t, subscribers.Subscriber{ID: "busy", RetryBase: subscribers.Duration(100 * time.Millisecond)})
			var notBefore time.Time
			b.arr.answer("busy", func(n int, w http.ResponseWriter) {
				if n == 1 {
					var v string
					v, notBefore = tt.value(time.Now())
					w.Header().Set("Retry-After", v)
					w.WriteHeader(http.StatusTooManyRequests)
					return
				}
				w.WriteHeader(http.StatusOK)
			})
			b.enqueue(t, sub, 4, 1)
			b.flush(t)
			b.startLanes(t, 4)
			testutil.Eventually(t, func() bool { return b.arr.count("busy") == 2 }, "no second attempt")
			if second := b.arr.times("busy")[1]; second.Before(notBefore) {
				t.Fatalf("second attempt at %v, before the Retry-After %v", second, notBefore)
			}
		})
	}
}

func TestNothingIsSentAfterTheDeadline(t *testing.T) {
	t.Parallel()
	b := setup(t)
	soon := b.put(t, subscribers.Subscriber{ID: "soon", RetryBase: subscribers.Duration(10 * time.Second)})
	late := b.put(t, subscribers.Subscriber{ID: "late"})
	b.arr.answer("soon", status(http.StatusBadGateway))
	// The first attempt fails; its retry (5 s or more away) would land after
	// the deadline, so it dies now.
	b.enqueue(t, soon, 4, 1, streams.HeaderDeadline, time.Now().Add(3*time.Second).UTC().Format(time.RFC3339))
	// Already past its deadline when it reaches the lane: never sent.
	b.enqueue(t, late, 4, 1, streams.HeaderDeadline, time.Now().Add(-time.Second).UTC().Format(time.RFC3339))
	b.flush(t)
	b.startLanes(t, 4)

	d := b.deadLetters(t, "soon", 1)[0]
	if d.Reason != deadletter.Deadline || d.Attempts != 1 || d.LastStatus != 502 {
		t.Fatalf("soon: %+v", d)
	}
	d = b.deadLetters(t, "late", 1)[0]
	if d.Reason != deadletter.Expired || d.Attempts != 0 || d.FirstAttemptAt != nil {
		t.Fatalf("late: %+v", d)
	}
	b.waitSettled(t)
	if n := b.arr.count("late"); n != 0 {
		t.Fatalf("an expired event was sent %d times", n)
	}
	if n := b.arr.count("soon"); n != 1 {
		t.Fatalf("soon: %d requests, want 1", n)
	}
}

func TestFailingSubscriberThatRecoversDrainsItsBacklog(t *testing.T) {
	t.Parallel()
	const backlog = 40
	b := setup(t)
	b.limits = ratelimit.Options{Cooldown: 100 * ms, MaxCooldown: 400 * ms}
	sub := b.put(t, subscribers.Subscriber{ID: "down", RetryBase: subscribers.Duration(20 * ms), RetryMax: subscribers.Duration(100 * ms), MaxAttempts: 100})
	var down atomic.Bool
	down.Store(true)
	b.arr.answer("down", func(n int, w http.ResponseWriter) {
		if down.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	b.enqueue(t, sub, 4, backlog)
	b.flush(t)
	b.startLanes(t, 4)
	testutil.Eventually(t, func() bool { return b.arr.count("down") >= 10 }, "no retries")
	failed := b.arr.count("down")
	down.Store(false)
	b.waitSettled(t)
	delivered := map[string]bool{}
	for _, id := range b.arr.webhookIDs("down")[failed:] {
		delivered[id] = true
	}
	if len(delivered) != backlog {
		t.Fatalf("%d of %d events delivered after the recovery", len(delivered), backlog)
	}
	if got, _ := deadletter.List(testutil.Context(t), b.n.JS, deadletter.Filter{}, 0); len(got) != 0 {
		t.Fatalf("dead letters: %d", len(got))
	}
}

// A message waiting for a token is held, not attempted: a throttled
// subscriber with --max-attempts 1 gets every event once.
func TestHoldingIsNotAnAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sub := b.put(t, subscribers.Subscriber{ID: "slow", Rate: 20, Burst: 1, MaxAttempts: 1, MaxInFlight: 1})
	b.enqueue(t, sub, 4, 30)
	b.flush(t)
	b.startLanes(t, 4)
	b.waitSettled(t)
	if n := b.arr.count("slow"); n != 30 {
		t.Fatalf("%d requests, want 30", n)
	}
	if got, _ := deadletter.List(testutil.Context(t), b.n.JS, deadletter.Filter{}, 0); len(got) != 0 {
		t.Fatalf("dead letters: %+v", got)
	}
	checkCap(t, b.arr, "slow", 20, 1)
}
