package clock_test

import (
	"testing"
	"time"

	"github.com/relay-dev/relay/internal/clock"
)

func TestFakeFiresOnlyWhenAdvancedPastTheDeadline(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f := clock.NewFake(t0)
	ch := f.After(time.Hour)
	f.Advance(59 * time.Minute)
	select {
	case <-ch:
		t.Fatal("fired early")
	default:
	}
	if f.Waiters() != 1 {
		t.Fatalf("waiters = %d, want 1", f.Waiters())
	}
	f.Advance(time.Minute)
	if got := <-ch; !got.Equal(t0.Add(time.Hour)) {
		t.Fatalf("fired at %v", got)
	}
	if f.Waiters() != 0 {
		t.Fatalf("waiters = %d, want 0", f.Waiters())
	}
}
