package status

import (
	"fmt"
	"strings"
	"time"

	"github.com/relay-dev/relay/internal/ratelimit"
)

// Summary is the first line of `relay status`: what an operator looks at
// before reading any row, whether anything is stuck, failing or dying.
// Every figure is over the rows it was made from, but Parked as [Collect]
// sets it.
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
	// Parked is every delivery in RETRIES, of any subscriber, which the
	// server counts at no cost; [Collect] sets it, since the rows carry
	// none (see [Subscriber.Parked]). Summarize adds up the rows' that
	// have one.
	Parked uint64 `json:"parked"`
	// DeadLetters adds up the rows' Dead.
	DeadLetters uint64 `json:"dead_letters"`
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
		s.DeadLetters += r.Dead
		if !r.OldestPendingAt.IsZero() && (oldest.IsZero() || r.OldestPendingAt.Before(oldest)) {
			oldest, s.OldestQueue, s.OldestQueueAge = r.OldestPendingAt, r.ID, r.OldestPendingAge
		}
	}
	return s
}

// String is the summary line, such as
//
//	3 subscribers (1 enabled, 1 paused, 1 disabled), 1 open circuit, 12 pending, 3 parked, 5 dead letters, oldest queue 1m30s (alpha)
func (s Summary) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s (%d enabled, %d paused, %d disabled), %s, %d pending, %d parked, %s, oldest queue ",
		plural(uint64(s.Subscribers), "subscriber"), s.Enabled, s.Paused, s.Disabled,
		plural(uint64(s.OpenCircuits), "open circuit"), s.Pending, s.Parked, plural(s.DeadLetters, "dead letter"))
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
