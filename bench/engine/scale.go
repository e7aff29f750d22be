package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/sourcegraph/conc/pool"

	"github.com/relay-dev/relay/internal/subscribers"
)

// ---- scale: many subscribers on one relay ----

// scaleResult is what one relay with -scale-subscribers subscribers did.
type scaleResult struct {
	subscribers, each int
	store             time.Duration // storing them all in the bucket
	loaded            time.Duration // from the first store to the relay delivering to the last one
	idleCPU           float64       // share of a core over the idle window
	idleRSS           int64         // bytes
	hot, spread       burstRun      // one subscriber alone; every subscriber a few events
	peakRSS           int64         // VmHWM at the end
	firstDelivery     time.Duration // relay sub add → first arrival for a new subscriber
	status            time.Duration // wall time of relay status --json
	scrape            time.Duration // wall time of one GET /metrics, its NATS-read gauges refreshed
	scrapeBytes       int64         // the size of that /metrics, uncompressed
	// broadcast is one event of broadcastBody bytes to every subscriber:
	// first publish → fanned out, and → the last arrival, and the relay's
	// warnings meanwhile.
	broadcastFanned, broadcastAll time.Duration
	broadcastWarnings             int
}

// broadcastBody is the body of the event sent to every subscriber: a
// full payload, 16 KB, which the fan-out stores once for all of them.
const broadcastBody = 16 << 10

// scaleIdle is how long the idle CPU is measured.
const scaleIdle = 10 * time.Second

