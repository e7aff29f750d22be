package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/sourcegraph/conc/pool"

	"github.com/relay-dev/relay/internal/filter"
)

// ---- filters: what content filters cost the fan-out ----

// filtersExpr is every subscriber's --filter in the runs with filters: it
// reads the body three ways (a string compared, a number compared, a field
// tested for), so that each evaluation walks the parsed body as a real
// filter would, and it is true of filterBody's bodies, so that both
// variants deliver the same requests and only the evaluation differs.
const filtersExpr = `body.status == "paid" && body.amount > 100 && has(body.customer)`

// filtersType is the event type of the scenario's subscribers and events
// (events.flt): no other scenario publishes it.
const filtersType = "flt"

// filtersPrefix starts the ids of the scenario's subscribers; no other
// subscriber of this program starts with it, so that the receiver's counts
// by prefix are theirs alone.
const filtersPrefix = "flt"

// The body the filter reads: its fields first, then a pad that brings it
// to the size asked for.
const (
	filterBodyHead = `{"status":"paid","amount":150,"customer":{"id":"c1"},"pad":"`
	filterBodyTail = `"}`
)

// filterBodyMin is the smallest body filterBody makes: its fields with an
// empty pad. -filters-payloads refuses a smaller size.
const filterBodyMin = len(filterBodyHead) + len(filterBodyTail)

// filterBody is a JSON body of exactly n bytes that filtersExpr is true of:
// {"status":"paid","amount":150,"customer":{"id":"c1"},"pad":"xxx…"}. The
// pad makes it the size of a real event without adding fields, so the
// filter reads what it reads at any size and the size measures what
// parsing a larger body costs. An n under filterBodyMin is an error.
func filterBody(n int) ([]byte, error) {
	if n < filterBodyMin {
		return nil, fmt.Errorf("a filter body of %d bytes: the fields alone take %d", n, filterBodyMin)
	}
	return []byte(filterBodyHead + strings.Repeat("x", n-filterBodyMin) + filterBodyTail), nil
}

// checkFilterBody compiles filtersExpr as relay does and evaluates it over
// body as an event of the scenario's type: a body it is not true of would
// make the two variants deliver different requests, so the scenario stops
// before its first run rather than measure that.
func checkFilterBody(body []byte) error {
	f, err := filter.Compile(filtersExpr)
	if err != nil {
		return fmt.Errorf("compiling the filter %s: %w", filtersExpr, err)
	}
	if r := f.Match(filter.NewEvent(filtersType, nil, body)); r != filter.Matched {
		return fmt.Errorf("the filter %s is %s on the %d-byte body, want %s", filtersExpr, r, len(body), filter.Matched)
	}
	return nil
}

// filterEvaluations is the growth of one relay's
// relay_filter_evaluations_total over a measured run, by result: the
// check that filters were really evaluated (matched = events ×
// subscribers), and only where they were set.
type filterEvaluations struct {
	matched, notMatched, notJSON, failed int64
}

// others is every evaluation that did not match: none when every filter
// was true of every event, as filterBody's bodies make it.
func (f filterEvaluations) others() int64 { return f.notMatched + f.notJSON + f.failed }

// total is every evaluation, whatever its result: none in a run without
// filters.
func (f filterEvaluations) total() int64 { return f.matched + f.others() }

// minus is what was counted between before and f, before scraped first.
func (f filterEvaluations) minus(before filterEvaluations) filterEvaluations {
	return filterEvaluations{
		matched: f.matched - before.matched, notMatched: f.notMatched - before.notMatched,
		notJSON: f.notJSON - before.notJSON, failed: f.failed - before.failed,
	}
}

// filtersVariant is one run of the filters scenario: a fresh server and
// relay, every event to every subscriber, the subscribers with filtersExpr
// or without any filter.
type filtersVariant struct {
	// fan counts deliveries (events × subscribers): delivered ÷ (last
	// arrival at any subscriber − first publish), and the relay's CPU from
	// the first publish to the end of the wait.
	fan        burstRun
	complete   int // subscribers that got every event
	fewest     int // distinct webhook-ids at the subscriber that got the fewest
	duplicates int // requests beyond the distinct webhook-ids, over all subscribers
	// evaluations is what the relay's /metrics counted over the measured
	// run: a scrape after the warm-up and one once everything arrived.
	evaluations filterEvaluations
}

// filtersRun is one pair of the filters scenario at one body size: the
// same events to the same number of subscribers without filters and with
// them, one run right after the other, each on a fresh server and relay.
type filtersRun struct {
	pair                int
	payload             int // the body's bytes
	subscribers, events int
	withFirst           bool // the run with filters went first in this pair
	without, with       filtersVariant
}

