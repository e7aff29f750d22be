package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/internal/deliver"
)

// ---- latency: publish → arrival at a steady rate ----

// unlimitedInFlight is the --max-in-flight of the unlimited (--rate 0)
// subscribers of the latency, fan-out and isolation scenarios: the burst's
// default, so that their figures compare with the burst's and the
// throughput's.
const unlimitedInFlight = 64

// latencyWait is how long, after the last PubAck of a paced run, the
// arrivals are waited for; those still missing then are reported as such.
const latencyWait = 30 * time.Second

// The contenders of the latency scenario, as its rows and its JSON name
// them.
const (
	// latencyBaseline is the throughput scenario's simplest correct loop
	// (baselineSetup, signedLoop), measured at the same rates: its latency
	// is what this machine, the server, the client and the receiver cost
	// without relay, so that relay's own share shows as the difference.
	latencyBaseline = "baseline"
	// latencyTwoHop is the throughput scenario's two-hop loop (the
	// baseline with the fan-out's second JetStream hop, twoHopSpec): the
	// latency floor of any design that stores a copy per subscriber.
	latencyTwoHop = "two-hop"
	// latencyRelay is `relay run` with one subscriber.
	latencyRelay = "relay"
)

// latencyRun is one contender at one steady rate: how well the publisher
// kept its schedule and how long each event took from its publish call to
// its first arrival.
type latencyRun struct {
	contender string        // latencyBaseline, latencyTwoHop or latencyRelay
	server    string        // where its NATS server ran: "in-process", or "embedded" (relay with -embedded)
	rate      float64       // the schedule, events/s
	span      time.Duration // how long the schedule lasts (-latency-for)
	l         latency       // published, arrived, p50, p99, max
	p90       time.Duration // not in latency, which the lane-mate shares
	achieved  float64       // events/s actually published: (n−1) ÷ (last publish call − first)
	worstLag  time.Duration // the latest any publish call came after its scheduled time
	requests  int           // requests that reached the receiver, duplicates included
	distinct  int           // webhook-ids that reached the receiver
	// stages is where relay's time went in the measured run, from its
	// relay_delivery_stage_seconds (none for the loops).
	stages []stageFigure
}

// behind reports whether the publisher fell short of its schedule by more
// than 1%: then the latency was measured at the achieved rate, not the
// asked one, and the table says so.
func (r latencyRun) behind() bool { return r.achieved < 0.99*r.rate }

// latencyTarget is what a paced run needs of a contender: the server and
// subject it publishes to, the receiver and subscriber id its deliveries
// reach, and how to tell that it has stopped delivering.
type latencyTarget struct {
	contender, server string
	s                 *stack
	subject           string
	rcv               *receiver
	id                string
	// metrics is the relay's /metrics address, whose stage histogram says
	// where the time went; "" for the loops.
	metrics string
	// dead is why the contender can no longer deliver, nil while it can: a
	// run whose deliveries are missing then fails instead of counting them
	// as missing.
	dead func() error
}

