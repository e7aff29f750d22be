package ratelimit_test

import (
	"sync"
	"testing"
	"time"

	"github.com/relay-dev/relay/internal/clock"
	"github.com/relay-dev/relay/internal/ratelimit"
	"github.com/relay-dev/relay/internal/testutil"
)

// throttles is how many 429s arrive together in these tests: a lane with
// sixteen requests in flight to a subscriber whose --rate is too high.
const throttles = 16

// rateInForce reads the adaptive rate from the subscriber's entry.
func rateInForce(t *testing.T, n *testutil.NATS, id string, l ratelimit.Limit) float64 {
	t.Helper()
	return ratelimit.EffectiveRate(entry(t, n, id), l)
}

// observeAll has every Shared in relays, taken in turn, report one of
// count outcomes at once, and fails the test on any error: a lost race must
// never surface as one.
func observeAll(t *testing.T, id string, l ratelimit.Limit, r ratelimit.Result, count int, relays ...*ratelimit.Shared) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, count)
	for i := range count {
		s := relays[i%len(relays)]
		wg.Go(func() {
			if err := s.Observe(testutil.Context(t), id, l, r); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("Observe(%+v): %v", r, err)
	}
}

// TestSharedThrottlesInOneWindowHalveOnce proves the "at most one decrease
// per lease window" rule on one relay: sixteen 429s at once, or spread over
// one window, halve the rate once (not 2^16 times, down to the floor),
// record the decrease's server time in the entry, and cost one write.
func TestSharedThrottlesInOneWindowHalveOnce(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	l := ratelimit.Limit{Rate: 100, Burst: 100}
	for _, tt := range []struct {
		name string
		run  func(t *testing.T, fake *clock.Fake, s *ratelimit.Shared, id string)
	}{
		{"at once", func(t *testing.T, _ *clock.Fake, s *ratelimit.Shared, id string) {
			observeAll(t, id, l, ratelimit.Result{Throttled: true}, throttles, s)
		}},
		{"spread over the window", func(t *testing.T, fake *clock.Fake, s *ratelimit.Shared, id string) {
			step := ratelimit.DecreaseWindow / (throttles + 4)
			for range throttles {
				observe(t, s, id, l, ratelimit.Result{Throttled: true})
				fake.Advance(step)
			}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			id := subID(t)
			fake := newFake()
			s := newShared(t, n, fake, ratelimit.Options{})
			wantGo(t, "before the 429s", reserve(t, s, id, l))
			writes := s.Stats().Writes
			tt.run(t, fake, s, id)
			if got := rateInForce(t, n, id, l); got != 50 {
				t.Errorf("after %d 429s in one window: rate %v, want 50 (one halving)", throttles, got)
			}
			if st := entry(t, n, id); st.DecreasedAt.IsZero() {
				t.Errorf("entry %+v: the decrease's time was not recorded", st)
			}
			if w := s.Stats().Writes - writes; w != 1 {
				t.Errorf("%d 429s in one window cost %d writes, want 1", throttles, w)
			}
		})
	}
}

// TestSharedThrottleWithPauseStillDecreases proves that a 429 carrying a
// Retry-After (Throttled and PauseFor both set) lowers the rate as well as
// pausing the subscriber, also when a later pause is already stored and the
// new one changes nothing: a pause alone would let the same rate overshoot
// again once it ended.
func TestSharedThrottleWithPauseStillDecreases(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	l := ratelimit.Limit{Rate: 100, Burst: 100}
	for _, tt := range []struct {
		name   string
		before time.Duration // a pause stored before the 429, or none
		pause  time.Duration // the 429's Retry-After
		held   time.Duration // the pause in force after it
	}{
		{"the 429's own pause", 0, 2 * time.Second, 2 * time.Second},
		{"a later pause already stored", 5 * time.Second, time.Second, 5 * time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			id := subID(t)
			s := newShared(t, n, clock.NewFake(time.Now()), ratelimit.Options{})
			wantGo(t, "before the 429", reserve(t, s, id, l))
			if tt.before > 0 {
				observe(t, s, id, l, ratelimit.Result{PauseFor: tt.before})
				if got := rateInForce(t, n, id, l); got != l.Rate {
					t.Fatalf("a pause without a 429 lowered the rate to %v", got)
				}
			}
			observe(t, s, id, l, ratelimit.Result{Throttled: true, PauseFor: tt.pause})
			if got := rateInForce(t, n, id, l); got != 50 {
				t.Errorf("after a 429 with Retry-After: rate %v, want 50", got)
			}
			if st := entry(t, n, id); st.PausedUntil.IsZero() {
				t.Errorf("entry %+v: the pause was not shared", st)
			}
			wantVerdict(t, "after the 429", reserve(t, s, id, l), ratelimit.Paused, tt.held, time.Millisecond)
		})
	}
}