// scale stores -scale-subscribers subscribers (each with an event type of
// its own, t<i>.*) in the bucket of a running relay, then measures: idle CPU
// and RSS; one subscriber alone (--max-in-flight 64) taking
// -throughput-events; every subscriber taking -scale-events-each events,
// spread evenly; the time from `relay sub add` to the first delivery of a
// new subscriber; the wall time of `relay status`; and the time and size of
// one scrape of the relay's /metrics.
func (e *env) scale(ctx context.Context) (res scaleResult, err error) {
	res = scaleResult{subscribers: e.cfg.scaleSubscribers, each: e.cfg.scaleEach}
	fmt.Fprintf(os.Stderr, "scale: %d subscribers on one relay (%d lanes)\n", res.subscribers, e.cfg.lanes)
	s, err := e.up(ctx, "scale")
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, s.down()) }()
	store, err := subscribers.Open(ctx, s.js)
	if err != nil {
		return res, err
	}
	id := func(i int) string { return "sc" + strconv.Itoa(i) }
	start := time.Now()
	p := pool.New().WithErrors().WithMaxGoroutines(32).WithContext(ctx)
	for i := range res.subscribers {
		p.Go(func(ctx context.Context) error {
			return store.Put(ctx, subscribers.Subscriber{ID: id(i), URL: e.hook.URL + "/" + id(i),
				Secrets: []string{e.secret}, Events: []string{"t" + strconv.Itoa(i) + ".*", "all.*"}})
		})
	}
	if err := p.Wait(); err != nil {
		return res, fmt.Errorf("storing subscribers: %w", err)
	}
	res.store = time.Since(start)
	// The relay has them all once the last one gets an event.
	last := res.subscribers - 1
	if err := e.publishFrom(ctx, s, "t"+strconv.Itoa(last)+".probe", "probe-", 0, 1); err != nil {
		return res, err
	}
	if err := s.waitUntil(ctx, "the relay's view of the subscribers", e.cfg.timeout, func() (bool, error) {
		return e.rcv.snapshot(id(last)).distinct > 0, nil
	}, func() string { return "waiting for the probe" }); err != nil {
		return res, err
	}
	res.loaded = time.Since(start)
	fmt.Fprintf(os.Stderr, "  stored %d in %.1fs; the relay delivered to the last one %.1fs after the first store\n",
		res.subscribers, res.store.Seconds(), res.loaded.Seconds())

	pid := s.relay.pid()
	cpu0, cpuErr := cpuTime(pid)
	time.Sleep(scaleIdle)
	if cpu1, err := cpuTime(pid); err == nil && cpuErr == nil {
		res.idleCPU = (cpu1 - cpu0).Seconds() / scaleIdle.Seconds()
	}
	res.idleRSS, _, _ = memory(pid)

	// One subscriber alone.
	if err := e.subAdd(ctx, s, "hot", 0, e.cfg.throughputInFlight, "hot.*"); err != nil {
		return res, err
	}
	defer e.rcv.forget("hot")
	res.hot, err = e.measure(ctx, s, e.cfg.throughputEvents, func() error {
		return e.publishFrom(ctx, s, "hot.x", "hot-", 0, e.cfg.throughputEvents)
	}, func() int { return e.rcv.snapshot("hot").distinct })
	if err != nil {
		return res, err
	}
	// Every subscriber, a few events each.
	total := res.subscribers * res.each
	res.spread, err = e.measure(ctx, s, total, func() error {
		return e.publishSpread(ctx, s, res.subscribers, res.each)
	}, func() int { return e.rcv.distinctWithPrefix("sc") - 1 }) // the probe
	if err != nil {
		return res, err
	}

	// One event to every subscriber.
	warned, err := warnings(s.relay.logPath)
	if err != nil {
		return res, err
	}
	before := e.rcv.distinctWithPrefix("sc")
	body := e.body
	e.body = payload(broadcastBody)
	start = time.Now()
	err = e.publishFrom(ctx, s, "all.x", "all-", 0, 1)
	e.body = body
	if err != nil {
		return res, err
	}
	if err := s.waitUntil(ctx, "the event to every subscriber", e.cfg.timeout, func() (bool, error) {
		if res.broadcastFanned == 0 {
			if done, _, err := s.fannedOut(ctx); err == nil && done {
				res.broadcastFanned = time.Since(start)
			}
		}
		return e.rcv.distinctWithPrefix("sc")-before >= res.subscribers, nil
	}, func() string {
		return fmt.Sprintf("%d of %d arrived", e.rcv.distinctWithPrefix("sc")-before, res.subscribers)
	}); err != nil {
		return res, err
	}
	res.broadcastAll = time.Since(start)
	if res.broadcastFanned == 0 {
		res.broadcastFanned = res.broadcastAll // delivered before a poll saw the fan-out done: an upper bound
	}
	after, err := warnings(s.relay.logPath)
	if err != nil {
		return res, err
	}
	res.broadcastWarnings = after - warned
	fmt.Fprintf(os.Stderr, "  one event of %d bytes to all %d: fanned out in %.2fs, delivered in %.2fs, %d warnings\n",
		broadcastBody, res.subscribers, res.broadcastFanned.Seconds(), res.broadcastAll.Seconds(), res.broadcastWarnings)
	_, res.peakRSS, _ = memory(pid)

	// A new subscriber's first delivery.
	addStart := time.Now()
	if err := e.subAdd(ctx, s, "late", 0, 16, "late.*"); err != nil {
		return res, err
	}
	defer e.rcv.forget("late")
	if err := e.publishFrom(ctx, s, "late.x", "late-", 0, 1); err != nil {
		return res, err
	}
	if err := s.waitUntil(ctx, "the new subscriber's first delivery", e.cfg.timeout, func() (bool, error) {
		return e.rcv.snapshot("late").distinct > 0, nil
	}, func() string { return "waiting" }); err != nil {
		return res, err
	}
	res.firstDelivery = time.Since(addStart)

	statusStart := time.Now()
	cmd := exec.CommandContext(ctx, e.bin, "status", "--json", "--lanes", strconv.Itoa(e.cfg.lanes), "--nats", s.url)
	cmd.Env = withoutUserEnv(os.Environ())
	if out, err := cmd.Output(); err != nil {
		return res, fmt.Errorf("relay status: %w: %s", err, out)
	}
	res.status = time.Since(statusStart)
	if res.scrape, res.scrapeBytes, err = scrapeMetrics(ctx, s.relay.metrics); err != nil {
		return res, err
	}
	for i := range res.subscribers {
		e.rcv.forget(id(i))
	}
	return res, nil
}

// warnings counts the lines logged at Warn or above in a relay's log.
func warnings(path string) (int, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strings.Count(string(data), "level=WARN") + strings.Count(string(data), "level=ERROR"), nil
}

