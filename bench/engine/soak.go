package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/nats-io/nats.go"

	"github.com/relay-dev/relay/internal/metrics"
	"github.com/relay-dev/relay/internal/opevent"
	"github.com/relay-dev/relay/internal/subscribers"
)

// ---- soak: four subscribers for minutes, what an hour costs ----

// The soak's subscribers: the healthy one measured, and its lane-mates
// (numbered ids chosen to share its lane): one whose receiver fails a share
// of requests at random, one at a low --rate, one that answers slowly.
const (
	soakHealthy     = "soakok"
	soakFlakyPrefix = "soakflaky"
	soakRatedPrefix = "soakrate"
	soakSlowPrefix  = "soakslow"
	soakEventType   = "soak"
)

// What the lane-mates do, as issue 55 sets them.
const (
	soakFailShare = 0.2                    // the flaky receiver answers 500 to a fifth of requests, at random
	soakRateLimit = 50.0                   // the rated subscriber's --rate
	soakSlowDelay = 200 * time.Millisecond // the slow receiver answers after this
)

// soakFlatShare is the most the relay's RSS may grow over the last half of
// the soak, as a share of its mean over that half, for the RSS to count as
// flat: the growth is a least-squares line's rise (lastHalfGrowth), so a
// sawtooth of collections averages out while a steady climb does not.
const soakFlatShare = 0.05

// soakP99Limit is the most the healthy subscriber's p99 beside its
// lane-mates may be, as a multiple of its p99 alone in the same run.
const soakP99Limit = 2.0

// soakSample is what the soak reads every -soak-sample.
type soakSample struct {
	at         time.Duration // since the soak's first publish
	relayRSS   int64
	relayHeap  int64 // go_memstats_heap_inuse_bytes of the relay (its embedded server's included)
	serverRSS  int64 // the nats-server process's (on --nats); 0 with -embedded
	goroutines int   // go_goroutines of the relay
	fds        int   // the relay's open file descriptors
	circuit    bool  // relay_circuit_open of the flaky subscriber was 1
}

// soakSub is one subscriber's account at the end: what its receiver saw,
// what relay counted, what still waits for it.
type soakSub struct {
	id, role string
	received int // distinct webhook-ids answered 2xx
	requests int // every request, duplicates and 500s included
	failed   int // requests its receiver answered 500
	// relay_deliveries_total by outcome, relay_dlq_messages_total by reason.
	delivered, retried, dead int
	deadBy                   map[string]int
	waiting                  int // in DELIVERIES (lane and overflow) and RETRIES at the end
}

// soakPoint is the relay's goroutines and file descriptors at one moment.
type soakPoint struct {
	goroutines, fds int
}

// soakResult is one soak on one server and relay.
type soakResult struct {
	server    string        // "embedded" or "nats-server process"
	rate      float64       // events/s
	span      time.Duration // -soak-for
	lane      string        // every subscriber's
	published int
	achieved  float64 // events/s the publisher reached

	alone, beside latencyRun // the healthy subscriber, alone and beside its lane-mates

	subs    []soakSub
	samples []soakSample
	start   soakPoint // before the soak's first publish
	end     soakPoint // after the drain
	hwm     int64     // the relay's VmHWM at the end
	// relayCPU and serverCPU are the CPU time (user + system) the relay
	// and the nats-server process (on --nats) used from the soak's first
	// publish to the end of the drain; cpuKnown says they were read.
	relayCPU, serverCPU time.Duration
	cpuKnown            bool
	drained             time.Duration
	// circuitOpened counts the relay.circuit.opened events of the flaky
	// subscriber; circuitSeen the reads of relay_circuit_open, one a
	// second (circuitPolls in all), that found its circuit open.
	circuitOpened, circuitSeen, circuitPolls int
	// rssGrowth is the relay's RSS growth over the last half of the span
	// (lastHalfGrowth), rssMean its mean over that half, in bytes.
	rssGrowth, rssMean float64
	serverGrowth       float64 // the same for the nats-server process; 0 with -embedded
	serverMean         float64
}

// point is one sample of a series over time.
type point struct {
	at time.Duration
	v  float64
}

