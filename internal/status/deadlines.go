package status

import (
	"context"
	"fmt"
	"math"

	"github.com/relay-dev/relay/internal/timeliness"
	"github.com/relay-dev/relay/streams"
)

// timelinessCounts reads the relay_timeliness counts whose keys match key
// (a subscriber id, or "*" for all), by subscriber id, in batched direct
// gets as [reader.bucketEntries] reads them. It makes no request when the
// bucket does not exist (relays older than it) or holds nothing (no event
// had a deadline), as its lookup said. A value that is not the relays'
// format was written around relay and is left out, as a subscriber
// without counts, rather than fail the whole report.
func (r *reader) timelinessCounts(ctx context.Context, key string) (map[string]timeliness.Counts, error) {
	if r.timeliness == nil || r.timeliness.CachedInfo().State.Msgs == 0 {
		return nil, nil
	}
	entries, err := r.bucketEntries(ctx, streams.TimelinessBucket, key)
	if err != nil {
		return nil, err
	}
	out := make(map[string]timeliness.Counts, len(entries))
	for id, e := range entries {
		if c, err := timeliness.Decode(e.value); err == nil {
			out[id] = c
		}
	}
	return out, nil
}

// inTime fills the deadline fields of row from its counts c.
func inTime(c timeliness.Counts, row *Subscriber) {
	row.Met, row.Missed = c.Met, c.Missed
	if ratio, ok := c.InTime(); ok {
		row.InTime = &ratio
	}
}

// FormatInTime writes the share of deliveries that met their deadline as
// `relay status` shows it, a percentage to a tenth such as "99.2%", or "-"
// when none was counted. Rounding never shows 100.0% while one was missed,
// nor 0.0% while one was met: a single late delivery in a million is what
// an operator looks for.
func FormatInTime(met, missed uint64) string {
	ratio, ok := timeliness.Counts{Met: met, Missed: missed}.InTime()
	if !ok {
		return "-"
	}
	tenths := math.Round(ratio * 1000)
	switch {
	case missed > 0 && tenths == 1000:
		tenths = 999
	case met > 0 && tenths == 0:
		tenths = 1
	}
	return fmt.Sprintf("%.1f%%", tenths/10)
}