// ratio is the deliveries/s with filters over those without: the
// scenario's figure, 1 when filters cost nothing (the target is ≥ 0.8).
func (r filtersRun) ratio() float64 { return rateOver(r.with.fan, r.without.fan) }

// wantMatched is what relay_filter_evaluations_total{result="matched"}
// must grow by in the run with filters: one evaluation for each copy.
func (r filtersRun) wantMatched() int64 { return int64(r.events) * int64(r.subscribers) }

// filters runs -filters-runs pairs for each size of -filters-payloads: the
// fan-out of -filters-events to -fanout-subscribers subscribers without a
// filter and with filtersExpr, alternating which goes first (without,
// with, then with, without…) so that the machine's drift reaches both.
// Both variants publish the same bodies, which the filter is true of, so
// both deliver the same requests and the ratio is what evaluating the
// filters (and parsing each body once for them) costs the fan-out.
func (e *env) filters(ctx context.Context) (out []filtersRun, err error) {
	cfg := e.cfg
	body := e.body
	defer func() { e.body = body }()
	fmt.Fprintf(os.Stderr, "filters: %d × (fan-out without filters, then with; with first in every other pair) for each of %v bytes, %d events to each of %d subscribers; filter %s\n",
		cfg.filtersRuns, cfg.filtersPayloads, cfg.filtersEvents, cfg.fanoutSubscribers, filtersExpr)
	for _, size := range cfg.filtersPayloads {
		if e.body, err = filterBody(size); err != nil {
			return out, err
		}
		if err := checkFilterBody(e.body); err != nil {
			return out, err
		}
		for i := 1; i <= cfg.filtersRuns && ctx.Err() == nil; i++ {
			r := filtersRun{pair: i, payload: size, subscribers: cfg.fanoutSubscribers, events: cfg.filtersEvents, withFirst: i%2 == 0}
			order := []bool{false, true}
			if r.withFirst {
				order = []bool{true, false}
			}
			for _, with := range order {
				if ctx.Err() != nil {
					return out, ctx.Err() // a pair cut short has no ratio
				}
				what, v := "without", &r.without
				if with {
					what, v = "with", &r.with
				}
				*v, err = e.filtersOne(ctx, i, size, with)
				if err != nil {
					return out, fmt.Errorf("filters, %d bytes, pair %d, %s filters: %w", size, i, what, err)
				}
				cpu := "relay CPU not read"
				if per, ok := v.fan.cpuPer1000(); ok {
					cpu = fmt.Sprintf("relay CPU %.2fs (%.3fs per 1,000)", v.fan.cpu.Seconds(), per)
				}
				fmt.Fprintf(os.Stderr, "  [%d] %-7s filters: %d of %d deliveries in %.2fs (%.0f/s, publish %.2fs); %s; %d of %d subscribers got every event, %d duplicate requests; filter evaluations %d matched, %d other\n",
					i, what, v.fan.delivered, v.fan.events, v.fan.total.Seconds(), v.fan.rate(), v.fan.publish.Seconds(), cpu,
					v.complete, r.subscribers, v.duplicates, v.evaluations.matched, v.evaluations.others())
			}
			fmt.Fprintf(os.Stderr, "  [%d] with / without %.2f\n", i, r.ratio())
			out = append(out, r)
		}
	}
	return out, ctx.Err()
}

