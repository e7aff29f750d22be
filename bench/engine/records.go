package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/relay-dev/relay/streams"
)

// ---- records: what recording every fan-out and attempt costs ----

// recordsSettle is how often the records scenario looks whether ATTEMPTS
// still grows after the last delivery.
const recordsSettle = 500 * time.Millisecond

// recordsRun is one pair of the records scenario: the throughput scenario's
// relay run with --record-attempts=false and with the default (records on),
// one right after the other, each on a fresh server and relay, with the
// same number of events.
type recordsRun struct {
	pair    int
	onFirst bool // the run with records went first in this pair
	off, on burstRun
	// What ATTEMPTS held after the on run: its messages and bytes (the
	// server's count, subjects and its own overhead included), and after
	// the off run whether it existed at all.
	msgs, bytes uint64
	offStream   bool
}

// ratio is the deliveries/s with records over those without: the
// scenario's figure, 1 when recording costs nothing.
func (r recordsRun) ratio() float64 { return rateOver(r.on, r.off) }

// bytesPerRecord is what one record weighs in ATTEMPTS, on average: here
// the attempts' (one per event), a fan-out to one subscriber having none.
func (r recordsRun) bytesPerRecord() float64 {
	if r.msgs == 0 {
		return 0
	}
	return float64(r.bytes) / float64(r.msgs)
}

// records runs -records-runs pairs of the throughput scenario's relay run,
// records off and on, alternating which goes first.
func (e *env) records(ctx context.Context) (out []recordsRun, err error) {
	cfg := e.cfg
	fmt.Fprintf(os.Stderr, "records: %d × (relay with --record-attempts=false, then with records; records first in every other pair), %d events each, %d in flight\n",
		cfg.recordsRuns, cfg.throughputEvents, cfg.throughputInFlight)
	for i := 1; i <= cfg.recordsRuns && ctx.Err() == nil; i++ {
		r := recordsRun{pair: i, onFirst: i%2 == 0}
		order := []bool{false, true}
		if r.onFirst {
			order = []bool{true, false}
		}
		for _, on := range order {
			if ctx.Err() != nil {
				return out, ctx.Err() // a pair cut short has no ratio
			}
			what, tag, args := "off", "f", []string{"--record-attempts=false"}
			run := &r.off
			if on {
				what, tag, args = "on", "n", nil
				run = &r.on
			}
			*run, err = e.burstOne(ctx, i, burstSpec{
				name: fmt.Sprintf("rec%s%02d", what, i), prefix: fmt.Sprintf("%src%s%02d-", eventPrefix, tag, i),
				events: cfg.throughputEvents, inFlight: cfg.throughputInFlight, timeout: cfg.timeout,
				args: args,
				inspect: func(ctx context.Context, s *stack) error {
					st, err := s.js.Stream(ctx, streams.Attempts)
					if !on {
						r.offStream = err == nil
						return nil
					}
					if err != nil {
						return err
					}
					// The last records are written a moment after the
					// last delivery: wait until they stop coming.
					last := uint64(0)
					for {
						info, err := st.Info(ctx)
						if err != nil {
							return err
						}
						if info.State.Msgs == last && last > 0 {
							r.msgs, r.bytes = info.State.Msgs, info.State.Bytes
							return nil
						}
						last = info.State.Msgs
						if err := sleepCtx(ctx, s, recordsSettle); err != nil {
							return err
						}
					}
				},
			})
			if err != nil {
				return out, fmt.Errorf("records pair %d, records %s: %w", i, what, err)
			}
			cpu := "relay CPU not read"
			if per, ok := run.cpuPer1000(); ok {
				cpu = fmt.Sprintf("relay CPU %.2fs (%.3fs per 1,000)", run.cpu.Seconds(), per)
			}
			fmt.Fprintf(os.Stderr, "  [%d] records %-3s: %d of %d delivered in %.2fs (%.0f/s, publish %.2fs); %s\n",
				i, what, run.delivered, run.events, run.total.Seconds(), run.rate(), run.publish.Seconds(), cpu)
		}
		fmt.Fprintf(os.Stderr, "  [%d] on/off %.2f, ATTEMPTS %d records, %.0f bytes each\n", i, r.ratio(), r.msgs, r.bytesPerRecord())
		out = append(out, r)
	}
	return out, ctx.Err()
}