// latency measures publish → first arrival at each rate of -latency-rates
// in turn, for -latency-for each: the question is how long an event waits
// in relay when the relay is not saturated, which a burst cannot tell. At
// each rate the baseline goes first (the throughput scenario's simplest
// loop, on a fresh in-process server), then relay (one subscriber, --rate 0
// --max-in-flight 64, on the one relay of the scenario), so that the
// machine's noise at that moment reaches both; the publisher, the payload
// and the Nats-Msg-Ids are the same. Each run starts with an unmeasured
// second at its rate, so that connections, caches and the pulls are warm.
// The result has a row per contender and rate, in the order they ran.
func (e *env) latency(ctx context.Context) (out []latencyRun, err error) {
	cfg := e.cfg
	fmt.Fprintf(os.Stderr, "latency: the simplest loop, then one subscriber (--rate 0 --max-in-flight %d), events at %s/s for %v each\n",
		unlimitedInFlight, formatRates(cfg.latencyRates), cfg.latencyFor)
	key, err := deliver.ParseSecret(e.secret)
	if err != nil {
		return nil, err
	}
	s, err := e.up(ctx, "latency")
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, s.down()) }()
	const id = "steady"
	if err := e.subAdd(ctx, s, id, 0, unlimitedInFlight, "x"); err != nil {
		return nil, err
	}
	defer e.rcv.forget(id)
	server := "in-process"
	if cfg.embedded {
		server = "embedded"
	}
	relay := latencyTarget{
		contender: latencyRelay, server: server, s: s, subject: "events.x", rcv: e.rcv, id: id, metrics: s.relay.metrics,
		dead: func() error {
			if s.relay.exited() {
				return exitErr(s.relay)
			}
			return nil
		},
	}
	for k, rate := range cfg.latencyRates {
		if ctx.Err() != nil {
			break
		}
		b, err := e.latencyBaselineAt(ctx, k, rate, key)
		if err != nil {
			return out, fmt.Errorf("latency at %g/s, baseline: %w", rate, err)
		}
		out = append(out, b)
		if ctx.Err() != nil {
			break
		}
		h, err := e.latencyLoopAt(ctx, k, rate, key, latencyTwoHop,
			twoHopSpec(fmt.Sprintf("lhop%d", k), "two-hop deliveries at a steady rate", latencyPrefix(k)))
		if err != nil {
			return out, fmt.Errorf("latency at %g/s, two-hop loop: %w", rate, err)
		}
		out = append(out, h)
		if ctx.Err() != nil {
			break
		}
		r, err := e.latencyAt(ctx, relay, k, rate)
		if err != nil {
			return out, fmt.Errorf("latency at %g/s, relay: %w", rate, err)
		}
		out = append(out, r)
	}
	return out, ctx.Err()
}

// latencyBaselineAt is the baseline's turn at the k-th rate: the
// throughput scenario's baseline loop (BASE, its durable pull consumer,
// signedLoop POSTing to the loops' receiver port, 64 in flight as relay's
// subscriber has) on a fresh in-process server, whatever -embedded says,
// pulling before the warm-up; then latencyAt, as for relay.
func (e *env) latencyBaselineAt(ctx context.Context, k int, rate float64, key []byte) (latencyRun, error) {
	return e.latencyLoopAt(ctx, k, rate, key, latencyBaseline, loopSpec{
		id: fmt.Sprintf("lbase%d", k), what: "baseline deliveries at a steady rate",
		subject: baseSubject, prefix: latencyPrefix(k), setup: baselineSetup,
	})
}

// latencyLoopAt is a loop contender's turn at the k-th rate: spec's loops
// (64 in flight, as relay's subscriber has) on a fresh in-process server,
// POSTing to the loops' receiver port, pulling before the warm-up; then
// latencyAt, as for relay.
func (e *env) latencyLoopAt(ctx context.Context, k int, rate float64, key []byte, contender string, spec loopSpec) (_ latencyRun, err error) {
	l, err := e.startLoops(ctx, spec, e.baseRcv.URL, key, unlimitedInFlight)
	if err != nil {
		return latencyRun{}, err
	}
	defer func() { err = errors.Join(err, l.close()) }()
	defer e.baseRcv.forget(spec.id)
	return e.latencyAt(ctx, latencyTarget{
		contender: contender, server: "in-process", s: l.s, subject: spec.subject, rcv: e.baseRcv, id: spec.id,
		dead: l.failed,
	}, k, rate)
}

// latencyPrefix starts the Nats-Msg-Ids of the measured run at the k-th
// rate, the same for both contenders, so that they publish the same bytes.
func latencyPrefix(k int) string { return fmt.Sprintf("%sl%d-", eventPrefix, k) }