// filtersOne is one run on a fresh server and relay: -fanout-subscribers
// subscribers on events.flt (--rate 0 --max-in-flight 64, with
// --filter filtersExpr when with), a warm-up of 10 events to each, then
// -filters-events of e.body, each to every subscriber. pair and size name
// the run's stack and its ids.
func (e *env) filtersOne(ctx context.Context, pair, size int, with bool) (v filtersVariant, err error) {
	cfg := e.cfg
	what, tag := "without", "n"
	var extra []string
	if with {
		what, tag = "with", "w"
		extra = []string{"--filter", filtersExpr}
	}
	s, err := e.up(ctx, fmt.Sprintf("filters-%s-%d-%02d", what, size, pair))
	if err != nil {
		return v, err
	}
	defer func() { err = errors.Join(err, s.down()) }()
	prefix := fmt.Sprintf("%s%s%02d-", filtersPrefix, tag, pair) // the run's subscribers, at the receiver
	ids := make([]string, cfg.fanoutSubscribers)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s%04d", prefix, i)
	}
	defer func() {
		for _, id := range ids {
			e.rcv.forget(id)
		}
	}()
	// `relay sub add` a few at a time, as the fan-out scenario adds them.
	p := pool.New().WithErrors().WithMaxGoroutines(8).WithContext(ctx)
	for _, id := range ids {
		p.Go(func(ctx context.Context) error {
			return e.subAddAt(ctx, s, id, e.hook.URL+"/"+id, 0, unlimitedInFlight, filtersType, extra...)
		})
	}
	if err := p.Wait(); err != nil {
		return v, fmt.Errorf("adding the subscribers: %w", err)
	}
	delivered := func() int { return e.rcv.distinctWithPrefix(prefix) }

	// A warm-up, not measured: connections opened, caches filled, and every
	// subscriber (its filter with it) known to the fan-out.
	warm := min(cfg.filtersEvents, 10)
	evPrefix := fmt.Sprintf("%sfl%s%02d-", eventPrefix, tag, pair)
	if err := e.publish(ctx, s, filtersType, evPrefix+"w-", warm); err != nil {
		return v, fmt.Errorf("warm-up: %w", err)
	}
	if err := s.waitUntil(ctx, "filters warm-up", cfg.timeout, func() (bool, error) {
		return delivered() >= warm*len(ids), nil
	}, func() string {
		return fmt.Sprintf("%d of %d arrived", delivered(), warm*len(ids))
	}); err != nil {
		return v, err
	}
	for _, id := range ids {
		e.rcv.forget(id)
	}

	before, err := scrapeFilterEvaluations(ctx, s.relay.metrics)
	if err != nil {
		return v, err
	}
	var start time.Time
	v.fan, err = e.measure(ctx, s, cfg.filtersEvents*len(ids), func() error {
		start = time.Now()
		return e.publish(ctx, s, filtersType, evPrefix, cfg.filtersEvents)
	}, delivered)
	v.fewest = cfg.filtersEvents
	var last time.Time
	for _, id := range ids {
		snap := e.rcv.snapshot(id)
		if snap.distinct >= cfg.filtersEvents {
			v.complete++
		}
		v.fewest = min(v.fewest, snap.distinct)
		v.duplicates += snap.requests - snap.distinct
		v.fan.requests += snap.requests
		if snap.last.After(last) {
			last = snap.last
		}
	}
	if err != nil {
		return v, fmt.Errorf("%d of %d deliveries; %d of %d subscribers got every event, the fewest %d: %w",
			v.fan.delivered, v.fan.events, v.complete, len(ids), v.fewest, err)
	}
	v.fan.total = last.Sub(start) // the last arrival, not the poll that saw it
	v.fan.complete = true
	after, err := scrapeFilterEvaluations(ctx, s.relay.metrics)
	if err != nil {
		return v, err
	}
	v.evaluations = after.minus(before)
	return v, nil
}

