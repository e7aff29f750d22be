package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sourcegraph/conc/pool"

	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/streams"
)

// ---- scale: many subscribers on one relay ----

// scaleResult is what one relay with -scale-subscribers subscribers did.
type scaleResult struct {
	subscribers, each int
	prestored         bool          // stored before the relay started (-scale-prestore)
	store             time.Duration // storing them all in the bucket
	bucketBytes       uint64        // what the bucket's stream holds once they are stored
	loaded            time.Duration // from the first store to the relay delivering to the last one
	ready             time.Duration // the relay's start to its /readyz, with every subscriber already stored when prestored
	idleCPU           float64       // share of a core over the idle window
	idleCPUAfter      float64       // the same once every subscriber had a delivery
	idleRSS           int64         // bytes
	hot, spread       burstRun      // one subscriber alone; every subscriber a few events
	peakRSS           int64         // VmHWM at the end
	firstDelivery     time.Duration // relay sub add → first arrival for a new subscriber, after the writes
	lateErr           string        // why it did not arrive, empty when it did
	// firstDuringWrites is relay sub add → first arrival while every
	// subscriber's record is written again; duringErr says why it did not
	// arrive, empty when it did.
	firstDuringWrites time.Duration
	duringErr         string
	status            time.Duration // wall time of relay status --json, every subscriber
	statusErr         string        // why relay status or GET /metrics failed, empty when neither did
	statusTable       time.Duration // wall time of relay status, its first page
	scrape            time.Duration // wall time of one GET /metrics, its NATS-read gauges refreshed
	scrapeBytes       int64         // the size of that /metrics, uncompressed
	// broadcast is one event of broadcastBody bytes to every subscriber:
	// first publish → fanned out, and → the last arrival, and the relay's
	// warnings meanwhile.
	broadcastFanned, broadcastAll time.Duration
	broadcastWarnings             int
	broadcastErr                  string // why not all arrived, empty when they did
	// three is two more relays started beside the first: their start to
	// ready, and a new subscriber's events, which every relay's fan-out
	// took some of, all delivered (ingested: events each relay fanned out).
	threeReady     []time.Duration
	threeIngested  []float64
	threeDelivered int
	threeErr       string
}

// threeEvents are the events to the subscriber added once three relays run.
const threeEvents = 60

// broadcastBody is the body of the event sent to every subscriber: a
// full payload, 16 KB, which the fan-out stores once for all of them.
const broadcastBody = 16 << 10

// scaleIdle is how long the idle CPU is measured.
const scaleIdle = 10 * time.Second

