package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/relay-dev/relay/internal/tracing"
)

// ---- tracing: what relay's OpenTelemetry spans cost ----

// tracingRun is one pair of the tracing scenario: the throughput
// scenario's relay run with tracing off and with it on, one right after the
// other, each on a fresh server and relay, with the same events.
type tracingRun struct {
	pair    int
	onFirst bool // the run with tracing on went first in this pair
	off, on burstRun
	// What the OTLP endpoint received during each run, from before its
	// relay started until it had stopped (its last batch is flushed as it
	// stops): the off run's should be nothing at all.
	offOTLP, onOTLP otlpCounts
}

// ratio is the deliveries/s with tracing on over those with it off: the
// scenario's figure, 1 when tracing costs nothing.
func (r tracingRun) ratio() float64 { return rateOver(r.on, r.off) }

// spansPerDelivery is the spans the endpoint received during the on run
// per delivery: about 2 (a fan-out span and an attempt span for each
// event) when no span was dropped, less when the exporter's queue was full.
func (r tracingRun) spansPerDelivery() float64 {
	if r.on.delivered == 0 {
		return 0
	}
	return float64(r.onOTLP.spans) / float64(r.on.delivered)
}

// tracing runs -tracing-runs pairs of the throughput scenario's relay run,
// tracing off and on, alternating which goes first (off, on, then on,
// off…) so that the machine's drift reaches both. Tracing on is relay
// exporting to an OTLP/HTTP endpoint in this program, which decodes and
// counts what it gets; off is relay with no OTEL_* variable at all. Half
// the events of every run carry a traceparent, so that both of relay's
// paths are measured: a fan-out span continuing the event's trace and one
// starting a new one.
func (e *env) tracing(ctx context.Context) (out []tracingRun, err error) {
	cfg := e.cfg
	ep, err := startOTLPEndpoint()
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, ep.close()) }()
	fmt.Fprintf(os.Stderr, "tracing: %d × (relay with tracing off, then on; on first in every other pair), %d events each, half with a traceparent, %d in flight; OTLP endpoint %s\n",
		cfg.tracingRuns, cfg.throughputEvents, cfg.throughputInFlight, ep.url)
	onEnv := []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + ep.url, "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf"}
	for i := 1; i <= cfg.tracingRuns && ctx.Err() == nil; i++ {
		r := tracingRun{pair: i, onFirst: i%2 == 0}
		var tps []string // the same events, both ways
		if tps, err = traceparents(cfg.throughputEvents); err != nil {
			return out, fmt.Errorf("tracing pair %d: %w", i, err)
		}
		order := []bool{false, true}
		if r.onFirst {
			order = []bool{true, false}
		}
		for _, on := range order {
			if ctx.Err() != nil {
				return out, ctx.Err() // a pair cut short has no ratio
			}
			what, tag, relayEnv := "off", "f", []string(nil)
			run, got := &r.off, &r.offOTLP
			if on {
				what, tag, relayEnv = "on", "n", onEnv
				run, got = &r.on, &r.onOTLP
			}
			before := ep.received()
			*run, err = e.burstOne(ctx, i, burstSpec{
				name: fmt.Sprintf("trace%s%02d", what, i), prefix: fmt.Sprintf("%str%s%02d-", eventPrefix, tag, i),
				events: cfg.throughputEvents, inFlight: cfg.throughputInFlight, timeout: cfg.timeout,
				env: relayEnv, header: traceparentHeader(tps),
			})
			*got = ep.received().minus(before) // burstOne has stopped the relay: its spans are in
			if err != nil {
				return out, fmt.Errorf("tracing pair %d, tracing %s: %w", i, what, err)
			}
			cpu := "relay CPU not read"
			if per, ok := run.cpuPer1000(); ok {
				cpu = fmt.Sprintf("relay CPU %.2fs (%.3fs per 1,000)", run.cpu.Seconds(), per)
			}
			fmt.Fprintf(os.Stderr, "  [%d] tracing %-3s: %d of %d delivered in %.2fs (%.0f/s, publish %.2fs); %s; the endpoint got %d spans (%d fan-out, %d attempt) in %d exports, %d refused\n",
				i, what, run.delivered, run.events, run.total.Seconds(), run.rate(), run.publish.Seconds(), cpu,
				got.spans, got.fanout, got.attempt, got.requests, got.refused)
		}
		fmt.Fprintf(os.Stderr, "  [%d] on/off %.2f, spans per delivery %.2f\n", i, r.ratio(), r.spansPerDelivery())
		out = append(out, r)
	}
	return out, ctx.Err()
}