// scrapeFilterEvaluations reads relay_filter_evaluations_total from the
// relay's /metrics at addr, by result. A relay that has evaluated nothing
// yet still exposes its counters at zero.
func scrapeFilterEvaluations(ctx context.Context, addr string) (filterEvaluations, error) {
	var out filterEvaluations
	resp, err := getMetrics(ctx, addr)
	if err != nil {
		return out, fmt.Errorf("scraping relay_filter_evaluations_total: %w", err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return out, fmt.Errorf("scraping relay_filter_evaluations_total: %w", err)
	}
	fam, ok := fams["relay_filter_evaluations_total"]
	if !ok {
		return out, errors.New("scraping relay_filter_evaluations_total: the relay does not expose it (built before content filters?)")
	}
	for _, m := range fam.GetMetric() {
		n := int64(m.GetCounter().GetValue())
		for _, l := range m.GetLabel() {
			if l.GetName() != "result" {
				continue
			}
			switch l.GetValue() {
			case filter.Matched.String():
				out.matched += n
			case filter.NotMatched.String():
				out.notMatched += n
			case filter.NotJSON.String():
				out.notJSON += n
			default: // error, and any result a later relay adds: not a match
				out.failed += n
			}
		}
	}
	return out, nil
}

// filtersTable is a row per pair and body size (deliveries/s without and
// with filters, their ratio, the relay's CPU per 1,000 deliveries each
// way, the per-subscriber check, the filter evaluations of the run with
// filters), then per size the median and worst ratio over the pairs, and
// a line for every check that failed.
func filtersTable(cfg config, runs []filtersRun) string {
	var sb strings.Builder
	where := "each on a fresh in-process server and relay"
	if cfg.embedded {
		where = "each on a fresh relay on its own embedded server"
	}
	r0 := runs[0]
	fmt.Fprintf(&sb, "### Filters: %s events to each of %s subscribers on one event type (--rate 0 --max-in-flight %d), without and with a content filter in turn, %s\n\n",
		thousands(int64(r0.events)), thousands(int64(r0.subscribers)), unlimitedInFlight, where)
	fmt.Fprintf(&sb, "With: every subscriber has `--filter '%s'`, true of every event, so both runs deliver the same requests. "+
		"Without: no filter. The same JSON bodies both ways (`{\"status\":\"paid\",\"amount\":150,\"customer\":{\"id\":\"c1\"},\"pad\":\"xxx…\"}`, padded to the size), "+
		"after a warm-up of 10 events. The pairs alternate which goes first (without, with, then with, without, …). "+
		"Deliveries/s: delivered ÷ (last arrival at any subscriber − first publish). "+
		"Evaluations: the growth of the relay's `relay_filter_evaluations_total` over the measured run, `matched` and the other results together; want events × subscribers matched and no other.\n\n",
		filtersExpr)
	sb.WriteString("| body, bytes | pair | order | without, deliveries/s | with, deliveries/s | with ÷ without | without, relay CPU s per 1,000 deliveries | with, relay CPU s per 1,000 deliveries " +
		"| got every event, without / with | duplicate requests, without / with | with, evaluations matched | with, other results |\n")
	sb.WriteString("| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	cpu := func(b burstRun) string {
		if per, ok := b.cpuPer1000(); ok {
			return fmt.Sprintf("%.3f", per)
		}
		return "-"
	}
	for _, r := range runs {
		order := "without, with"
		if r.withFirst {
			order = "with, without"
		}
		fmt.Fprintf(&sb, "| %s | %d | %s | %s | %s | **%.2f** | %s | %s | %d / %d of %d | %d / %d | %s | %s |\n",
			thousands(int64(r.payload)), r.pair, order, thousands(int64(r.without.fan.rate())), thousands(int64(r.with.fan.rate())), r.ratio(),
			cpu(r.without.fan), cpu(r.with.fan), r.without.complete, r.with.complete, r.subscribers,
			r.without.duplicates, r.with.duplicates, thousands(r.with.evaluations.matched), thousands(r.with.evaluations.others()))
	}
	sb.WriteString("\n")
	for _, size := range cfg.filtersPayloads {
		var at []filtersRun
		for _, r := range runs {
			if r.payload == size {
				at = append(at, r)
			}
		}
		if len(at) == 0 {
			continue
		}
		med, worst := medianWorst(at, filtersRun.ratio)
		fmt.Fprintf(&sb, "- %s bytes: with ÷ without, median **%.2f** (worst %.2f, best %.2f, pairs: %d); median deliveries/s without %s, with %s",
			thousands(int64(size)), med, worst, slices.Max(collect(at, filtersRun.ratio)), len(at),
			thousands(int64(median(collect(at, func(r filtersRun) float64 { return r.without.fan.rate() })))),
			thousands(int64(median(collect(at, func(r filtersRun) float64 { return r.with.fan.rate() })))))
		var withoutCPU, withCPU []float64
		for _, r := range at {
			if per, ok := r.without.fan.cpuPer1000(); ok {
				withoutCPU = append(withoutCPU, per)
			}
			if per, ok := r.with.fan.cpuPer1000(); ok {
				withCPU = append(withCPU, per)
			}
		}
		if len(withoutCPU) > 0 && len(withCPU) > 0 {
			fmt.Fprintf(&sb, "; relay CPU per 1,000 deliveries, median: without %.3f s, with %.3f s", median(withoutCPU), median(withCPU))
		}
		sb.WriteString("\n")
	}
	for _, r := range runs {
		if got, want := r.with.evaluations.matched, r.wantMatched(); got != want {
			fmt.Fprintf(&sb, "- **error**: %s bytes, pair %d, with filters: %s evaluations matched, want %s (events × subscribers)\n",
				thousands(int64(r.payload)), r.pair, thousands(got), thousands(want))
		}
		if o := r.with.evaluations; o.others() > 0 {
			fmt.Fprintf(&sb, "- **error**: %s bytes, pair %d, with filters: %s evaluations did not match (not_matched %s, body_not_json %s, error %s), want none\n",
				thousands(int64(r.payload)), r.pair, thousands(o.others()), thousands(o.notMatched), thousands(o.notJSON), thousands(o.failed))
		}
		if n := r.without.evaluations.total(); n > 0 {
			fmt.Fprintf(&sb, "- **error**: %s bytes, pair %d, without filters: the relay evaluated %s filters, want none\n",
				thousands(int64(r.payload)), r.pair, thousands(n))
		}
		for _, x := range []struct {
			name string
			v    filtersVariant
		}{{"without", r.without}, {"with", r.with}} {
			if x.v.complete < r.subscribers {
				fmt.Fprintf(&sb, "- %s bytes, pair %d, %s filters: %s of %s subscribers got every event (the fewest: %s of %s)\n",
					thousands(int64(r.payload)), r.pair, x.name, thousands(int64(x.v.complete)), thousands(int64(r.subscribers)),
					thousands(int64(x.v.fewest)), thousands(int64(r.events)))
			}
		}
	}
	return sb.String()
}
