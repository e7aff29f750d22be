package lanes

import (
	"math"
	"time"

	"github.com/relay-dev/relay/internal/subscribers"
)

// The share of a lane: how much a subscriber may hold in its lane's
// MaxAckPending beside its busy lane-mates, and the pace it drains at.

// HoldLimit is how many messages a subscriber may hold in a lane of
// maxAckPending slots shared with busy-1 other busy subscribers, when it
// drains drainRate messages a second: a few seconds of its work, at least
// max-in-flight, at most its fair share of the lane.
func HoldLimit(sub *subscribers.Subscriber, maxAckPending, busy int, drainRate float64) int {
	share := (maxAckPending - maxAckPending/reserveDiv) / max(1, busy)
	window := holdWindow
	if sub.Rate <= 0 {
		if busy <= 1 {
			// Alone on its lane, an unlimited subscriber takes its share
			// whatever its pace (a response time estimated on a loaded
			// machine would send a burst to overflow for nobody's sake).
			return max(1, share)
		}
		window = unlimitedHoldWindow
	}
	want := sub.MaxInFlight
	if drainRate > 0 {
		want = max(want, int(min(math.Ceil(drainRate*window.Seconds()), float64(maxAckPending))))
	}
	return max(1, min(share, want))
}

// drainRate is how fast a subscriber's queue empties on this relay: its
// rate, or for an unlimited one what its in-flight slots allow at the
// response time seen lately.
func (s *scheduler) drainRate(sub *subscribers.Subscriber) float64 {
	if sub.Rate > 0 {
		return sub.Rate
	}
	latency := s.latency
	if latency <= 0 {
		latency = assumedLatency
	}
	return float64(sub.MaxInFlight) / max(latency.Seconds(), 0.0001)
}

// share is the most a subscriber may hold in its lane with the lane-mates
// busy now, whatever its rate.
func (s *scheduler) share() int {
	return HoldLimit(&anyPace, s.lane.cfg.MaxAckPending, int(s.lane.busy.Load()), 0)
}

// anyPace is a subscriber whose hold only its share of the lane bounds.
var anyPace = subscribers.Subscriber{MaxInFlight: math.MaxInt}

// holdLimit is HoldLimit for sub on this lane, at the --max-in-flight in
// force: fewer while its failures degrade it (ratelimit.DegradeFrom), so
// that a struggling receiver's queue holds a few seconds of what it is
// sent now, not of what it was sent healthy.
func (s *scheduler) holdLimit(sub *subscribers.Subscriber) int {
	if most := s.lane.cfg.Limiter.InFlight(s.id, sub.MaxInFlight); most < sub.MaxInFlight {
		degraded := *sub
		degraded.MaxInFlight = most
		sub = &degraded
	}
	return HoldLimit(sub, s.lane.cfg.MaxAckPending, int(s.lane.busy.Load()), s.drainRate(sub))
}

// movingAverage folds one response time into the average (a fifth of the
// weight to the new one). It starts from assumedLatency rather than the
// first response, which pays for a new connection: a burst's first replies
// must not make a fast subscriber look slow.
func movingAverage(avg, took time.Duration) time.Duration {
	if avg <= 0 {
		avg = assumedLatency
	}
	return avg + (took-avg)/5
}

// syncLocked keeps the lane's count of busy schedulers, and the relay's set
// of subscribers with a backlog, in step with this scheduler.
func (s *scheduler) syncLocked() {
	// A backlog alone (a disabled or paused subscriber's) holds no slot.
	busy := len(s.queue) > 0 || len(s.inFlight) > 0 || s.refilling || s.expect > 0
	if busy != s.busy {
		s.busy = busy
		s.lane.activeMu.Lock()
		if s.lane.active == nil {
			s.lane.active = make(map[*scheduler]struct{})
		}
		if busy {
			s.lane.busy.Add(1)
			s.lane.active[s] = struct{}{}
		} else {
			s.lane.busy.Add(-1)
			delete(s.lane.active, s)
		}
		s.lane.activeMu.Unlock()
	}
	if s.backlog != s.marked {
		s.marked = s.backlog
		s.lane.cfg.Backlogs.Set(s.id, s.backlog)
		s.lane.activeMu.Lock()
		if s.lane.marked == nil {
			s.lane.marked = make(map[*scheduler]struct{})
		}
		if s.marked {
			s.lane.marked[s] = struct{}{}
		} else {
			delete(s.lane.marked, s)
		}
		s.lane.activeMu.Unlock()
	}
}