// scale stores -scale-subscribers subscribers (each with an event type of
// its own, t<i>.*) in the bucket of a running relay (before it starts with
// -scale-prestore), then measures: idle CPU and RSS; one subscriber alone
// (--max-in-flight 64) taking -throughput-events; every subscriber taking
// -scale-events-each events, spread evenly; one event to all; the time
// from `relay sub add` to the first delivery of a new subscriber; the wall
// time of `relay status`; the time and size of one scrape of the relay's
// /metrics; two more relays (their start to ready, and a new subscriber's
// events through all three); and a new subscriber's first delivery while
// every record is written again.
func (e *env) scale(ctx context.Context) (res scaleResult, err error) {
	res = scaleResult{subscribers: e.cfg.scaleSubscribers, each: e.cfg.scaleEach, prestored: e.cfg.scalePrestore}
	fmt.Fprintf(os.Stderr, "scale: %d subscribers on one relay (%d lanes)\n", res.subscribers, e.cfg.lanes)
	var s *stack
	var logPath string
	if res.prestored {
		if s, logPath, err = e.newStack("scale"); err != nil {
			return res, err
		}
		if err := s.startServer(); err != nil {
			return res, errors.Join(err, s.down())
		}
		if err := s.connect(); err != nil {
			return res, errors.Join(err, s.down())
		}
		if err := streams.Ensure(ctx, s.js, streams.Options{}); err != nil {
			return res, errors.Join(err, s.down())
		}
	} else if s, err = e.up(ctx, "scale"); err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, s.down()) }()
	store, err := subscribers.Open(ctx, s.js)
	if err != nil {
		return res, err
	}
	id := func(i int) string { return "sc" + strconv.Itoa(i) }
	putAll := func(ctx context.Context) error {
		p := pool.New().WithErrors().WithMaxGoroutines(32).WithContext(ctx)
		for i := range res.subscribers {
			p.Go(func(ctx context.Context) error {
				return store.Put(ctx, subscribers.Subscriber{ID: id(i), URL: e.hook.URL + "/" + id(i),
					Secrets: []string{e.secret}, Events: []string{"t" + strconv.Itoa(i) + ".*", "all.*"}})
			})
		}
		return p.Wait()
	}
	start := time.Now()
	if err := putAll(ctx); err != nil {
		return res, fmt.Errorf("storing subscribers: %w", err)
	}
	res.store = time.Since(start)
	if info, err := s.js.Stream(ctx, "KV_"+streams.SubscribersBucket); err == nil {
		res.bucketBytes = info.CachedInfo().State.Bytes
	}
	if res.prestored {
		if s.relay, err = startRelay(ctx, e.bin, e.cfg.lanes, s.dir, logPath, nil, "--nats", s.url); err != nil {
			return res, err
		}
	}
	res.ready = s.relay.ready
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
	fmt.Fprintf(os.Stderr, "  stored %d in %.1fs; the relay (ready %.1fs after its start) delivered to the last one %.1fs after the first store\n",
		res.subscribers, res.store.Seconds(), res.ready.Seconds(), res.loaded.Seconds())

	pid := s.relay.pid()
	cpu0, cpuErr := cpuTime(pid)
	time.Sleep(scaleIdle)
	if cpu1, err := cpuTime(pid); err == nil && cpuErr == nil {
		res.idleCPU = (cpu1 - cpu0).Seconds() / scaleIdle.Seconds()
	}
	res.idleRSS, _, _ = memory(pid)
	fmt.Fprintf(os.Stderr, "  idle: %.3f of a core, RSS %.0f MB\n", res.idleCPU, float64(res.idleRSS)/(1<<20))

	// One subscriber alone.
	if err := e.subAdd(ctx, s, "hot", 0, e.cfg.throughputInFlight, "hot.*"); err != nil {
		return res, err
	}
	defer e.rcv.forget("hot")
	res.hot, err = e.measure(ctx, s, e.cfg.throughputEvents, func() error {
		return e.publishFrom(ctx, s, "hot.x", "hot-", 0, e.cfg.throughputEvents)
	}, func() int { return e.rcv.snapshot("hot").distinct })
	if err != nil {
		// Reported as incomplete; the other measures go on.
		fmt.Fprintf(os.Stderr, "  one subscriber alone: %v\n", err)
	}
	// Every subscriber, a few events each.
	total := res.subscribers * res.each
	res.spread, err = e.measure(ctx, s, total, func() error {
		return e.publishSpread(ctx, s, res.subscribers, res.each)
	}, func() int { return e.rcv.distinctWithPrefix("sc") - 1 }) // the probe
	if err != nil {
		fmt.Fprintf(os.Stderr, "  spread: %v\n", err)
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
		res.broadcastErr = err.Error()
		fmt.Fprintf(os.Stderr, "  one event to all: %v\n", err)
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
	if res.firstDelivery, err = e.firstDelivery(ctx, s, "late"); err != nil {
		res.lateErr = err.Error()
		fmt.Fprintf(os.Stderr, "  sub add → first delivery: %v\n", err)
	}
	defer e.rcv.forget("late")
	// Idle again, every subscriber now delivered to on this relay.
	cpu0, cpuErr = cpuTime(pid)
	time.Sleep(scaleIdle)
	if cpu1, err := cpuTime(pid); err == nil && cpuErr == nil {
		res.idleCPUAfter = (cpu1 - cpu0).Seconds() / scaleIdle.Seconds()
	}
	fmt.Fprintf(os.Stderr, "  idle after every subscriber had a delivery: %.3f of a core\n", res.idleCPUAfter)

	statusStart := time.Now()
	if err := e.relayCommand(ctx, s, "status", "--json", "--lanes", strconv.Itoa(e.cfg.lanes)); err != nil {
		res.statusErr = err.Error()
	}
	res.status = time.Since(statusStart)
	statusStart = time.Now()
	if err := e.relayCommand(ctx, s, "status", "--lanes", strconv.Itoa(e.cfg.lanes)); err != nil {
		res.statusErr += cond(res.statusErr != "", "; ", "") + err.Error()
	}
	res.statusTable = time.Since(statusStart)
	if res.scrape, res.scrapeBytes, err = scrapeMetrics(ctx, s.relay.metrics); err != nil {
		res.statusErr += cond(res.statusErr != "", "; ", "") + err.Error()
	}
	fmt.Fprintf(os.Stderr, "  sub add → first delivery %.2fs; relay status --json %.2fs, its table %.2fs; /metrics %.2fs, %.1f MB\n",
		res.firstDelivery.Seconds(), res.status.Seconds(), res.statusTable.Seconds(), res.scrape.Seconds(), float64(res.scrapeBytes)/(1<<20))

	if err := e.threeRelays(ctx, s, &res); err != nil {
		res.threeErr = err.Error()
		fmt.Fprintf(os.Stderr, "  three relays: %v\n", err)
	}

	// A new subscriber while every record is written again.
	writes := make(chan error, 1)
	go func() { writes <- putAll(ctx) }()
	time.Sleep(time.Second)
	res.firstDuringWrites, err = e.firstDelivery(ctx, s, "during")
	defer e.rcv.forget("during")
	if err != nil {
		res.duringErr = err.Error()
	}
	if err := <-writes; err != nil {
		return res, fmt.Errorf("writing the subscribers again: %w", err)
	}
	fmt.Fprintf(os.Stderr, "  sub add → first delivery during the writes %.2fs %s\n", res.firstDuringWrites.Seconds(), res.duringErr)
	for i := range res.subscribers {
		e.rcv.forget(id(i))
	}
	return res, nil
}

