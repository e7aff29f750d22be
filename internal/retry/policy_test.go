package retry_test

import (
	"testing"
	"time"

	"github.com/relay-dev/relay/internal/deliver"
	"github.com/relay-dev/relay/internal/retry"
)

func fixed(v float64) func() float64 { return func() float64 { return v } }

func TestExponentialSchedule(t *testing.T) {
	t.Parallel()
	def := retry.Exponential{Base: 5 * time.Second, Max: time.Hour}
	tests := []struct {
		name    string
		policy  retry.Exponential
		attempt int
		out     deliver.Outcome
		jitter  float64
		want    time.Duration
	}{
		{"first retry, most jitter", def, 1, deliver.Outcome{}, 0, 2500 * time.Millisecond},
		{"first retry, no jitter", def, 1, deliver.Outcome{}, 1, 5 * time.Second},
		{"second retry doubles", def, 2, deliver.Outcome{}, 1, 10 * time.Second},
		{"tenth retry", def, 10, deliver.Outcome{}, 1, 2560 * time.Second},
		{"eleventh retry is capped", def, 11, deliver.Outcome{}, 1, time.Hour},
		{"capped, halved by jitter", def, 11, deliver.Outcome{}, 0, 30 * time.Minute},
		{"huge attempt does not overflow", def, 500, deliver.Outcome{}, 1, time.Hour},
		{"retry-after replaces", def, 1, deliver.Outcome{RetryAfter: 120 * time.Second, RetryAfterSet: true}, 0, 120 * time.Second},
		{"retry-after zero is no pause", def, 3, deliver.Outcome{RetryAfterSet: true}, 1, 20 * time.Second},
		{"retry-after bounded by max pause", retry.Exponential{Base: time.Second, Max: time.Minute, MaxPause: 10 * time.Minute},
			1, deliver.Outcome{RetryAfter: 24 * time.Hour, RetryAfterSet: true}, 0, 10 * time.Minute},
		{"retry-after default bound is an hour", def, 1, deliver.Outcome{RetryAfter: 24 * time.Hour, RetryAfterSet: true}, 0, time.Hour},
		{"zero policy takes the defaults", retry.Exponential{}, 1, deliver.Outcome{}, 1, 5 * time.Second},
		{"small base", retry.Exponential{Base: 100 * time.Millisecond, Max: time.Second}, 4, deliver.Outcome{}, 1, 800 * time.Millisecond},
		{"small base capped", retry.Exponential{Base: 100 * time.Millisecond, Max: time.Second}, 5, deliver.Outcome{}, 1, time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := tt.policy
			p.Jitter = fixed(tt.jitter)
			if got := p.NextRetry(tt.attempt, tt.out); got != tt.want {
				t.Fatalf("NextRetry(%d) = %v, want %v", tt.attempt, got, tt.want)
			}
		})
	}
}

// With the defaults a subscriber has about two hours to recover before its
// twelfth attempt fails (DESIGN.md).
func TestDefaultScheduleGivesAboutTwoHours(t *testing.T) {
	t.Parallel()
	for _, j := range []float64{0, 1} {
		p := retry.Exponential{Base: 5 * time.Second, Max: time.Hour, Jitter: fixed(j)}
		var total time.Duration
		for attempt := 1; attempt < 12; attempt++ {
			total += p.NextRetry(attempt, deliver.Outcome{})
		}
		t.Logf("jitter %v: %v from the first attempt to the twelfth", j, total)
		if total < time.Hour || total > 3*time.Hour {
			t.Fatalf("jitter %v: %v", j, total)
		}
	}
}