// recordsTable is a row per pair (off, on, their ratio, the relay's CPU per
// 1,000 deliveries each way, ATTEMPTS' records and bytes per record), the
// median and worst ratio, and an error line for an ATTEMPTS made with
// records off or a run with fewer records than deliveries.
func recordsTable(cfg config, runs []recordsRun) string {
	var sb strings.Builder
	where := "each on a fresh in-process server and relay"
	if cfg.embedded {
		where = "each on a fresh relay on its own embedded server"
	}
	fmt.Fprintf(&sb, "### Records: %s events to one subscriber, %d in flight, relay with `--record-attempts=false` and with records in turn, %s\n\n",
		thousands(int64(cfg.throughputEvents)), cfg.throughputInFlight, where)
	sb.WriteString("The throughput scenario's relay run (`--rate 0`, events on EVENTS). Off: `relay run --record-attempts=false` (no ATTEMPTS). " +
		"On: the default, an attempt record per event (a fan-out to one subscriber's lane has no record of its own). The pairs alternate which goes first. " +
		"Deliveries/s: delivered ÷ (last arrival − first publish); bytes per record: ATTEMPTS' bytes ÷ its messages once the last record is in, as the server counts them (subject and its own overhead included).\n\n")
	sb.WriteString("| pair | order | off, deliveries/s | on, deliveries/s | on / off | off, relay CPU s per 1,000 deliveries | on, relay CPU s per 1,000 deliveries | on, records | on, bytes per record |\n")
	sb.WriteString("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	var offCPU, onCPU []float64
	for _, r := range runs {
		fmt.Fprintf(&sb, "| %d | %s | %s | %s | %.2f | %s | %s | %s | %.0f |\n",
			r.pair, pairOrder(r.onFirst), burstRate(r.off), burstRate(r.on), r.ratio(), cpuCell(r.off, &offCPU), cpuCell(r.on, &onCPU),
			thousands(int64(r.msgs)), r.bytesPerRecord())
	}
	sb.WriteString("\n")
	med, worst := medianWorst(runs, recordsRun.ratio)
	fmt.Fprintf(&sb, "- on / off, median: **%.2f** (worst %.2f, best %.2f, pairs: %d); bytes per record, median: **%.0f** (largest %.0f)\n",
		med, worst, slices.Max(collect(runs, recordsRun.ratio)), len(runs),
		median(collect(runs, recordsRun.bytesPerRecord)), slices.Max(collect(runs, recordsRun.bytesPerRecord)))
	if len(offCPU) > 0 && len(onCPU) > 0 {
		fmt.Fprintf(&sb, "- relay CPU per 1,000 deliveries, median: off %.3f s, on %.3f s\n", median(offCPU), median(onCPU))
	}
	for _, r := range runs {
		if r.offStream {
			fmt.Fprintf(&sb, "- **error**: pair %d: ATTEMPTS exists after the run with --record-attempts=false\n", r.pair)
		}
		if r.msgs < uint64(r.on.delivered) {
			fmt.Fprintf(&sb, "- pair %d: %s records for %s deliveries, fewer than an attempt each (relay_attempt_records_lost_total counts those dropped and those seen refused)\n",
				r.pair, thousands(int64(r.msgs)), thousands(int64(r.on.delivered)))
		}
		pairRunNotes(&sb, r.pair, "records off", r.off)
		pairRunNotes(&sb, r.pair, "records on", r.on)
	}
	return sb.String()
}