// firstDelivery adds the subscriber id (its events id.*), publishes one
// event for it and returns the time from the start of `relay sub add` to
// its arrival, at most a minute.
func (e *env) firstDelivery(ctx context.Context, s *stack, id string) (time.Duration, error) {
	start := time.Now()
	if err := e.subAdd(ctx, s, id, 0, 16, id+".*"); err != nil {
		return 0, err
	}
	if err := e.publishFrom(ctx, s, id+".x", id+"-", 0, 1); err != nil {
		return 0, err
	}
	err := s.waitUntil(ctx, id+"'s first delivery", time.Minute, func() (bool, error) {
		return e.rcv.snapshot(id).distinct > 0, nil
	}, func() string { return "waiting" })
	return time.Since(start), err
}

// threeRelays starts two more relays beside s's (each reads every
// subscriber at its start), then adds a subscriber and publishes
// threeEvents for it, which the three fan-outs share: all delivered shows
// that each relay's view holds it. The relays are stopped on return.
func (e *env) threeRelays(ctx context.Context, s *stack, res *scaleResult) error {
	relays := []*relayProc{s.relay}
	defer func() {
		for _, r := range relays[1:] {
			_ = r.stop()
		}
	}()
	for i := range 2 {
		r, err := startRelay(ctx, e.bin, e.cfg.lanes, s.dir, strings.TrimSuffix(s.relay.logPath, ".log")+fmt.Sprintf("-%d.log", i+2), nil, "--nats", s.url)
		if err != nil {
			return err
		}
		relays = append(relays, r)
		res.threeReady = append(res.threeReady, r.ready)
	}
	ingested := func() ([]float64, error) {
		var out []float64
		for _, r := range relays {
			v, err := scrapeValue(ctx, r.metrics, "relay_events_ingested_total")
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	}
	before, err := ingested()
	if err != nil {
		return err
	}
	if err := e.subAdd(ctx, s, "three", 0, 16, "three.*"); err != nil {
		return err
	}
	defer e.rcv.forget("three")
	if err := e.publishFrom(ctx, s, "three.x", "three-", 0, threeEvents); err != nil {
		return err
	}
	err = s.waitUntil(ctx, "the events through three relays", time.Minute, func() (bool, error) {
		return e.rcv.snapshot("three").distinct >= threeEvents, nil
	}, func() string { return fmt.Sprintf("%d of %d", e.rcv.snapshot("three").distinct, threeEvents) })
	res.threeDelivered = e.rcv.snapshot("three").distinct
	after, err2 := ingested()
	if err2 == nil {
		for i := range after {
			res.threeIngested = append(res.threeIngested, after[i]-before[i])
		}
	}
	fmt.Fprintf(os.Stderr, "  three relays: ready %v; %d of %d delivered; fanned out by each %v\n",
		res.threeReady, res.threeDelivered, threeEvents, res.threeIngested)
	return errors.Join(err, err2)
}

// scrapeValue reads one unlabelled series from the relay's /metrics.
func scrapeValue(ctx context.Context, addr, name string) (float64, error) {
	resp, err := getMetrics(ctx, addr)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("/metrics: no %s", name)
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
	row("the bucket's bytes a subscriber", fmt.Sprintf("%d", r.bucketBytes/uint64(max(r.subscribers, 1))))
	if r.prestored {
		row("stored before the relay started: its start → ready, s", fmt.Sprintf("%.2f", r.ready.Seconds()))
	}
	row("first store → relay delivers to the last one, s", fmt.Sprintf("%.1f", r.loaded.Seconds()))
	row(fmt.Sprintf("idle CPU over %s, share of a core: before any delivery / once every subscriber had one", scaleIdle), fmt.Sprintf("%.3f / %.3f", r.idleCPU, r.idleCPUAfter))
	row("idle RSS, MB", fmt.Sprintf("%.0f", float64(r.idleRSS)/(1<<20)))
	for _, x := range []struct {
		name string
		b    burstRun
	}{{"one subscriber alone", r.hot}, {fmt.Sprintf("spread, %d events each", r.each), r.spread}} {
		cpu := "-"
		if per, ok := x.b.cpuPer1000(); ok {
			cpu = fmt.Sprintf("%.3f", per)
		}
		v := fmt.Sprintf("%s (%s)", thousands(int64(x.b.rate())), cpu)
		if !x.b.complete {
			v += fmt.Sprintf("; incomplete: %d of %d delivered", x.b.delivered, x.b.events)
		}
		row(x.name+": delivered/s (CPU s per 1,000)", v)
	}
	if h := r.hot.rate(); h > 0 {
		row("spread / one subscriber", fmt.Sprintf("%.2f", r.spread.rate()/h))
	}
	row(fmt.Sprintf("one event of %s bytes to every subscriber: fanned out / all delivered, s (relay warnings)", thousands(broadcastBody)),
		fmt.Sprintf("%.2f / %.2f (%d)%s", r.broadcastFanned.Seconds(), r.broadcastAll.Seconds(), r.broadcastWarnings, cond(r.broadcastErr != "", "; "+r.broadcastErr, "")))
	row("peak RSS (VmHWM), MB", fmt.Sprintf("%.0f", float64(r.peakRSS)/(1<<20)))
	row("relay sub add → first delivery, s", fmt.Sprintf("%.2f", r.firstDelivery.Seconds())+cond(r.lateErr != "", "; none: "+r.lateErr, ""))
	during := fmt.Sprintf("%.2f", r.firstDuringWrites.Seconds())
	if r.duringErr != "" {
		during = "none: " + r.duringErr
	}
	row("relay sub add → first delivery while every record is written again, s", during)
	row("relay status --json (every subscriber) / relay status (first page), s", fmt.Sprintf("%.2f / %.2f", r.status.Seconds(), r.statusTable.Seconds())+cond(r.statusErr != "", "; "+r.statusErr, ""))
	row("GET /metrics: s / MB", fmt.Sprintf("%.2f / %.1f", r.scrape.Seconds(), float64(r.scrapeBytes)/(1<<20)))
	three := fmt.Sprintf("ready %s s; %d of %d delivered, fanned out by each %v", secondsList(r.threeReady), r.threeDelivered, threeEvents, r.threeIngested)
	if r.threeErr != "" {
		three += "; " + r.threeErr
	}
	row("two more relays: start → ready; a new subscriber's events through three", three)
	return sb.String()
}

// cond is a if ok, else b.
func cond(ok bool, a, b string) string {
	if ok {
		return a
	}
	return b
}

// secondsList formats durations as seconds, separated by " / ".
func secondsList(ds []time.Duration) string {
	var out []string
	for _, d := range ds {
		out = append(out, fmt.Sprintf("%.2f", d.Seconds()))
	}
	return strings.Join(out, " / ")
}