// lastHalfGrowth fits a line by least squares to the points of the last
// half of span (span/2 ≤ at ≤ span) and returns its rise over that half
// and the points' mean. With fewer than two points in the half (or all at
// one time) the rise is 0. A line rather than last − first: one sample
// taken just after a collection, or just before, must not decide whether
// memory grew.
func lastHalfGrowth(pts []point, span time.Duration) (growth, mean float64, n int) {
	var sx, sy float64
	var half []point
	for _, p := range pts {
		if p.at >= span/2 && p.at <= span {
			half = append(half, p)
			sx += p.at.Seconds()
			sy += p.v
		}
	}
	n = len(half)
	if n == 0 {
		return 0, 0, 0
	}
	mx, my := sx/float64(n), sy/float64(n)
	var sxy, sxx float64
	for _, p := range half {
		dx := p.at.Seconds() - mx
		sxy += dx * (p.v - my)
		sxx += dx * dx
	}
	if n < 2 || sxx == 0 {
		return 0, my, n
	}
	return sxy / sxx * (span - span/2).Seconds(), my, n
}

// ratioOf is a ÷ b, 0 when b is not positive.
func ratioOf(a, b time.Duration) float64 {
	if b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// flaky is the account of the subscriber that fails a share of requests.
func (r soakResult) flaky() soakSub {
	for _, s := range r.subs {
		if s.role == "flaky" {
			return s
		}
	}
	return soakSub{}
}

// lost is how many of the soak's events the flaky subscriber neither got
// nor still has waiting: its dead letters, and any missing beside them.
// Its dead letters, counted apart, are never fewer.
func (r soakResult) lost() int {
	f := r.flaky()
	return max(r.published-f.received-f.waiting, f.dead, 0)
}

// circuitNeverOpened: no relay.circuit.opened for the flaky subscriber and
// read of relay_circuit_open that found its circuit open.
func (r soakResult) circuitNeverOpened() bool { return r.circuitOpened == 0 && r.circuitSeen == 0 }

// rssFlat: the relay's RSS grew over the last half by at most
// soakFlatShare of its mean.
func (r soakResult) rssFlat() bool { return r.rssGrowth <= soakFlatShare*r.rssMean }

// p99Ratio is the healthy subscriber's p99 beside its lane-mates ÷ alone.
func (r soakResult) p99Ratio() float64 { return ratioOf(r.beside.l.p99, r.alone.l.p99) }

// p50Ratio is the same for the p50.
func (r soakResult) p50Ratio() float64 { return ratioOf(r.beside.l.p50, r.alone.l.p50) }

// upOwn is up with the soak's server: the relay's embedded one with
// -embedded, else a nats-server process of its own (not this program's
// in-process server), so that the server's memory and the relay's show
// apart, and this program's publisher and receivers' memory in neither.
func (e *env) upOwn(ctx context.Context, name string) (*stack, error) {
	if e.cfg.embedded {
		return e.up(ctx, name)
	}
	bin, err := e.natsServerBin(ctx)
	if err != nil {
		return nil, err
	}
	s, logPath, err := e.newStack(name)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*stack, error) { return nil, errors.Join(err, s.down()) }
	if s.proc, err = startServerProc(ctx, bin, s.dir, filepath.Join(e.cfg.logs, filepath.Base(s.dir)+"-nats-server.log")); err != nil {
		return fail(err)
	}
	s.url = s.proc.url
	if err := s.connect(); err != nil {
		return fail(err)
	}
	if s.relay, err = startRelay(ctx, e.bin, e.cfg.lanes, s.dir, logPath, nil, "--nats", s.url); err != nil {
		return fail(err)
	}
	return s, nil
}

