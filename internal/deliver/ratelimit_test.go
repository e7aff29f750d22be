package deliver_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/relay-dev/relay/internal/deliver"
)

func TestParseRateLimitReset(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	tests := []struct {
		name   string
		header map[string]string
		want   time.Duration
		ok     bool
	}{
		{"draft delta seconds", map[string]string{"RateLimit-Remaining": "0", "RateLimit-Reset": "30"}, 30 * time.Second, true},
		{"x- epoch seconds", map[string]string{"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1800000090"}, 90 * time.Second, true},
		{"epoch in the past", map[string]string{"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1700000000"}, 0, true},
		{"quota left", map[string]string{"RateLimit-Remaining": "3", "RateLimit-Reset": "30"}, 0, false},
		{"no reset", map[string]string{"RateLimit-Remaining": "0"}, 0, false},
		{"garbage reset", map[string]string{"RateLimit-Remaining": "0", "RateLimit-Reset": "soon"}, 0, false},
		{"negative reset", map[string]string{"RateLimit-Remaining": "0", "RateLimit-Reset": "-5"}, 0, false},
		{"garbage remaining", map[string]string{"RateLimit-Remaining": "none", "RateLimit-Reset": "5"}, 0, false},
		{"no headers", map[string]string{}, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := http.Header{}
			for k, v := range tt.header {
				h.Set(k, v)
			}
			got, ok := deliver.ParseRateLimitReset(h, now)
			if got != tt.want || ok != tt.ok {
				t.Fatalf("got %v %v, want %v %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}
