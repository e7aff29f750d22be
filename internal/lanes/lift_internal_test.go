package lanes

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/relay-dev/relay/internal/clock"
	"github.com/relay-dev/relay/internal/ratelimit"
)

// TestLiftBetweenReserveAndWaitIsKept: relay sub resume lifts a pause or
// closes a circuit while the limiter's answer "open, come back in 15
// minutes" is on its way to the scheduler. The answer predates the lift:
// the scheduler must not begin the pause it asks for, or the subscriber
// waits the old cool-down with nothing left to wake it.
func TestLiftBetweenReserveAndWaitIsKept(t *testing.T) {
	l := &lane{scheds: make(map[string]*scheduler), cfg: Config{Clock: clock.Real},
		log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	s := l.scheduler("a")
	s.mu.Lock()
	asked := s.lifts // as request does before it asks the limiter
	s.mu.Unlock()
	dec := ratelimit.Decision{Verdict: ratelimit.CircuitOpen, Wait: 15 * time.Minute}
	s.lift() // the resume lands before the answer is acted on
	s.wait(context.Background(), dec, time.Time{}, asked)
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.pausedUntil.IsZero() {
		t.Fatalf("paused until %v by an answer given before the lift", s.pausedUntil)
	}

	// An answer given after the lift is acted on.
	asked = s.lifts
	s.mu.Unlock()
	s.wait(context.Background(), dec, time.Time{}, asked)
	s.mu.Lock()
	if s.pausedUntil.IsZero() {
		t.Fatal("an answer given after the lift began no pause")
	}
}
