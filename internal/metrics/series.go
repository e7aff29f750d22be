package metrics

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrSubscriberSeries is returned by [ParseSubscriberSeries] for a value
// that is none of all, top:N and none.
var ErrSubscriberSeries = errors.New("must be all, top:N (N at least 1) or none")

// Which subscribers have series of their own, [SubscriberSeries.Mode].
const (
	// SeriesAuto: every subscriber while the relay's view holds at most
	// [AutoAllUpTo], then as [SeriesTop] with [AutoTop].
	SeriesAuto = "auto"
	// SeriesAll: every subscriber.
	SeriesAll = "all"
	// SeriesTop: the N most active, and every one failing, paused, with a
	// backlog or an open circuit.
	SeriesTop = "top"
	// SeriesNone: none; everything per subscriber is counted under
	// subscriber="_other".
	SeriesNone = "none"
)

// Bounds of [SeriesAuto].
const (
	// AutoAllUpTo is the largest view in which every subscriber has
	// series: about 5 per subscriber, 50,000 at most.
	AutoAllUpTo = 10_000
	// AutoTop is the N of top:N beyond AutoAllUpTo.
	AutoTop = 1_000
)

// SubscriberSeries says which subscribers have series of their own
// (relay run --metrics-subscribers); the zero value is [SeriesAuto]. The
// others' counters and histograms are summed under subscriber="_other", so
// that a sum over subscribers stays whole whatever the choice.
type SubscriberSeries struct {
	// Mode is SeriesAuto, SeriesAll, SeriesTop or SeriesNone.
	Mode string
	// Top is the N of SeriesTop.
	Top int
}

// ParseSubscriberSeries reads a value of --metrics-subscribers: all,
// top:N, none, or auto (the default).
func ParseSubscriberSeries(s string) (SubscriberSeries, error) {
	switch s {
	case "", SeriesAuto:
		return SubscriberSeries{Mode: SeriesAuto}, nil
	case SeriesAll, SeriesNone:
		return SubscriberSeries{Mode: s}, nil
	}
	n, ok := strings.CutPrefix(s, SeriesTop+":")
	if !ok {
		return SubscriberSeries{}, fmt.Errorf("%w, got %q", ErrSubscriberSeries, s)
	}
	top, err := strconv.Atoi(n)
	if err != nil || top < 1 {
		return SubscriberSeries{}, fmt.Errorf("%w, got %q", ErrSubscriberSeries, s)
	}
	return SubscriberSeries{Mode: SeriesTop, Top: top}, nil
}

// String is the flag's spelling of s.
func (s SubscriberSeries) String() string {
	switch s.Mode {
	case SeriesTop:
		return SeriesTop + ":" + strconv.Itoa(s.Top)
	case "":
		return SeriesAuto
	}
	return s.Mode
}

// limit is how many subscribers may have series of their own when the
// relay's view holds viewSize: -1 for every one.
func (s SubscriberSeries) limit(viewSize int) int {
	switch s.Mode {
	case SeriesAll:
		return -1
	case SeriesNone:
		return 0
	case SeriesTop:
		return s.Top
	}
	if viewSize <= AutoAllUpTo {
		return -1
	}
	return AutoTop
}