// latencyAt is one contender's turn at the k-th rate: an unmeasured second
// at that rate, then -latency-for of it, measured. It prints the run's
// figures on stderr.
func (e *env) latencyAt(ctx context.Context, t latencyTarget, k int, rate float64) (latencyRun, error) {
	warmN := max(1, int(math.Round(rate)))
	if _, err := e.latencyOne(ctx, t, fmt.Sprintf("%sl%dw-", eventPrefix, k), rate, warmN); err != nil {
		return latencyRun{}, fmt.Errorf("warm-up: %w", err)
	}
	var before map[string]stageHist
	if t.metrics != "" {
		var err error
		if before, err = settledStages(ctx, t.metrics); err != nil {
			return latencyRun{}, err
		}
	}
	n := max(1, int(math.Round(rate*e.cfg.latencyFor.Seconds())))
	r, err := e.latencyOne(ctx, t, latencyPrefix(k), rate, n)
	r.span = e.cfg.latencyFor
	if err != nil {
		return r, err
	}
	if t.metrics != "" {
		after, err := stagesAfter(ctx, t.metrics, before, r.l.arrived)
		if err != nil {
			return r, err
		}
		r.stages = stageFigures(before, after)
	}
	fmt.Fprintf(os.Stderr, "  %g/s, %s: published %d at %.0f/s (worst lag %.1f ms); %d arrived, p50 %.1f ms, p90 %.1f ms, p99 %.1f ms, max %.1f ms\n",
		rate, t.contender, r.l.published, r.achieved, ms(r.worstLag), r.l.arrived, ms(r.l.p50), ms(r.p90), ms(r.l.p99), ms(r.l.max))
	if len(r.stages) > 0 {
		fmt.Fprintf(os.Stderr, "  %g/s, %s's stages, p50 / p99: %s\n", rate, t.contender, stagesLine(r.stages))
	}
	return r, nil
}

// latencyOne publishes n events on t's subject at rate on a schedule (the
// pacer), waits for them at t's subscriber and computes the latencies from
// each event's publish call to its first arrival. The receiver's record of
// the subscriber is cleared first, so that a warm-up does not count.
func (e *env) latencyOne(ctx context.Context, t latencyTarget, prefix string, rate float64, n int) (latencyRun, error) {
	t.rcv.forget(t.id)
	r := latencyRun{contender: t.contender, server: t.server, rate: rate, l: latency{published: n}}
	sent, p, err := e.paced(ctx, t.s, t.subject, prefix, rate, n)
	if err != nil {
		return r, err
	}
	r.achieved, r.worstLag = p.achieved(n), p.worstLag
	err = t.s.waitUntil(ctx, "deliveries at a steady rate", latencyWait, func() (bool, error) {
		if err := t.dead(); err != nil {
			return false, err
		}
		return t.rcv.snapshot(t.id).distinct >= n, nil
	}, func() string { return fmt.Sprintf("%d of %d arrived", t.rcv.snapshot(t.id).distinct, n) })
	if err != nil && (ctx.Err() != nil || t.dead() != nil) {
		return r, err
	}
	// Missing deliveries are reported as such, not as an error.
	arrived := t.rcv.arrivals(t.id, prefix) // one request for all of them
	lat := make([]time.Duration, 0, n)
	for i := range n {
		if at, ok := arrived[prefix+strconv.Itoa(i)]; ok {
			lat = append(lat, at.Sub(sent[i]))
		}
	}
	r.l.arrived = len(lat)
	snap := t.rcv.snapshot(t.id)
	r.requests, r.distinct = snap.requests, snap.distinct
	if len(lat) > 0 {
		slices.Sort(lat)
		r.l.p50, r.p90, r.l.p99, r.l.max = percentile(lat, 0.50), percentile(lat, 0.90), percentile(lat, 0.99), lat[len(lat)-1]
	}
	return r, nil
}

// pacing is how a paced publish kept to its schedule.
type pacing struct {
	first, last time.Time     // the first and the last publish call
	worstLag    time.Duration // the latest a publish call came after its scheduled time
}

// achieved is the publish rate the pacer reached over n events.
func (p pacing) achieved(n int) float64 {
	if d := p.last.Sub(p.first); n > 1 && d > 0 {
		return float64(n-1) / d.Seconds()
	}
	return 0
}

