package lanes

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/deliver"
	"github.com/relay-dev/relay/internal/ratelimit"
)

// Every 429 is a throttle signal, a Retry-After on a 429 or 503 also a
// pause, and only failures that say the endpoint is down count for the
// breaker.
func TestResultOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		out  deliver.Outcome
		want ratelimit.Result
	}{
		{"429 without Retry-After", deliver.Outcome{Class: deliver.Retryable, Status: 429},
			ratelimit.Result{Throttled: true}},
		{"429 with Retry-After", deliver.Outcome{Class: deliver.Retryable, Status: 429, RetryAfterSet: true, RetryAfter: time.Second},
			ratelimit.Result{Throttled: true, PauseFor: time.Second}},
		{"503 with Retry-After", deliver.Outcome{Class: deliver.Retryable, Status: 503, RetryAfterSet: true, RetryAfter: 2 * time.Second},
			ratelimit.Result{PauseFor: 2 * time.Second}},
		{"503 without", deliver.Outcome{Class: deliver.Retryable, Status: 503}, ratelimit.Result{Failure: true}},
		{"timeout", deliver.Outcome{Class: deliver.Retryable}, ratelimit.Result{Failure: true}},
		{"2xx with the quota spent", deliver.Outcome{Class: deliver.Delivered, Status: 200, QuotaExhausted: true, QuotaReset: 3 * time.Second},
			ratelimit.Result{Success: true, PauseFor: 3 * time.Second}},
		{"404 shows the endpoint up", deliver.Outcome{Class: deliver.Rejected, Status: 404}, ratelimit.Result{Success: true}},
	}
	for _, tt := range tests {
		tt.want.Status = tt.out.Status // told to the operational events
		require.Equal(t, tt.want, resultOf(tt.out, ratelimit.Decision{}), tt.name)
	}
}