// traceparents is a W3C traceparent for every other one of n events (the
// even ones; "" for the rest): version 00, a random trace id and parent id
// each, sampled (flags 01), so that relay's default sampler
// (parentbased_always_on) samples them as it samples the events without
// one, and both carry the same spans.
func traceparents(n int) ([]string, error) {
	out := make([]string, n)
	var ids [24]byte // the trace id's 16 bytes, then the parent id's 8
	for i := 0; i < n; i += 2 {
		for {
			if _, err := rand.Read(ids[:]); err != nil {
				return nil, fmt.Errorf("a random traceparent: %w", err)
			}
			if !allZeroBytes(ids[:16]) && !allZeroBytes(ids[16:]) { // all-zero ids are invalid
				break
			}
		}
		out[i] = "00-" + hex.EncodeToString(ids[:16]) + "-" + hex.EncodeToString(ids[16:]) + "-01"
	}
	return out, nil
}

// allZeroBytes reports whether b has only zeros: a trace id or span id
// the W3C specification calls invalid.
func allZeroBytes(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// traceparentHeader is a burstSpec's header for the traceparents tps: the
// i-th event's traceparent in a new header, none when tps[i] is "".
func traceparentHeader(tps []string) func(i int) nats.Header {
	return func(i int) nats.Header {
		if tps[i] == "" {
			return nil
		}
		return nats.Header{tracing.HeaderTraceparent: []string{tps[i]}}
	}
}

// burstRate is a run's deliveries/s as the pair tables show it, with how
// far it got when it gave up.
func burstRate(b burstRun) string {
	s := thousands(int64(b.rate()))
	if !b.complete {
		s += " (" + thousands(int64(b.delivered)) + " of " + thousands(int64(b.events)) + ", gave up)"
	}
	return s
}

// cpuCell is a run's relay CPU per 1,000 deliveries as the pair tables
// show it ("-" when it was not read), added to all when it was.
func cpuCell(b burstRun, all *[]float64) string {
	per, ok := b.cpuPer1000()
	if !ok {
		return "-"
	}
	*all = append(*all, per)
	return fmt.Sprintf("%.3f", per)
}

// pairOrder says which run of a pair went first, as the pair tables show
// it.
func pairOrder(onFirst bool) string {
	if onFirst {
		return "on, off"
	}
	return "off, on"
}

// pairRunNotes writes the lines below a pair table about one run of pair
// (which names it, "tracing on"): its duplicate requests and its stalls.
func pairRunNotes(sb *strings.Builder, pair int, which string, b burstRun) {
	if dup := b.requests - b.delivered; dup > 0 {
		fmt.Fprintf(sb, "- pair %d, %s: %d duplicate requests (same webhook-id twice)\n", pair, which, dup)
	}
	for _, s := range b.stalls {
		fmt.Fprintf(sb, "- pair %d, %s, relay stalled: %s\n", pair, which, s)
	}
}

// medianWorst is the median and the worst (lowest) of the pairs' ratios,
// as ratio reads one from a pair: the summary of the scenarios that run two
// variants in alternating pairs (tracing, filters); runs must not be empty.
func medianWorst[R any](runs []R, ratio func(R) float64) (med, worst float64) {
	ratios := collect(runs, ratio)
	return median(ratios), slices.Min(ratios)
}

// tracingTable is a row per pair (off, on, their ratio, the relay's CPU per
// 1,000 deliveries each way, what the endpoint received during the on run),
// the median and worst ratio over the pairs, and an error line for every
// span received while tracing was off.
func tracingTable(cfg config, runs []tracingRun) string {
	var sb strings.Builder
	where := "each on a fresh in-process server and relay"
	if cfg.embedded {
		where = "each on a fresh relay on its own embedded server"
	}
	fmt.Fprintf(&sb, "### Tracing: %s events to one subscriber, %d in flight, relay with tracing off and on in turn, %s\n\n",
		thousands(int64(cfg.throughputEvents)), cfg.throughputInFlight, where)
	fmt.Fprintf(&sb, "The throughput scenario's relay run (`--rate 0 --max-in-flight %d`, events on EVENTS), half of the events with a `traceparent` (sampled), "+
		"half without. Off: no OTEL_* variable in relay's environment. On: `OTEL_EXPORTER_OTLP_ENDPOINT` set to an OTLP/HTTP endpoint in this program "+
		"(protobuf), which decodes every export and counts its spans. The pairs alternate which goes first (off, on, then on, off, …). "+
		"Deliveries/s: delivered ÷ (last arrival − first publish); spans: what the endpoint received from the on run's relay, its flush at its stop included.\n\n",
		cfg.throughputInFlight)
	sb.WriteString("| pair | order | off, deliveries/s | on, deliveries/s | on / off | off, relay CPU s per 1,000 deliveries | on, relay CPU s per 1,000 deliveries " +
		"| on, spans (fan-out / attempt) | on, spans / delivery | on, exports / KB |\n")
	sb.WriteString("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	var offCPU, onCPU []float64
	for _, r := range runs {
		fmt.Fprintf(&sb, "| %d | %s | %s | %s | %.2f | %s | %s | %s (%s / %s) | %.2f | %s / %.0f |\n",
			r.pair, pairOrder(r.onFirst), burstRate(r.off), burstRate(r.on), r.ratio(), cpuCell(r.off, &offCPU), cpuCell(r.on, &onCPU),
			thousands(r.onOTLP.spans), thousands(r.onOTLP.fanout), thousands(r.onOTLP.attempt), r.spansPerDelivery(),
			thousands(r.onOTLP.requests), float64(r.onOTLP.bytes)/1000)
	}
	sb.WriteString("\n")
	med, worst := medianWorst(runs, tracingRun.ratio)
	fmt.Fprintf(&sb, "- on / off, median: **%.2f** (worst %.2f, best %.2f, pairs: %d)\n",
		med, worst, slices.Max(collect(runs, tracingRun.ratio)), len(runs))
	fmt.Fprintf(&sb, "- median deliveries/s: off %s, on %s",
		thousands(int64(median(collect(runs, func(r tracingRun) float64 { return r.off.rate() })))),
		thousands(int64(median(collect(runs, func(r tracingRun) float64 { return r.on.rate() })))))
	if len(offCPU) > 0 && len(onCPU) > 0 {
		fmt.Fprintf(&sb, "; relay CPU per 1,000 deliveries, median: off %.3f s, on %.3f s", median(offCPU), median(onCPU))
	}
	sb.WriteString("\n")
	for _, r := range runs {
		for _, x := range []struct {
			name string
			b    burstRun
			got  otlpCounts
		}{{"off", r.off, r.offOTLP}, {"on", r.on, r.onOTLP}} {
			if x.name == "off" && x.got.spans+x.got.requests > 0 {
				fmt.Fprintf(&sb, "- **error**: pair %d, tracing off: the endpoint received %s spans in %s exports; want none\n",
					r.pair, thousands(x.got.spans), thousands(x.got.requests))
			}
			if x.name == "on" && x.got.spans == 0 {
				fmt.Fprintf(&sb, "- **error**: pair %d, tracing on: the endpoint received no span\n", r.pair)
			}
			if x.got.refused > 0 {
				fmt.Fprintf(&sb, "- **error**: pair %d, tracing %s: the endpoint refused %s requests (see the relay's log)\n",
					r.pair, x.name, thousands(x.got.refused))
			}
			pairRunNotes(&sb, r.pair, "tracing "+x.name, x.b)
		}
	}
	return sb.String()
}