// paced publishes n events on subject with Nats-Msg-Id <prefix><i>, the
// i-th due at i ÷ rate after the start, and returns the time of each
// publish call. Every event is published on its own schedule, not behind
// the previous PubAck: the PubAcks are awaited by a goroutine of their own,
// so that a slow ack delays no later event. The pacer sleeps until the next
// event is due and, on waking, publishes every event whose time has come,
// so that a late wake-up (a timer's granularity, a busy CPU) is caught up at
// once rather than pushing the whole schedule back. It returns once every
// PubAck has arrived; the first failed one is the error.
func (e *env) paced(ctx context.Context, s *stack, subject, prefix string, rate float64, n int) ([]time.Time, pacing, error) {
	sent := make([]time.Time, n)
	var p pacing
	acks := make(chan jetstream.PubAckFuture, publishChunk)
	acked := make(chan error, 1)
	go func() { acked <- awaitAcks(ctx, acks) }()
	finish := func(err error) ([]time.Time, pacing, error) {
		close(acks)
		return sent, p, errors.Join(err, <-acked)
	}
	interval := float64(time.Second) / rate
	due := func(i int) time.Time { return p.first.Add(time.Duration(float64(i) * interval)) }
	timer := time.NewTimer(time.Hour) // reset before each wait
	defer timer.Stop()
	p.first = time.Now()
	for i := 0; i < n; {
		for ; i < n; i++ {
			now := time.Now()
			at := due(i)
			if at.After(now) {
				break
			}
			p.worstLag = max(p.worstLag, now.Sub(at))
			sent[i] = now
			f, err := s.js.PublishMsgAsync(&nats.Msg{Subject: subject, Data: e.body},
				jetstream.WithMsgID(prefix+strconv.Itoa(i)))
			if err != nil {
				return finish(fmt.Errorf("publishing event %d of %d: %w", i+1, n, err))
			}
			select {
			case acks <- f:
			case <-ctx.Done():
				return finish(ctx.Err())
			}
		}
		if i == n {
			break
		}
		timer.Reset(time.Until(due(i)))
		select {
		case <-timer.C:
		case <-ctx.Done():
			return finish(ctx.Err())
		}
	}
	p.last = sent[n-1]
	return finish(nil)
}

// awaitAcks waits for each PubAck sent on acks until acks is closed and
// returns the first failure. It keeps taking futures after a failure, so
// that the publisher never blocks on it.
func awaitAcks(ctx context.Context, acks <-chan jetstream.PubAckFuture) error {
	var first error
	for f := range acks {
		if first != nil {
			continue
		}
		select {
		case <-f.Ok():
		case err := <-f.Err():
			first = fmt.Errorf("publishing: %w", err)
		case <-ctx.Done():
			first = ctx.Err()
		}
	}
	return first
}

// parseRates reads -latency-rates: positive, finite events/s, comma
// separated.
func parseRates(s string) ([]float64, error) {
	var out []float64
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		r, err := strconv.ParseFloat(part, 64)
		if err != nil || !(r > 0) || math.IsInf(r, 0) {
			return nil, fmt.Errorf("-latency-rates: %q is not a positive number of events/s; give a comma-separated list such as 1000,5000", part)
		}
		out = append(out, r)
	}
	if len(out) == 0 {
		return nil, errors.New("-latency-rates: empty list; give at least one rate in events/s, such as 1000,5000")
	}
	return out, nil
}

// formatRates writes rates as -latency-rates takes them.
func formatRates(rates []float64) string {
	parts := make([]string, len(rates))
	for i, r := range rates {
		parts[i] = strconv.FormatFloat(r, 'g', -1, 64)
	}
	return strings.Join(parts, ",")
}

