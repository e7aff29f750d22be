package retry_test

import (
	"testing"
	"time"

	"github.com/relay-dev/relay/internal/deliver"
	"github.com/relay-dev/relay/internal/retry"
)

func fixed(v float64) func() float64 { return func() float64 { return v } }

// retryAfter is the outcome of a 429 carrying a valid Retry-After of d.
func retryAfter(d time.Duration) deliver.Outcome {
	return deliver.Outcome{Class: deliver.Retryable, Status: 429, RetryAfter: d, RetryAfterSet: true}
}

func withMaxPause(e retry.Exponential, d time.Duration) retry.Exponential {
	e.MaxPause = d
	return e
}

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
		{"retry-after larger than the back-off wins", def, 1, retryAfter(120 * time.Second), 0, 120 * time.Second},
		{"Retry-After: 1 on attempt 5 waits at least the back-off", def, 5, retryAfter(time.Second), 1, 80 * time.Second},
		{"Retry-After: 1 on attempt 5, most jitter", def, 5, retryAfter(time.Second), 0, 40 * time.Second},
		{"Retry-After: 1 on the first attempt still waits the back-off", def, 1, retryAfter(time.Second), 0, 2500 * time.Millisecond},
		{"Retry-After larger than the back-off wins, bounded by MaxPause", withMaxPause(def, 10*time.Minute),
			3, retryAfter(24 * time.Hour), 1, 10 * time.Minute},
		{"Retry-After under MaxPause is taken as is", withMaxPause(def, 10*time.Minute), 3, retryAfter(5 * time.Minute), 1, 5 * time.Minute},
		{"MaxPause bounds the Retry-After, not the back-off", withMaxPause(def, 10*time.Minute),
			11, retryAfter(24 * time.Hour), 1, time.Hour},
		{"retry-after zero is no pause", def, 3, deliver.Outcome{RetryAfterSet: true}, 1, 20 * time.Second},
		{"retry-after in the past is no pause", def, 3, retryAfter(-time.Minute), 1, 20 * time.Second},
		{"retry-after not from a valid header is ignored", def, 3, deliver.Outcome{RetryAfter: time.Hour}, 1, 20 * time.Second},
		{"retry-after bounded by max pause", retry.Exponential{Base: time.Second, Max: time.Minute, MaxPause: 10 * time.Minute},
			1, retryAfter(24 * time.Hour), 0, 10 * time.Minute},
		{"retry-after default bound is an hour", def, 1, retryAfter(24 * time.Hour), 0, time.Hour},
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
// twelfth attempt fails (docs/delivery-rules.md).
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

// TestRetryAfterOneKeepsTheSchedule proves the fix for a receiver that
// answers every attempt with "429, Retry-After: 1" (its --rate set too
// high): the short Retry-After never shortens the back-off, so the message
// still has about two hours before its twelfth attempt, not twelve seconds.
func TestRetryAfterOneKeepsTheSchedule(t *testing.T) {
	t.Parallel()
	for _, j := range []float64{0, 1} {
		p := retry.Exponential{Base: 5 * time.Second, Max: time.Hour, Jitter: fixed(j)}
		var total, plain time.Duration
		for attempt := 1; attempt < 12; attempt++ {
			total += p.NextRetry(attempt, retryAfter(time.Second))
			plain += p.NextRetry(attempt, deliver.Outcome{})
		}
		t.Logf("jitter %v: %v from the first attempt to the twelfth", j, total)
		if total != plain {
			t.Fatalf("jitter %v: Retry-After: 1 gave %v, the back-off alone %v", j, total, plain)
		}
	}
}