// soak runs, on one server and relay, the healthy subscriber alone at
// -soak-rate for -soak-alone (its baseline latency), then adds its three
// lane-mates on the same event type, each getting every event: one whose
// receiver answers a fifth of requests 500 at random, one at --rate 50,
// one whose receiver answers after 200 ms; and publishes at -soak-rate for
// -soak-for, sampling the relay's (and the server process's) memory and
// the relay's goroutines and file descriptors every -soak-sample, the
// flaky subscriber's circuit every second and its relay.circuit.opened
// events all along; then waits up to -soak-drain for the healthy and the
// flaky subscriber to have every event.
func (e *env) soak(ctx context.Context) (res soakResult, err error) {
	cfg := e.cfg
	res = soakResult{rate: cfg.soakRate, span: cfg.soakFor, lane: subscribers.LaneFor(soakHealthy, cfg.lanes), server: "nats-server process"}
	if cfg.embedded {
		res.server = "embedded"
	}
	flaky := sameLane(soakFlakyPrefix, res.lane, cfg.lanes, 1)[0]
	rated := sameLane(soakRatedPrefix, res.lane, cfg.lanes, 1)[0]
	slow := sameLane(soakSlowPrefix, res.lane, cfg.lanes, 1)[0]
	fmt.Fprintf(os.Stderr, "soak: %g events/s to %s alone for %v, then beside %s (500 to %.0f %% at random), %s (--rate %g), %s (answers in %v), all on lane %s, for %v (%s)\n",
		cfg.soakRate, soakHealthy, cfg.soakAlone, flaky, 100*soakFailShare, rated, soakRateLimit, slow, soakSlowDelay, res.lane, cfg.soakFor, res.server)
	s, err := e.upOwn(ctx, "soak")
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, s.down()) }()
	ids := []string{soakHealthy, flaky, rated, slow}
	defer func() {
		for _, id := range ids {
			e.rcv.forget(id)
		}
	}()
	if err := e.subAdd(ctx, s, soakHealthy, 0, unlimitedInFlight, soakEventType); err != nil {
		return res, err
	}
	healthy := latencyTarget{
		contender: latencyRelay, server: res.server, s: s, subject: "events." + soakEventType, rcv: e.rcv, id: soakHealthy,
		dead: func() error {
			if s.relay.exited() {
				return exitErr(s.relay)
			}
			return nil
		},
	}
	// Alone, after an unmeasured second at the rate.
	if _, err := e.latencyOne(ctx, healthy, eventPrefix+"sw-", cfg.soakRate, max(1, int(cfg.soakRate))); err != nil {
		return res, fmt.Errorf("soak warm-up: %w", err)
	}
	nAlone := max(1, int(math.Round(cfg.soakRate*cfg.soakAlone.Seconds())))
	if res.alone, err = e.latencyOne(ctx, healthy, eventPrefix+"sa-", cfg.soakRate, nAlone); err != nil {
		return res, fmt.Errorf("soak, %s alone: %w", soakHealthy, err)
	}
	fmt.Fprintf(os.Stderr, "  %s alone: %s\n", soakHealthy, res.alone.l)

	// The lane-mates.
	if err := e.subAddAt(ctx, s, flaky, fmt.Sprintf("%s/%s?fail=%g", e.hook.URL, flaky, soakFailShare), 0, unlimitedInFlight, soakEventType); err != nil {
		return res, err
	}
	if err := e.subAdd(ctx, s, rated, soakRateLimit, subscribers.DefaultMaxInFlight, soakEventType); err != nil {
		return res, err
	}
	if err := e.subAddAt(ctx, s, slow, fmt.Sprintf("%s/%s?delay=%s", e.hook.URL, slow, soakSlowDelay), 0, unlimitedInFlight, soakEventType); err != nil {
		return res, err
	}
	// The relay picks them up within a second.
	time.Sleep(1500 * time.Millisecond)
	var opened atomic.Int64
	sub, err := s.nc.Subscribe("events."+opevent.CircuitOpened, func(m *nats.Msg) {
		var ev opevent.Event
		if json.Unmarshal(m.Data, &ev) == nil && ev.Subscriber == flaky {
			opened.Add(1)
		}
	})
	if err != nil {
		return res, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if res.start, err = e.soakPoint(ctx, s); err != nil {
		return res, err
	}

	// The soak, sampled all along, the drain included.
	relayCPU0, cpuErr := cpuTime(s.relay.pid())
	var serverCPU0 time.Duration
	if s.proc != nil && cpuErr == nil {
		serverCPU0, cpuErr = cpuTime(s.proc.pid())
	}
	start := time.Now()
	sampleCtx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan []soakSample, 1)
	go func() { sampled <- e.soakSampling(sampleCtx, s, flaky, start) }()
	polled := make(chan [2]int, 1)
	go func() { polled <- circuitPolling(sampleCtx, s, flaky) }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			stopSampling()
			res.samples = <-sampled
			p := <-polled
			res.circuitPolls, res.circuitSeen = p[0], p[1]
		}
	}
	defer stop()
	res.published = max(1, int(math.Round(cfg.soakRate*cfg.soakFor.Seconds())))
	res.beside, err = e.latencyOne(ctx, healthy, eventPrefix+"sb-", cfg.soakRate, res.published)
	res.achieved = res.beside.achieved
	if err != nil {
		return res, fmt.Errorf("soak, %s beside its lane-mates: %w", soakHealthy, err)
	}
	fmt.Fprintf(os.Stderr, "  %s beside its lane-mates: %s\n", soakHealthy, res.beside.l)
	drainFrom := time.Now()
	err = s.waitUntil(ctx, "soak drain", cfg.soakDrain, func() (bool, error) {
		return e.rcv.snapshot(flaky).distinct >= res.published && e.rcv.snapshot(soakHealthy).distinct >= res.published, nil
	}, func() string {
		return fmt.Sprintf("%s has %d of %d", flaky, e.rcv.snapshot(flaky).distinct, res.published)
	})
	res.drained = time.Since(drainFrom)
	if err != nil && (ctx.Err() != nil || s.relay.exited()) {
		return res, err
	}
	// Not all in by then is a figure (what waits, what was lost), not an error.
	stop()
	if c, err := cpuTime(s.relay.pid()); err == nil && cpuErr == nil {
		res.relayCPU, res.cpuKnown = c-relayCPU0, true
		if s.proc != nil {
			c, err := cpuTime(s.proc.pid())
			res.serverCPU, res.cpuKnown = c-serverCPU0, err == nil
		}
	}
	if res.end, err = e.soakPoint(ctx, s); err != nil {
		return res, err
	}
	if _, res.hwm, err = memory(s.relay.pid()); err != nil {
		return res, err
	}
	fams, err := scrapeFamilies(ctx, s.relay.metrics)
	if err != nil {
		return res, err
	}
	opCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for i, id := range ids {
		sub := soakSub{id: id, role: []string{"healthy", "flaky", "rated", "slow"}[i], deadBy: map[string]int{}}
		snap := e.rcv.snapshot(id)
		sub.received, sub.requests, sub.failed = snap.distinct, snap.requests, snap.failed
		for _, m := range fams["relay_deliveries_total"].GetMetric() {
			if label(m, "subscriber") != id {
				continue
			}
			n := int(m.GetCounter().GetValue())
			switch label(m, "outcome") {
			case metrics.OutcomeDelivered:
				sub.delivered = n
			case metrics.OutcomeRetried:
				sub.retried = n
			case metrics.OutcomeDead:
				sub.dead = n
			}
		}
		for _, m := range fams["relay_dlq_messages_total"].GetMetric() {
			if label(m, "subscriber") == id {
				sub.deadBy[label(m, "reason")] += int(m.GetCounter().GetValue())
			}
		}
		if sub.waiting, _, err = s.stuckCounts(opCtx, id); err != nil {
			return res, err
		}
		res.subs = append(res.subs, sub)
	}
	res.circuitOpened = int(opened.Load())
	rss := make([]point, 0, len(res.samples))
	srv := make([]point, 0, len(res.samples))
	for _, x := range res.samples {
		rss = append(rss, point{x.at, float64(x.relayRSS)})
		srv = append(srv, point{x.at, float64(x.serverRSS)})
	}
	res.rssGrowth, res.rssMean, _ = lastHalfGrowth(rss, res.span)
	if !cfg.embedded {
		res.serverGrowth, res.serverMean, _ = lastHalfGrowth(srv, res.span)
	}
	f := res.flaky()
	fmt.Fprintf(os.Stderr, "  %s: %d of %d received, %d waiting, %d dead; circuit opened %d times, read open %d times; relay RSS growth over the last half %+.0f MB (mean %.0f MB)\n",
		flaky, f.received, res.published, f.waiting, f.dead, res.circuitOpened, res.circuitSeen, mb(int64(res.rssGrowth)), mb(int64(res.rssMean)))
	return res, nil
}

