package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/relay-dev/relay/streams"
)

// The tables are markdown, ready for bench/README.md.

// burstTable is a row per burst run and the worst and median over the
// runs, with the runs that stalled or received duplicates listed below.
func burstTable(cfg config, runs []burstRun) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "### Burst: %s events to one subscriber (--rate 0 --max-in-flight %d), a fresh server and relay per run\n\n",
		thousands(int64(cfg.burstEvents)), cfg.burstInFlight)
	sb.WriteString("| run | delivered | publish, s | all delivered, s | deliveries/s | worst idle gap, s | gap at, s | extra writes/delivered | puts | bring-backs | parks |\n")
	sb.WriteString("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, r := range runs {
		delivered := thousands(int64(r.delivered))
		if !r.complete {
			delivered += " of " + thousands(int64(r.events)) + " (gave up)"
		}
		fmt.Fprintf(&sb, "| %d | %s | %.2f | %.2f | %s | %.3f | +%.2f | %.3f | %s | %s | %s |\n",
			r.run, delivered, r.publish.Seconds(), r.total.Seconds(), thousands(int64(r.rate())),
			r.gap.Seconds(), r.gapAt.Seconds(), r.extraPer(),
			thousands(r.counts.puts), thousands(r.counts.bringBacks), thousands(r.counts.parks))
	}
	total := collect(runs, func(r burstRun) float64 { return r.total.Seconds() })
	rate := collect(runs, burstRun.rate)
	gap := collect(runs, func(r burstRun) float64 { return r.gap.Seconds() })
	extra := collect(runs, burstRun.extraPer)
	stalls := 0
	for _, r := range runs {
		if r.gap > cfg.stallGap || !r.complete {
			stalls++
		}
	}
	sb.WriteString("\n| over the runs | worst | median |\n| --- | ---: | ---: |\n")
	fmt.Fprintf(&sb, "| all delivered, s | %.2f | %.2f |\n", slices.Max(total), median(total))
	fmt.Fprintf(&sb, "| deliveries/s | %s | %s |\n", thousands(int64(slices.Min(rate))), thousands(int64(median(rate))))
	fmt.Fprintf(&sb, "| worst idle gap, s | %.3f | %.3f |\n", slices.Max(gap), median(gap))
	fmt.Fprintf(&sb, "| extra JetStream writes per delivered message | %.3f | %.3f |\n", slices.Max(extra), median(extra))
	fmt.Fprintf(&sb, "\nruns with an idle gap > %v (or not all delivered): %d of %d\n", cfg.stallGap, stalls, len(runs))
	for _, r := range runs {
		if dup := r.requests - r.delivered; dup > 0 {
			fmt.Fprintf(&sb, "- run %d: %d duplicate requests (same webhook-id twice)\n", r.run, dup)
		}
	}
	for _, r := range runs {
		for _, s := range r.stalls {
			fmt.Fprintf(&sb, "- run %d stalled: %s\n", r.run, s)
		}
	}
	return sb.String()
}

// writesTable is the backlog's extra writes in its two phases (until it
// has left the lane, then the window) and their sum per message.
func writesTable(r writesResult) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "### Extra JetStream writes: a backlog of %s events to one subscriber at --rate %g\n\n",
		thousands(int64(r.events)), r.rate)
	fmt.Fprintf(&sb, "Published in %.1f s; fanned out %.1f s and out of its lane %.1f s after the first publish; then watched for %v.\n\n",
		r.publish.Seconds(), r.fanout.Seconds(), r.overflow.Seconds(), r.window)
	sb.WriteString("| phase | messages | extra writes | per message | puts to overflow | bring-backs | parks | other | in overflow after |\n")
	sb.WriteString("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	fmt.Fprintf(&sb, "| backlog so far (publish → out of the lane; %s delivered meanwhile) | %s events | %s | %.3f | %s | %s | %s | %s | %s |\n",
		thousands(int64(r.deliveredBacklog)), thousands(int64(r.events)), thousands(r.extraBacklog), r.perBacklogMsg(),
		thousands(r.countsBacklog.puts), thousands(r.countsBacklog.bringBacks), thousands(r.countsBacklog.parks),
		thousands(r.countsBacklog.other+r.countsBacklog.retries), thousands(int64(r.overflowStart)))
	fmt.Fprintf(&sb, "| window of %v (%.1f delivered/s) | %s delivered | %s | %.3f | %s | %s | %s | %s | %s |\n",
		r.window, float64(r.deliveredWindow)/r.window.Seconds(), thousands(int64(r.deliveredWindow)),
		thousands(r.extraWindow), r.perDelivered(),
		thousands(r.countsWindow.puts), thousands(r.countsWindow.bringBacks), thousands(r.countsWindow.parks),
		thousands(r.countsWindow.other+r.countsWindow.retries), thousands(int64(r.overflowEnd)))
	fmt.Fprintf(&sb, "\nwrites per message, backlog so far + per delivered in the window: %.3f + %.3f = **%.3f**",
		r.perBacklogMsg(), r.perDelivered(), r.perBacklogMsg()+r.perDelivered())
	if dup := r.requests - r.deliveredBacklog - r.deliveredWindow; dup > 0 {
		fmt.Fprintf(&sb, "; %d duplicate requests", dup)
	}
	if d := r.countsBacklog.dropped + r.countsWindow.dropped; d > 0 {
		fmt.Fprintf(&sb, "; the write counter missed %d messages", d)
	}
	sb.WriteString("\n")
	return sb.String()
}

