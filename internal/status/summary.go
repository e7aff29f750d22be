package status

import (
	"fmt"
	"strings"
	"time"

	"github.com/relay-dev/relay/internal/ratelimit"
	"github.com/relay-dev/relay/internal/timeliness"
)

// Summary is the first line of `relay status`: what an operator looks at
// before reading any row, whether anything is stuck, failing or dying.
// Every figure is over the rows it was made from, but Parked and Scheduled
// as [Collect] sets them.
type Summary struct {
	// Subscribers is the number of rows.
	Subscribers int `json:"subscribers"`
	// Enabled, Paused and Disabled split Subscribers by State, so that a
	// fleet half paused is seen before any row is read.
	Enabled  int `json:"enabled"`
	Paused   int `json:"paused"`
	Disabled int `json:"disabled"`
	// OpenCircuits counts the breakers that are not closed: open (cooling
	// down) or half-open (waiting for a probe's answer). Either way the
	// subscriber gets at most one request.
	OpenCircuits int `json:"open_circuits"`
	// Pending adds up the rows' Pending.
	Pending uint64 `json:"pending"`
	// Parked is every delivery in RETRIES, of any subscriber, but the
	// scheduled ones: what waits for a retry (or is due and on its way
	// back). The server counts it at no cost; [Collect] sets it, since the
	// rows carry none (see [Subscriber.Parked]). Summarize adds up the
	// rows' that have one.
	Parked uint64 `json:"parked"`
	// Scheduled is every delivery in RETRIES that is not due yet (its
	// event's Relay-Deliver-At is ahead), of any subscriber: one request
	// that counts them without listing them. [Collect] sets it; Summarize
	// adds up the rows' that have one.
	Scheduled uint64 `json:"scheduled"`
	// DeadLetters adds up the rows' Dead.
	DeadLetters uint64 `json:"dead_letters"`
	// Met and Missed add up the rows' deadline counts, so that one line
	// says how much of all the traffic with a deadline arrived in time;
	// [Summary.InTime] is their ratio.
	Met    uint64 `json:"met"`
	Missed uint64 `json:"missed"`
	// OldestQueue is the subscriber whose oldest pending delivery is the
	// oldest of all, and OldestQueueAge its age; both empty when nothing
	// is pending. The longest wait says more than the longest queue: a
	// long queue that moves is fine, an old message is not.
	OldestQueue    string `json:"oldest_queue,omitempty"`
	OldestQueueAge string `json:"oldest_queue_age,omitempty"`
}

// Summarize adds up rows into a [Summary].
func Summarize(rows []Subscriber) Summary {
	s := Summary{Subscribers: len(rows)}
	var oldest time.Time
	for _, r := range rows {
		switch r.State {
		case Paused:
			s.Paused++
		case Disabled:
			s.Disabled++
		default:
			s.Enabled++
		}
		if r.Circuit != ratelimit.Closed && r.Circuit != "" {
			s.OpenCircuits++
		}
		s.Pending += r.Pending
		if r.Parked != nil {
			s.Parked += *r.Parked
		}
		if r.Scheduled != nil {
			s.Scheduled += *r.Scheduled
		}
		s.DeadLetters += r.Dead
		s.Met += r.Met
		s.Missed += r.Missed
		if !r.OldestPendingAt.IsZero() && (oldest.IsZero() || r.OldestPendingAt.Before(oldest)) {
			oldest, s.OldestQueue, s.OldestQueueAge = r.OldestPendingAt, r.ID, r.OldestPendingAge
		}
	}
	return s
}

// InTime is the share of all deliveries with a deadline that met it,
// Met/(Met+Missed), and false when none was counted.
func (s Summary) InTime() (float64, bool) {
	return timeliness.Counts{Met: s.Met, Missed: s.Missed}.InTime()
}

// String is the summary line, such as
//
//	3 subscribers (1 enabled, 1 paused, 1 disabled), 1 open circuit, 12 pending, 3 parked, 2 scheduled, 5 dead letters, in time 99.2% (1204 met, 10 missed), oldest queue 1m30s (alpha)
//
// with "in time -" when no delivery had a deadline.
func (s Summary) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s (%d enabled, %d paused, %d disabled), %s, %d pending, %d parked, %d scheduled, %s, in time %s",
		plural(uint64(s.Subscribers), "subscriber"), s.Enabled, s.Paused, s.Disabled,
		plural(uint64(s.OpenCircuits), "open circuit"), s.Pending, s.Parked, s.Scheduled, plural(s.DeadLetters, "dead letter"),
		FormatInTime(s.Met, s.Missed))
	if s.Met+s.Missed > 0 {
		fmt.Fprintf(&b, " (%d met, %d missed)", s.Met, s.Missed)
	}
	b.WriteString(", oldest queue ")
	if s.OldestQueue == "" {
		b.WriteString("-")
	} else {
		fmt.Fprintf(&b, "%s (%s)", s.OldestQueueAge, s.OldestQueue)
	}
	return b.String()
}

// plural writes n and noun, with an s unless n is 1.
func plural(n uint64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