// soakPoint reads the relay's goroutines (its go_goroutines) and open file
// descriptors.
func (e *env) soakPoint(ctx context.Context, s *stack) (soakPoint, error) {
	fams, err := scrapeFamilies(ctx, s.relay.metrics)
	if err != nil {
		return soakPoint{}, err
	}
	fds, err := openFDs(s.relay.pid())
	if err != nil {
		return soakPoint{}, err
	}
	return soakPoint{goroutines: int(gauge(fams, "go_goroutines")), fds: fds}, nil
}

// soakSampling samples every -soak-sample until ctx ends, and returns the
// samples. A failed reading is left out and said on stderr once.
func (e *env) soakSampling(ctx context.Context, s *stack, flaky string, start time.Time) []soakSample {
	var out []soakSample
	var warned bool
	tick := time.NewTicker(e.cfg.soakSample)
	defer tick.Stop()
	for {
		x, err := e.soakSampleOne(ctx, s, flaky)
		x.at = time.Since(start)
		if err == nil {
			out = append(out, x)
		} else if ctx.Err() == nil && !warned {
			warned = true
			fmt.Fprintf(os.Stderr, "  soak: a sample failed (others may follow, not said): %v\n", err)
		}
		if len(out)%max(1, int(time.Minute/e.cfg.soakSample)) == 0 && err == nil {
			fmt.Fprintf(os.Stderr, "  %5.0fs soak: relay RSS %.0f MB (Go heap %.0f MB), server RSS %.0f MB, %d goroutines, %d fds\n",
				x.at.Seconds(), mb(x.relayRSS), mb(x.relayHeap), mb(x.serverRSS), x.goroutines, x.fds)
		}
		select {
		case <-ctx.Done():
			return out
		case <-tick.C:
		}
	}
}