// backlogTable is the backlog's timings and the relay's memory, then the
// lane-mate's latency before, beside and during it.
func backlogTable(r backlogResult) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "### A backlog of %s events for one subscriber at --rate %g\n\n", thousands(int64(r.events)), r.rate)
	sb.WriteString("| what | figure |\n| --- | ---: |\n")
	fmt.Fprintf(&sb, "| published (PubAcks), s | %.1f |\n", r.publish.Seconds())
	fmt.Fprintf(&sb, "| fanned out (fanout: nothing pending or unacked), s after the first publish | %.1f |\n", r.fanout.Seconds())
	fmt.Fprintf(&sb, "| out of its lane (%s: nothing pending), s after the first publish | %.1f |\n", streams.LaneConsumer(r.lane), r.overflow.Seconds())
	fmt.Fprintf(&sb, "| in overflow / delivered, when the RSS was read | %s / %s |\n", thousands(int64(r.inOverflow)), thousands(int64(r.delivered)))
	fmt.Fprintf(&sb, "| relay VmRSS / VmHWM before the backlog, MB | %.0f / %.0f |\n", mb(r.rssBefore), mb(r.hwmBefore))
	fmt.Fprintf(&sb, "| relay VmRSS / VmHWM with the backlog, settled, MB | **%.0f** / %.0f |\n", mb(r.rss), mb(r.hwm))
	fmt.Fprintf(&sb, "| relay VmHWM at the end, MB | %.0f |\n", mb(r.hwmEnd))
	fmt.Fprintf(&sb, "\n### Its lane-mate %s (lane %s, --rate 0): %d events at %g/s, publish → arrival\n\n",
		r.mate, r.lane, r.mateN, r.mateRate)
	sb.WriteString("| | arrived | p50, ms | p99, ms | max, ms |\n| --- | ---: | ---: | ---: | ---: |\n")
	for _, row := range []struct {
		name string
		l    latency
	}{{"baseline (no backlog, same relay)", r.baseline}, {"beside the backlog", r.beside}} {
		fmt.Fprintf(&sb, "| %s | %d of %d | %.1f | %.1f | %.1f |\n", row.name, row.l.arrived, row.l.published,
			ms(row.l.p50), ms(row.l.p99), ms(row.l.max))
	}
	fmt.Fprintf(&sb, "| beside − baseline | | %+.1f | **%+.1f** | %+.1f |\n",
		ms(r.beside.p50-r.baseline.p50), ms(r.beside.p99-r.baseline.p99), ms(r.beside.max-r.baseline.max))
	fmt.Fprintf(&sb, "| while the backlog was leaving the lane (fan-out done, %s still pending) | %d of %d | %.1f | %.1f | %.1f |\n",
		streams.LaneConsumer(r.lane), r.during.arrived, r.during.published, ms(r.during.p50), ms(r.during.p99), ms(r.during.max))
	return sb.String()
}

// collect maps f over xs, for the statistics over the runs.
func collect[T any](xs []T, f func(T) float64) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = f(x)
	}
	return out
}

// median of xs, which it does not reorder; xs must not be empty.
func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// thousands formats n with commas: 20,000.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var sb strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			sb.WriteByte(',')
		}
		sb.WriteRune(c)
	}
	if neg {
		return "-" + sb.String()
	}
	return sb.String()
}
