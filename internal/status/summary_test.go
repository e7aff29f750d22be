package status

import (
	"testing"
	"time"

	"github.com/relay-dev/relay/internal/ratelimit"
)

func TestSummarize(t *testing.T) {
	t.Parallel()
	one, two := uint64(1), uint64(2)
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	rows := []Subscriber{
		{ID: "a", State: Enabled, Circuit: ratelimit.Closed, Pending: 3, Parked: &one, Scheduled: &two, Dead: 2, Met: 1194, Missed: 10, OldestPendingAt: t0.Add(time.Minute), OldestPendingAge: "1m0s"},
		{ID: "b", State: Paused, Circuit: ratelimit.Open, Pending: 5, Met: 10, OldestPendingAt: t0, OldestPendingAge: "2m0s"},
		{ID: "c", State: Disabled, Circuit: ratelimit.HalfOpen, Dead: 1},
		{ID: "d", State: Enabled, Circuit: ratelimit.Closed},
	}
	s := Summarize(rows)
	want := Summary{Subscribers: 4, Enabled: 2, Paused: 1, Disabled: 1, OpenCircuits: 2, Pending: 8, Parked: 1, Scheduled: 2, DeadLetters: 3, Met: 1204, Missed: 10, OldestQueue: "b", OldestQueueAge: "2m0s"}
	if s != want {
		t.Fatalf("Summarize = %+v, want %+v", s, want)
	}
	if got, want := s.String(), "4 subscribers (2 enabled, 1 paused, 1 disabled), 2 open circuits, 8 pending, 1 parked, 2 scheduled, 3 dead letters, in time 99.2% (1204 met, 10 missed), oldest queue 2m0s (b)"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	single := Summarize(rows[2:3])
	if got, want := single.String(), "1 subscriber (0 enabled, 0 paused, 1 disabled), 1 open circuit, 0 pending, 0 parked, 0 scheduled, 1 dead letter, in time -, oldest queue -"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

func TestFormatInTime(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		met, missed uint64
		want        string
	}{
		{0, 0, "-"},
		{5, 0, "100.0%"},
		{0, 5, "0.0%"},
		{1204, 10, "99.2%"},
		{3, 1, "75.0%"},
		// One in a million either way is not rounded away.
		{999_999, 1, "99.9%"},
		{1, 999_999, "0.1%"},
	} {
		if got := FormatInTime(c.met, c.missed); got != c.want {
			t.Errorf("FormatInTime(%d, %d) = %q, want %q", c.met, c.missed, got, c.want)
		}
	}
}
