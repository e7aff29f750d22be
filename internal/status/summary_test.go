package status

import (
	"testing"
	"time"

	"github.com/relay-dev/relay/internal/ratelimit"
)

func TestSummarize(t *testing.T) {
	t.Parallel()
	one := uint64(1)
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	rows := []Subscriber{
		{ID: "a", State: Enabled, Circuit: ratelimit.Closed, Pending: 3, Parked: &one, Dead: 2, OldestPendingAt: t0.Add(time.Minute), OldestPendingAge: "1m0s"},
		{ID: "b", State: Paused, Circuit: ratelimit.Open, Pending: 5, OldestPendingAt: t0, OldestPendingAge: "2m0s"},
		{ID: "c", State: Disabled, Circuit: ratelimit.HalfOpen, Dead: 1},
		{ID: "d", State: Enabled, Circuit: ratelimit.Closed},
	}
	s := Summarize(rows)
	want := Summary{Subscribers: 4, Enabled: 2, Paused: 1, Disabled: 1, OpenCircuits: 2, Pending: 8, Parked: 1, DeadLetters: 3, OldestQueue: "b", OldestQueueAge: "2m0s"}
	if s != want {
		t.Fatalf("Summarize = %+v, want %+v", s, want)
	}
	if got, want := s.String(), "4 subscribers (2 enabled, 1 paused, 1 disabled), 2 open circuits, 8 pending, 1 parked, 3 dead letters, oldest queue 2m0s (b)"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	single := Summarize(rows[2:3])
	if got, want := single.String(), "1 subscriber (0 enabled, 0 paused, 1 disabled), 1 open circuit, 0 pending, 0 parked, 1 dead letter, oldest queue -"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}