// latencyTable is a row per contender and rate, in the order they ran:
// the publisher's schedule as kept, what arrived and the latency
// percentiles; below it, per rate, relay's p50 and p99 minus the
// baseline's, which is relay's own share of the latency, and minus the
// two-hop loop's, which is what relay adds to the second hop it needs.
func latencyTable(runs []latencyRun) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "### Latency: relay (one subscriber, --rate 0 --max-in-flight %d) against the simplest loop, events at a steady rate, publish call → first arrival\n\n",
		unlimitedInFlight)
	relayServer := "an in-process server"
	for _, r := range runs {
		if r.contender == latencyRelay && r.server == "embedded" {
			relayServer = "its own embedded server"
		}
	}
	fmt.Fprintf(&sb, "At each rate the baseline, the two-hop loop, then relay, each after an unmeasured second at its rate; "+
		"each event published by the same pacer on its own schedule with an async PubAck, the same body and Nats-Msg-Id. "+
		"Baseline: the throughput scenario's simplest loop (events to %s, a durable pull consumer drains it, "+
		"each message POSTed signed to a receiver port of its own and acked after the 2xx, %d in flight), "+
		"on a fresh in-process server per rate. Two-hop: the baseline with the fan-out's second JetStream hop (the throughput scenario's two-hop loop), the same way. Relay: `relay run` on %s, one relay for every rate. "+
		"The baseline's latency is what this machine, the server and the receiver cost; relay − baseline is relay's own; "+
		"relay − two-hop is what relay adds to the hop its durable per-subscriber copy needs.\n\n",
		baseStream, unlimitedInFlight, relayServer)
	sb.WriteString("| rate, events/s | contender | for, s | published | achieved, events/s | worst lag behind schedule, ms | arrived | p50, ms | p90, ms | p99, ms | max, ms |\n")
	sb.WriteString("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, r := range runs {
		fmt.Fprintf(&sb, "| %s | %s | %.0f | %s | %s | %.1f | %s of %s | %.1f | %.1f | **%.1f** | %.1f |\n",
			rateString(r.rate), r.contender, r.span.Seconds(), thousands(int64(r.l.published)), thousands(int64(math.Round(r.achieved))),
			ms(r.worstLag), thousands(int64(r.l.arrived)), thousands(int64(r.l.published)),
			ms(r.l.p50), ms(r.p90), ms(r.l.p99), ms(r.l.max))
	}
	sb.WriteString("\n")
	for i, r := range runs {
		if r.contender != latencyRelay {
			continue
		}
		for _, against := range []string{latencyBaseline, latencyTwoHop} {
			for j := i - 1; j >= 0; j-- { // the one measured just before it
				if b := runs[j]; b.contender == against && b.rate == r.rate {
					fmt.Fprintf(&sb, "- at %s/s, relay − %s: p50 %+.1f ms, p99 **%+.1f** ms; relay ÷ %[2]s: p50 %[5]s, p99 **%[6]s**\n",
						rateString(r.rate), against, ms(r.l.p50-b.l.p50), ms(r.l.p99-b.l.p99),
						timesOf(r.l.p50, b.l.p50), timesOf(r.l.p99, b.l.p99))
					break
				}
			}
		}
	}
	for _, r := range runs {
		if len(r.stages) > 0 {
			fmt.Fprintf(&sb, "- at %s/s, where relay's time went (its `relay_delivery_stage_seconds` over the measured run; p50 / p99 interpolated within the histogram's 1-2-5 buckets, the mean exact): %s\n",
				rateString(r.rate), stagesLine(r.stages))
		}
		if r.behind() {
			fmt.Fprintf(&sb, "- at %s/s, %s: the publisher fell behind its schedule: it published %s/s; the latencies are at that rate\n",
				rateString(r.rate), r.contender, thousands(int64(math.Round(r.achieved))))
		}
		if dup := r.requests - r.distinct; dup > 0 {
			fmt.Fprintf(&sb, "- at %s/s, %s: %d duplicate requests (same webhook-id twice)\n", rateString(r.rate), r.contender, dup)
		}
	}
	return sb.String()
}

// timesOf is a ÷ b with two decimals, or "–" when b is not positive: a
// latency as a multiple of a loop's measured in the same run, which a
// machine's noise moves far less than the milliseconds themselves.
func timesOf(a, b time.Duration) string {
	if b <= 0 {
		return "–"
	}
	return strconv.FormatFloat(float64(a)/float64(b), 'f', 2, 64)
}

// rateString writes a rate with thousands separators when it is whole
// (5,000), as it is given otherwise (2.5).
func rateString(r float64) string {
	if r == math.Trunc(r) && r < 1e15 {
		return thousands(int64(r))
	}
	return strconv.FormatFloat(r, 'g', -1, 64)
}