// soakSampleOne reads one sample.
func (e *env) soakSampleOne(ctx context.Context, s *stack, flaky string) (soakSample, error) {
	var x soakSample
	var err error
	if x.relayRSS, _, err = memory(s.relay.pid()); err != nil {
		return x, err
	}
	if s.proc != nil {
		if x.serverRSS, _, err = memory(s.proc.pid()); err != nil {
			return x, err
		}
	}
	if x.fds, err = openFDs(s.relay.pid()); err != nil {
		return x, err
	}
	fams, err := scrapeFamilies(ctx, s.relay.metrics)
	if err != nil {
		return x, err
	}
	x.relayHeap = int64(gauge(fams, "go_memstats_heap_inuse_bytes"))
	x.goroutines = int(gauge(fams, "go_goroutines"))
	for _, m := range fams["relay_circuit_open"].GetMetric() {
		if label(m, "subscriber") == flaky && m.GetGauge().GetValue() > 0 {
			x.circuit = true
		}
	}
	return x, nil
}

// circuitPolling reads relay_circuit_open of subscriber id once a second
// until ctx ends, and returns how many reads it made and how many found the
// circuit open. The relay computes the gauge at most every 2 s
// (metrics.DefaultMinRefresh), and a cool-down may be short: the
// relay.circuit.opened events are the exact count, this the time it stays
// open.
func circuitPolling(ctx context.Context, s *stack, id string) [2]int {
	var polls, open int
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		if fams, err := scrapeFamilies(ctx, s.relay.metrics); err == nil {
			polls++
			for _, m := range fams["relay_circuit_open"].GetMetric() {
				if label(m, "subscriber") == id && m.GetGauge().GetValue() > 0 {
					open++
					break
				}
			}
		}
		select {
		case <-ctx.Done():
			return [2]int{polls, open}
		case <-tick.C:
		}
	}
}

