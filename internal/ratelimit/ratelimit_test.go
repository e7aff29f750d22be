package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/relay-dev/relay/internal/clock"
	"github.com/relay-dev/relay/internal/ratelimit"
)

func TestLocalHoldsBurstPlusRateTimesT(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := []struct {
		name  string
		limit ratelimit.Limit
		step  time.Duration
		steps int
		want  int // requests let through over steps×step, burst included
	}{
		{"1/s burst 1 over 10s", ratelimit.Limit{Rate: 1, Burst: 1}, 100 * time.Millisecond, 100, 1 + 10},
		{"10/s burst 5 over 2s", ratelimit.Limit{Rate: 10, Burst: 5}, 10 * time.Millisecond, 200, 5 + 20},
		{"0.5/s burst 3 over 4s", ratelimit.Limit{Rate: 0.5, Burst: 3}, 50 * time.Millisecond, 80, 3 + 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fc := clock.NewFake(time.Unix(1_700_000_000, 0))
			l := ratelimit.NewLocal(fc)
			got := 0
			for i := 0; i <= tt.steps; i++ {
				for {
					wait, err := l.Reserve(ctx, "s", tt.limit)
					if err != nil {
						t.Fatal(err)
					}
					if wait > 0 {
						break
					}
					got++
				}
				if i < tt.steps {
					fc.Advance(tt.step)
				}
			}
			if got != tt.want {
				t.Fatalf("let through %d, want %d", got, tt.want)
			}
		})
	}
}

func TestLocalWaitIsTimeToNextToken(t *testing.T) {
	t.Parallel()
	fc := clock.NewFake(time.Unix(1_700_000_000, 0))
	l := ratelimit.NewLocal(fc)
	lim := ratelimit.Limit{Rate: 4, Burst: 1}
	if w, _ := l.Reserve(context.Background(), "s", lim); w != 0 {
		t.Fatalf("first reserve waited %v", w)
	}
	w, _ := l.Reserve(context.Background(), "s", lim)
	if w != 250*time.Millisecond {
		t.Fatalf("wait = %v, want 250ms", w)
	}
	fc.Advance(w)
	if w, _ := l.Reserve(context.Background(), "s", lim); w != 0 {
		t.Fatalf("after the wait, reserve waited %v", w)
	}
}

func TestUnlimitedNeverWaits(t *testing.T) {
	t.Parallel()
	l := ratelimit.NewLocal(nil)
	for range 1000 {
		if w, _ := l.Reserve(context.Background(), "s", ratelimit.Limit{}); w != 0 {
			t.Fatalf("unlimited waited %v", w)
		}
	}
}

func TestRefillIgnoresClockGoingBack(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_700_000_000, 0)
	tok, last := ratelimit.Refill(0.5, t0, t0.Add(-time.Hour), ratelimit.Limit{Rate: 100, Burst: 10})
	if tok != 0.5 || !last.Equal(t0) {
		t.Fatalf("got %v at %v", tok, last)
	}
}