// scrapeMetrics reads the relay's /metrics once, as Prometheus would
// (uncompressed), and says how long it took and how big it was.
func scrapeMetrics(ctx context.Context, addr string) (time.Duration, int64, error) {
	start := time.Now()
	resp, err := getMetrics(ctx, addr)
	if err != nil {
		return 0, 0, fmt.Errorf("scraping /metrics: %w", err)
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil {
		return 0, 0, fmt.Errorf("scraping /metrics: %w", err)
	}
	return time.Since(start), n, nil
}

// getMetrics asks the relay's /metrics at addr, uncompressed, as
// Prometheus would; a status other than 200 is an error. The caller closes
// the body.
func getMetrics(ctx context.Context, addr string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("%s", resp.Status)
	}
	return resp, nil
}

// publishSpread publishes each events to every one of n subscribers, round
// by round (t0.x, t1.x, …, then again).
func (e *env) publishSpread(ctx context.Context, s *stack, n, each int) error {
	return e.publishEach(ctx, s, n*each, func(j int) (string, string) {
		return "events.t" + strconv.Itoa(j%n) + ".x", "spread-" + strconv.Itoa(j)
	})
}

// measure publishes with publish and waits until delivered reports n, and
// returns the run: delivered/s from the first publish to the last arrival
// (approximated by the moment the count was reached) and the relay's CPU.
func (e *env) measure(ctx context.Context, s *stack, n int, publish func() error, delivered func() int) (burstRun, error) {
	res := burstRun{events: n}
	cpu0, cpuErr := cpuTime(s.relay.pid())
	start := time.Now()
	if err := publish(); err != nil {
		return res, err
	}
	res.publish = time.Since(start)
	err := s.waitUntil(ctx, "deliveries", e.cfg.timeout, func() (bool, error) {
		return delivered() >= n, nil
	}, func() string { return fmt.Sprintf("%d of %d delivered", delivered(), n) })
	res.total = time.Since(start)
	res.delivered = delivered()
	res.complete = err == nil
	if cpu1, err2 := cpuTime(s.relay.pid()); err2 == nil && cpuErr == nil {
		res.cpu, res.cpuKnown = cpu1-cpu0, true
	}
	return res, err
}

// scaleTable reports a scale run.
func scaleTable(r scaleResult) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "### Scale: %s subscribers on one relay, each with an event type of its own\n\n", thousands(int64(r.subscribers)))
	sb.WriteString("| measure | value |\n| --- | ---: |\n")
	row := func(k, v string) { fmt.Fprintf(&sb, "| %s | %s |\n", k, v) }
	row("storing them in the bucket, s", fmt.Sprintf("%.1f", r.store.Seconds()))
	row("first store → relay delivers to the last one, s", fmt.Sprintf("%.1f", r.loaded.Seconds()))
	row(fmt.Sprintf("idle CPU over %s, share of a core", scaleIdle), fmt.Sprintf("%.3f", r.idleCPU))
	row("idle RSS, MB", fmt.Sprintf("%.0f", float64(r.idleRSS)/(1<<20)))
	for _, x := range []struct {
		name string
		b    burstRun
	}{{"one subscriber alone", r.hot}, {fmt.Sprintf("spread, %d events each", r.each), r.spread}} {
		cpu := "-"
		if per, ok := x.b.cpuPer1000(); ok {
			cpu = fmt.Sprintf("%.3f", per)
		}
		row(x.name+": delivered/s (CPU s per 1,000)", fmt.Sprintf("%s (%s)", thousands(int64(x.b.rate())), cpu))
	}
	if h := r.hot.rate(); h > 0 {
		row("spread / one subscriber", fmt.Sprintf("%.2f", r.spread.rate()/h))
	}
	row(fmt.Sprintf("one event of %s bytes to every subscriber: fanned out / all delivered, s (relay warnings)", thousands(broadcastBody)),
		fmt.Sprintf("%.2f / %.2f (%d)", r.broadcastFanned.Seconds(), r.broadcastAll.Seconds(), r.broadcastWarnings))
	row("peak RSS (VmHWM), MB", fmt.Sprintf("%.0f", float64(r.peakRSS)/(1<<20)))
	row("relay sub add → first delivery, s", fmt.Sprintf("%.2f", r.firstDelivery.Seconds()))
	row("relay status --json, s", fmt.Sprintf("%.2f", r.status.Seconds()))
	row("GET /metrics: s / MB", fmt.Sprintf("%.2f / %.1f", r.scrape.Seconds(), float64(r.scrapeBytes)/(1<<20)))
	return sb.String()
}