// scrapeFamilies reads the relay's /metrics at addr.
func scrapeFamilies(ctx context.Context, addr string) (map[string]*dto.MetricFamily, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := getMetrics(ctx, addr)
	if err != nil {
		return nil, fmt.Errorf("scraping /metrics: %w", err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("scraping /metrics: %w", err)
	}
	return fams, nil
}

// gauge is the value of a family's first series, gauge or untyped; 0 when
// there is none.
func gauge(fams map[string]*dto.MetricFamily, name string) float64 {
	for _, m := range fams[name].GetMetric() {
		if g := m.GetGauge(); g != nil {
			return g.GetValue()
		}
		return m.GetUntyped().GetValue()
	}
	return 0
}

// label is the value of a series' label, "" when it has none.
func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// verdict writes a target's verdict.
func verdict(met bool) string {
	if met {
		return "met"
	}
	return "**not met**"
}

// soakTable reports a soak: the subscribers' accounts, memory over time,
// goroutines and descriptors, the healthy subscriber's latency, and the
// targets.
func soakTable(r soakResult) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "### Soak: %s events/s for %v to four subscribers on lane %s (%s)\n\n", rateString(r.rate), r.span, r.lane, r.server)
	fmt.Fprintf(&sb, "Every subscriber takes every event of one type: %s (answers 204, --rate 0 --max-in-flight %d), "+
		"a flaky one (its receiver answers 500 to %.0f %% of requests at random), a rated one (--rate %g), a slow one (answers after %v); "+
		"before them %s alone at the same rate (%s events). Publish call → first arrival for %s; the others from relay's /metrics "+
		"(relay_deliveries_total, relay_dlq_messages_total: since the relay started, so the healthy one's include its warm-up and its time alone), "+
		"their receivers, and what waits for them in DELIVERIES and RETRIES at the end. "+
		"Published %s at %s/s; then up to the drain's limit for the healthy and the flaky one to have every event (%.0f s).\n\n",
		soakHealthy, unlimitedInFlight, 100*soakFailShare, soakRateLimit, soakSlowDelay, soakHealthy, thousands(int64(r.alone.l.published)), soakHealthy,
		thousands(int64(r.published)), thousands(int64(math.Round(r.achieved))), r.drained.Seconds())
	sb.WriteString("| subscriber | received (2xx, distinct) | requests | 500s answered | relay: delivered | retried | dead, by reason | waiting at the end |\n")
	sb.WriteString("| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: |\n")
	for _, s := range r.subs {
		var dead []string
		for _, reason := range slices.Sorted(maps.Keys(s.deadBy)) {
			dead = append(dead, fmt.Sprintf("%s %s", reason, thousands(int64(s.deadBy[reason]))))
		}
		deadCol := thousands(int64(s.dead))
		if len(dead) > 0 {
			deadCol += " (" + strings.Join(dead, ", ") + ")"
		}
		fmt.Fprintf(&sb, "| %s (%s) | %s of %s | %s | %s | %s | %s | %s | %s |\n", s.id, s.role,
			thousands(int64(s.received)), thousands(int64(r.published)), thousands(int64(s.requests)), thousands(int64(s.failed)),
			thousands(int64(s.delivered)), thousands(int64(s.retried)), deadCol, thousands(int64(s.waiting)))
	}
	sb.WriteString("\n| at, s | relay RSS, MB | relay Go heap in use, MB | server process RSS, MB | goroutines | fds | flaky's circuit |\n")
	sb.WriteString("| ---: | ---: | ---: | ---: | ---: | ---: | --- |\n")
	for _, x := range thin(r.samples, 12) {
		srv, circuit := "–", "closed"
		if x.serverRSS > 0 {
			srv = fmt.Sprintf("%.0f", mb(x.serverRSS))
		}
		if x.circuit {
			circuit = "open"
		}
		fmt.Fprintf(&sb, "| %.0f | %.0f | %.0f | %s | %d | %d | %s |\n", x.at.Seconds(), mb(x.relayRSS), mb(x.relayHeap), srv, x.goroutines, x.fds, circuit)
	}
	fmt.Fprintf(&sb, "\n- relay RSS over the last half (%v–%v, a least-squares line over %d samples): %+.1f MB, %.1f %% of its mean %.0f MB; VmHWM %.0f MB",
		r.span/2, r.span, countIn(r.samples, r.span), mb(int64(r.rssGrowth)), 100*r.rssGrowth/math.Max(1, r.rssMean), mb(int64(r.rssMean)), mb(r.hwm))
	if r.serverMean > 0 {
		fmt.Fprintf(&sb, "; the nats-server process's %+.1f MB, %.1f %% of its mean %.0f MB", mb(int64(r.serverGrowth)), 100*r.serverGrowth/r.serverMean, mb(int64(r.serverMean)))
	} else {
		sb.WriteString("; the embedded server's memory is in the relay's")
	}
	sb.WriteString("\n")
	maxG, maxF := 0, 0
	for _, x := range r.samples {
		maxG, maxF = max(maxG, x.goroutines), max(maxF, x.fds)
	}
	if r.cpuKnown && len(r.samples) > 0 {
		wall := r.samples[len(r.samples)-1].at.Seconds()
		fmt.Fprintf(&sb, "- CPU from the first publish to the end of the drain (%.0f s): the relay %.1f s (%.2f of a core)", wall, r.relayCPU.Seconds(), r.relayCPU.Seconds()/wall)
		if r.serverCPU > 0 {
			fmt.Fprintf(&sb, ", the nats-server process %.1f s (%.2f of a core)", r.serverCPU.Seconds(), r.serverCPU.Seconds()/wall)
		}
		sb.WriteString("\n")
	}
	fmt.Fprintf(&sb, "- relay goroutines %d at the start, %d at the end (most sampled %d); open file descriptors %d, %d (%d)\n",
		r.start.goroutines, r.end.goroutines, maxG, r.start.fds, r.end.fds, maxF)
	fmt.Fprintf(&sb, "- %s alone: p50 %.1f / p99 %.1f ms (%s arrived); beside its lane-mates: p50 %.1f / p99 %.1f ms (%s arrived); beside ÷ alone: p50 %.2f, p99 **%.2f**\n",
		soakHealthy, ms(r.alone.l.p50), ms(r.alone.l.p99), thousands(int64(r.alone.l.arrived)),
		ms(r.beside.l.p50), ms(r.beside.l.p99), thousands(int64(r.beside.l.arrived)), r.p50Ratio(), r.p99Ratio())
	if r.beside.behind() {
		fmt.Fprintf(&sb, "- the publisher fell behind its schedule: %s/s\n", thousands(int64(math.Round(r.achieved))))
	}
	f := r.flaky()
	sb.WriteString("\n| target | figure | verdict |\n| --- | --- | --- |\n")
	fmt.Fprintf(&sb, "| the flaky subscriber loses nothing | %s of %s lost (%s received, %s waiting, %s dead) | %s |\n",
		thousands(int64(r.lost())), thousands(int64(r.published)), thousands(int64(f.received)), thousands(int64(f.waiting)), thousands(int64(f.dead)), verdict(r.lost() == 0))
	fmt.Fprintf(&sb, "| its circuit never opens | opened %d times (relay.circuit.opened); relay_circuit_open 1 in %d of %d reads, one a second | %s |\n",
		r.circuitOpened, r.circuitSeen, r.circuitPolls, verdict(r.circuitNeverOpened()))
	fmt.Fprintf(&sb, "| relay RSS flat over the last half (growth ≤ %.0f %% of its mean) | %+.1f MB (%.1f %%) | %s |\n",
		100*soakFlatShare, mb(int64(r.rssGrowth)), 100*r.rssGrowth/math.Max(1, r.rssMean), verdict(r.rssFlat()))
	fmt.Fprintf(&sb, "| the healthy lane-mate's p99 ≤ %.0f× alone | %.2f | %s |\n", soakP99Limit, r.p99Ratio(), verdict(r.p99Ratio() > 0 && r.p99Ratio() <= soakP99Limit))
	return sb.String()
}

// thin is at most n of samples, evenly spread, the first and the last
// included.
func thin(samples []soakSample, n int) []soakSample {
	if len(samples) <= n || n < 2 {
		return samples
	}
	out := make([]soakSample, 0, n)
	for i := range n {
		out = append(out, samples[i*(len(samples)-1)/(n-1)])
	}
	return out
}

// countIn counts the samples of the last half of span.
func countIn(samples []soakSample, span time.Duration) int {
	n := 0
	for _, x := range samples {
		if x.at >= span/2 && x.at <= span {
			n++
		}
	}
	return n
}
