package lanes

import (
	"bytes"
	"context"
	"fmt"
	"runtime/pprof"
	"slices"
	"strings"
	"time"
)

// The stall watch: a lane that holds deliveries, has no request in flight,
// no subscriber waiting for a token, a pause or a request slot, and has
// sent nothing for stallAfter has lost a wake-up, or something holds it
// that should not. Nothing a subscriber does explains it. It is logged
// once per stall, with what each of its schedulers holds and a dump of the
// relay's goroutines, and counted (relay_lane_stalls_total).
//
// Deliveries let go (see [lane.letGo]) are not the lane's any more: the
// server holds them, unacknowledged and for nobody, until their ack wait
// ends, while the lane pulls and holds nothing. The watch does not see
// them; relay_deliveries_let_go_total counts them.

// begin counts a request of the lane that starts.
func (l *lane) begin() {
	l.flight.Begin()
	l.requests.Add(1)
	l.lastSent.Store(l.cfg.Clock.Now().UnixNano())
}

// end counts a request of the lane that finished.
func (l *lane) end() {
	l.requests.Add(-1)
	l.flight.End()
}

// watchStalls looks at the lane every stallCheckEvery until ctx ends, and
// reports a stall once it has lasted stallAfter: once per stall.
func (l *lane) watchStalls(ctx context.Context) {
	var since time.Time // when the lane was first seen stuck; zero when it is not
	reported := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.cfg.Clock.After(stallCheckEvery):
		}
		now := l.cfg.Clock.Now()
		held, locked := l.heldNow()
		stuck := (held > 0 || locked > 0) && l.requests.Load() == 0 && l.waiting.Load() == 0
		if !stuck {
			since, reported = time.Time{}, false
			continue
		}
		if since.IsZero() {
			since = now
		}
		sent := time.Unix(0, l.lastSent.Load())
		if reported || now.Sub(since) < stallAfter || now.Sub(sent) < stallAfter {
			continue
		}
		reported = true
		l.cfg.Metrics.LaneStalled()
		l.log.Warn("lanes: lane stalled: it holds deliveries, and has sent none with nothing in flight and nothing to wait for",
			"held", held, "schedulers_locked", locked, "for", now.Sub(since).Round(time.Second).String(),
			"last_sent", sent, "schedulers", l.describe(), "goroutines", goroutines())
	}
}

// heldNow counts the deliveries the lane's schedulers hold, and the
// schedulers whose lock is taken (their count unknown): the watch does not
// wait for a lock, which may be what the lane is stuck on.
func (l *lane) heldNow() (held, locked int) {
	// Only a busy scheduler holds (see [scheduler.syncLocked]).
	for _, s := range l.busySchedulers() {
		if !s.mu.TryLock() {
			locked++
			continue
		}
		held += len(s.queue)
		s.mu.Unlock()
	}
	return held, locked
}

// describe says what each scheduler of the lane that holds, sends or is
// locked is doing, for the stall's log.
func (l *lane) describe() string {
	var out []string
	for _, s := range l.schedulers() {
		if !s.mu.TryLock() {
			out = append(out, s.id+": locked")
			continue
		}
		if len(s.queue) > 0 || len(s.inFlight) > 0 || s.running {
			out = append(out, fmt.Sprintf("%s: held=%d in_flight=%d running=%t stopped=%t backlog=%t refilling=%t expect=%d paused_until=%s cautious=%t",
				s.id, len(s.queue), len(s.inFlight), s.running, s.stopped, s.backlog, s.refilling, s.expect,
				s.pausedUntil.Format(time.RFC3339Nano), s.cautious))
		}
		s.mu.Unlock()
	}
	slices.Sort(out)
	return strings.Join(out, "; ")
}

// goroutines is a dump of every goroutine's stack, with how long each has
// waited.
func goroutines() string {
	var b bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&b, 2)
	return b.String()
}
