package testutil

import (
	"sync"
	"testing"
	"time"
)

// Progress waits until count reaches want for as long as count keeps
// growing, and fails the test with msg, and the count it stood still at,
// when it stands still for idle of the time this process ran. A test that
// moves a fixed amount of work judges the relay by whether it moves, not by
// how fast a loaded host lets it: two cores busy with other builds slowed a
// run threefold, which a fixed bound took for a stall. idle is what a stall
// is: longer than any wait the code under test makes by design. Time the
// host kept the whole process from running (seen as a late poll) does not
// count toward it.
func Progress(t testing.TB, count func() int, want int, idle time.Duration, msg string, args ...any) {
	t.Helper()
	const poll = 10 * time.Millisecond
	last := count()
	var still time.Duration // the time the process ran since count last grew
	prev := time.Now()
	for last < want {
		time.Sleep(poll)
		now := time.Now()
		if step := now.Sub(prev); step > stalledOver {
			still += poll // the process did not run for most of it
		} else {
			still += step
		}
		prev = now
		if n := count(); n > last {
			last, still = n, 0
			continue
		}
		if still > idle {
			t.Fatalf("testutil: stood still at %d of %d for %v: "+msg, append([]any{last, want, idle}, args...)...)
		}
	}
}

// Stalls records when this process ran a goroutine, every few
// milliseconds, so that a test can tell a wait the code under test made
// from one the host imposed: a test process the host gives no CPU for
// seconds (a garbage collection under the race detector, a busy machine)
// shows it as a gap between two ticks.
type Stalls struct {
	mu    sync.Mutex
	ticks []time.Time
	stop  chan struct{}
	done  chan struct{}
}

// stallTick is how often Stalls looks; a gap between two ticks longer than
// it is time the process did not run.
const stallTick = 5 * time.Millisecond

// WatchStalls starts recording, until the test ends.
func WatchStalls(t testing.TB) *Stalls {
	s := &Stalls{ticks: []time.Time{time.Now()}, stop: make(chan struct{}), done: make(chan struct{})}
	go s.run()
	t.Cleanup(func() {
		close(s.stop)
		<-s.done
	})
	return s
}

func (s *Stalls) run() {
	defer close(s.done)
	tick := time.NewTicker(stallTick)
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			return
		case now := <-tick.C:
			// The ticker's own time is when it fired, not when this
			// goroutine ran: a starved process has the tick waiting.
			now = time.Now()
			s.mu.Lock()
			s.ticks = append(s.ticks, now)
			s.mu.Unlock()
		}
	}
}

// stalledOver is the shortest gap between two ticks counted as time the
// process did not run: shorter ones are a busy scheduler's ordinary slack.
const stalledOver = 50 * time.Millisecond

// Ran is how much of the time from from to to this process ran: the span
// less the gaps between ticks longer than stalledOver that fall in it. A
// wait the code under test made between two events is at most this, however
// long the host kept the process from running.
func (s *Stalls) Ran(from, to time.Time) time.Duration {
	s.mu.Lock()
	ticks := append([]time.Time(nil), s.ticks...)
	s.mu.Unlock()
	ticks = append(ticks, time.Now()) // a stall going on now
	ran := to.Sub(from)
	for i := 1; i < len(ticks); i++ {
		a, b := ticks[i-1], ticks[i]
		if b.Sub(a) <= stalledOver || !b.After(from) || !a.Before(to) {
			continue
		}
		ran -= earlier(b, to).Sub(later(a, from))
	}
	return max(0, ran)
}

// Late is the most this process ran late, from from to to: the longest
// gap between ticks that overlaps the span, less the tick. Requests that
// reached a receiver in this process within a span may have been sent over
// the span and that much more: they waited for the process to run, and
// were handled together after.
func (s *Stalls) Late(from, to time.Time) time.Duration {
	s.mu.Lock()
	ticks := append([]time.Time(nil), s.ticks...)
	s.mu.Unlock()
	ticks = append(ticks, time.Now())
	var late time.Duration
	for i := 1; i < len(ticks); i++ {
		a, b := ticks[i-1], ticks[i]
		if b.After(from) && a.Before(to) {
			late = max(late, b.Sub(a)-stallTick)
		}
	}
	return late
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