// TestSharedThrottlesInTwoWindowsHalveTwice proves that the window counts
// from the last decrease, not from the last 429: a 429 half a window after
// a decrease lowers nothing and does not extend the window, and the next
// 429 a whole window after the decrease halves again.
func TestSharedThrottlesInTwoWindowsHalveTwice(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	l := ratelimit.Limit{Rate: 100, Burst: 100}
	id := subID(t)
	fake := newFake()
	s := newShared(t, n, fake, ratelimit.Options{})
	wantGo(t, "before the 429s", reserve(t, s, id, l))

	observeAll(t, id, l, ratelimit.Result{Throttled: true}, throttles, s)
	if got := rateInForce(t, n, id, l); got != 50 {
		t.Fatalf("first window: rate %v, want 50", got)
	}
	fake.Advance(ratelimit.DecreaseWindow / 2)
	observe(t, s, id, l, ratelimit.Result{Throttled: true})
	if got := rateInForce(t, n, id, l); got != 50 {
		t.Fatalf("half a window after the decrease: rate %v, want still 50", got)
	}
	fake.Advance(ratelimit.DecreaseWindow / 2)
	observeAll(t, id, l, ratelimit.Result{Throttled: true}, throttles, s)
	if got := rateInForce(t, n, id, l); got != 25 {
		t.Fatalf("second window: rate %v, want 25 (two halvings)", got)
	}
}

// TestSharedRelaysThrottledInOneWindowHalveOnce proves the window across
// relays sharing the bucket: 429s seen by two relays within one window
// halve the rate once, whether they come one after the other (the second
// relay's view of the entry predating the decrease) or all at once; and
// either relay halves again in the next window.
func TestSharedRelaysThrottledInOneWindowHalveOnce(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	l := ratelimit.Limit{Rate: 100, Burst: 100}
	for _, tt := range []struct {
		name string
		run  func(t *testing.T, id string, a, b *ratelimit.Shared)
	}{
		{"one after the other", func(t *testing.T, id string, a, b *ratelimit.Shared) {
			observe(t, a, id, l, ratelimit.Result{Throttled: true})
			observe(t, b, id, l, ratelimit.Result{Throttled: true})
		}},
		{"at once", func(t *testing.T, id string, a, b *ratelimit.Shared) {
			observeAll(t, id, l, ratelimit.Result{Throttled: true}, throttles, a, b)
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			id := subID(t)
			fake := newFake()
			a := newShared(t, n, fake, ratelimit.Options{})
			b := newShared(t, n, fake, ratelimit.Options{})
			wantGo(t, "a before the 429s", reserve(t, a, id, l))
			wantGo(t, "b before the 429s", reserve(t, b, id, l))

			// The window is the server's time: the two 429s fall in one only
			// if the host let both writes through within it.
			before := time.Now()
			tt.run(t, id, a, b)
			took := time.Since(before)
			got := rateInForce(t, n, id, l)
			if took+skew(fake) >= ratelimit.DecreaseWindow {
				t.Logf("the two 429s took %v to record, relays %v apart: rate %v", took, skew(fake), got)
				if got != 50 && got != 25 {
					t.Fatalf("two relays throttled within two windows: rate %v, want 50 or 25", got)
				}
				return
			}
			if got != 50 {
				t.Fatalf("two relays throttled in one window: rate %v, want 50 (one halving)", got)
			}
			fake.Advance(ratelimit.DecreaseWindow + skew(fake))
			observe(t, b, id, l, ratelimit.Result{Throttled: true})
			observe(t, a, id, l, ratelimit.Result{Throttled: true})
			if got := rateInForce(t, n, id, l); got != 25 {
				t.Fatalf("two relays throttled in the next window: rate %v, want 25", got)
			}
		})
	}
}
