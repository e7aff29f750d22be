package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/streams"
)

// eventPrefix starts every event id this program publishes; a fan-out copy's
// Nats-Msg-Id is <event id>.<subscriber>.
const eventPrefix = "e-"

// ---- burst ----

// burstRun is one burst on a fresh server and relay.
type burstRun struct {
	run       int
	events    int
	delivered int
	requests  int
	publish   time.Duration // first publish → last PubAck
	total     time.Duration // first publish → last arrival
	gap       time.Duration // worst idle gap between two arrivals
	gapAt     time.Duration // its start, after the first publish
	gapAfter  int           // deliveries before it
	extra     int64         // JetStream writes beyond the fan-out's copies
	counts    writeCounts
	complete  bool
	stalls    []string      // what the consumers looked like while nothing arrived
	cpu       time.Duration // the relay's CPU time (user + system) from the first publish to the end of the wait
	cpuKnown  bool          // cpu was read (Linux only)
}

// burstSpec says what one burst run does.
type burstSpec struct {
	name     string // the stack's and the subscriber's
	prefix   string // starts the run's event ids
	events   int
	inFlight int           // the subscriber's --max-in-flight
	timeout  time.Duration // longest wait for the deliveries
	// count classifies the writes with a plain subscriber on deliveries.>
	// and retries.>; it costs the server a copy of every write.
	count bool
	// env is extra environment for the relay process (KEY=VALUE), after
	// what it inherits: how the tracing scenario turns tracing on for its
	// own relays only. None when nil.
	env []string
	// header gives the i-th event headers beside its Nats-Msg-Id, a new
	// map each call (see publishEachWith): how the tracing scenario gives
	// half the events a traceparent. None when nil, as every other
	// scenario publishes.
	header func(i int) nats.Header
	// args are extra relay run flags: how the records scenario turns
	// records off. None when nil.
	args []string
	// inspect, when set, is called once the deliveries are in, before the
	// stack goes down: how the records scenario reads ATTEMPTS.
	inspect func(ctx context.Context, s *stack) error
}

func (r burstRun) rate() float64 {
	if r.delivered == 0 || r.total <= 0 {
		return 0
	}
	return float64(r.delivered) / r.total.Seconds()
}
func (r burstRun) extraPer() float64 {
	return float64(r.extra) / float64(max(1, r.delivered))
}

func (e *env) burst(ctx context.Context) ([]burstRun, error) {
	var out []burstRun
	fmt.Fprintf(os.Stderr, "burst: %d runs of %d events to one subscriber (--rate 0 --max-in-flight %d)\n",
		e.cfg.burstRuns, e.cfg.burstEvents, e.cfg.burstInFlight)
	for i := 1; i <= e.cfg.burstRuns && ctx.Err() == nil; i++ {
		res, err := e.burstOne(ctx, i, burstSpec{
			name: fmt.Sprintf("burst%02d", i), prefix: fmt.Sprintf("%sb%02d-", eventPrefix, i),
			events: e.cfg.burstEvents, inFlight: e.cfg.burstInFlight, timeout: e.cfg.burstTimeout, count: true,
		})
		if err != nil {
			return out, fmt.Errorf("burst run %d: %w", i, err)
		}
		fmt.Fprintf(os.Stderr, "  [%d] %d of %d delivered in %.2fs (%.0f/s, publish %.2fs); worst idle gap %.3fs at +%.2fs after %d; %d extra writes (%d puts, %d bring-backs, %d parks)\n",
			i, res.delivered, res.events, res.total.Seconds(), res.rate(), res.publish.Seconds(),
			res.gap.Seconds(), res.gapAt.Seconds(), res.gapAfter, res.extra,
			res.counts.puts, res.counts.bringBacks, res.counts.parks)
		out = append(out, res)
	}
	return out, ctx.Err()
}

// burstOne is one run of spec on a fresh server and relay; i numbers it in
// the progress lines.
func (e *env) burstOne(ctx context.Context, i int, spec burstSpec) (res burstRun, err error) {
	res = burstRun{run: i, events: spec.events}
	s, err := e.upWith(ctx, spec.name, spec.env, spec.args...)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, s.down()) }()
	id := spec.name
	if err := e.subAdd(ctx, s, id, 0, spec.inFlight, "x"); err != nil {
		return res, err
	}
	defer e.rcv.forget(id)
	counts := func() writeCounts { return writeCounts{} }
	if spec.count {
		counter, cnc, err := s.counter()
		if err != nil {
			return res, err
		}
		defer cnc.Close()
		defer counter.stop()
		counts = counter.counts
	}

	opCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	before, err := s.lastSeqs(opCtx)
	if err != nil {
		return res, err
	}
	c0 := counts()
	cpu0, cpuErr := cpuTime(s.relay.pid())
	start := time.Now()
	if err := e.publishWith(ctx, s, "x", spec.prefix, res.events, spec.header); err != nil {
		return res, err
	}
	res.publish = time.Since(start)

	deadline := start.Add(spec.timeout)
	var lastDiag time.Time
	for {
		snap := e.rcv.snapshot(id)
		if snap.distinct >= res.events {
			res.complete = true
			break
		}
		now := time.Now()
		last := snap.last
		if last.IsZero() {
			last = start
		}
		if idle := now.Sub(last); idle >= e.cfg.stallGap && now.Sub(lastDiag) >= 5*time.Second {
			lastDiag = now
			diag := fmt.Sprintf("+%.1fs, nothing arrived for %.1fs, %d of %d delivered: %s",
				now.Sub(start).Seconds(), idle.Seconds(), snap.distinct, res.events, s.lanesState(opCtx, e.cfg.lanes))
			res.stalls = append(res.stalls, diag)
			fmt.Fprintf(os.Stderr, "  [%d] stall: %s\n", i, diag)
		}
		if s.relay.exited() {
			return res, exitErr(s.relay)
		}
		if now.After(deadline) {
			fmt.Fprintf(os.Stderr, "  [%d] gave up after %v: %d of %d delivered; relay log %s\n",
				i, spec.timeout, snap.distinct, res.events, s.relay.logPath)
			break
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	if cpu1, err := cpuTime(s.relay.pid()); err == nil && cpuErr == nil {
		res.cpu, res.cpuKnown = cpu1-cpu0, true
	}
	snap := e.rcv.snapshot(id)
	res.delivered, res.requests = snap.distinct, snap.requests
	res.total = snap.last.Sub(start)
	res.gap, res.gapAt, res.gapAfter = snap.gap, snap.gapAt+snap.start.Sub(start), snap.gapAfter
	after, err := s.lastSeqs(opCtx)
	if err != nil {
		return res, err
	}
	res.extra = after.minus(before) - int64(res.events)
	res.counts = counts().minus(c0)
	if spec.inspect != nil {
		return res, spec.inspect(opCtx, s)
	}
	return res, nil
}

// counter starts a write counter on its own connection to the stack's
// server.
func (s *stack) counter() (*writeCounter, *nats.Conn, error) {
	nc, err := nats.Connect(s.url, nats.Name("bench/engine counter"))
	if err != nil {
		return nil, nil, err
	}
	c, err := countWrites(nc, eventPrefix)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return c, nc, nil
}

// ---- writes ----

// writesResult is the backlog at a limited rate, watched for a window once
// it has been fanned out and has left its lane.
type writesResult struct {
	events int
	rate   float64
	window time.Duration

	publish, fanout, overflow time.Duration // from the first publish

	// From the first publish until the backlog left the lane.
	extraBacklog     int64
	deliveredBacklog int
	countsBacklog    writeCounts
	overflowStart    uint64

	// During the window.
	extraWindow     int64
	deliveredWindow int
	countsWindow    writeCounts
	overflowEnd     uint64
	requests        int
}

func (r writesResult) perBacklogMsg() float64 { return float64(r.extraBacklog) / float64(r.events) }
func (r writesResult) perDelivered() float64 {
	return float64(r.extraWindow) / float64(max(1, r.deliveredWindow))
}

func (e *env) writes(ctx context.Context) (res *writesResult, err error) {
	cfg := e.cfg
	fmt.Fprintf(os.Stderr, "writes: a backlog of %d events to one subscriber at --rate %g, watched for %v\n",
		cfg.writesEvents, cfg.writesRate, cfg.writesWindow)
	s, err := e.up(ctx, "writes")
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, s.down()) }()
	const id = "backlog100"
	if err := e.subAdd(ctx, s, id, cfg.writesRate, subscribers.DefaultMaxInFlight, "x"); err != nil {
		return nil, err
	}
	defer e.rcv.forget(id)
	counter, cnc, err := s.counter()
	if err != nil {
		return nil, err
	}
	defer cnc.Close()
	defer counter.stop()
	lane := subscribers.LaneFor(id, cfg.lanes)

	r := &writesResult{events: cfg.writesEvents, rate: cfg.writesRate, window: cfg.writesWindow}
	opCtx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	s0, err := s.lastSeqs(opCtx)
	if err != nil {
		return nil, err
	}
	c0 := counter.counts()
	start := time.Now()
	if err := e.publish(opCtx, s, "x", eventPrefix+"w-", r.events); err != nil {
		return nil, err
	}
	r.publish = time.Since(start)
	if r.fanout, r.overflow, err = e.fanOutAndOverflow(opCtx, s, id, lane, start, nil); err != nil {
		return r, err
	}
	s1, err := s.lastSeqs(opCtx)
	if err != nil {
		return r, err
	}
	c1 := counter.counts()
	d1 := e.rcv.snapshot(id).distinct
	if r.overflowStart, err = s.inOverflow(opCtx, id); err != nil {
		return r, err
	}
	r.extraBacklog = s1.minus(s0) - int64(r.events)
	r.deliveredBacklog = d1
	r.countsBacklog = c1.minus(c0)
	fmt.Fprintf(os.Stderr, "  fanned out in %.1fs, left the lane in %.1fs: %d in overflow, %d delivered, %d extra writes so far; watching for %v\n",
		r.fanout.Seconds(), r.overflow.Seconds(), r.overflowStart, d1, r.extraBacklog, cfg.writesWindow)

	select {
	case <-ctx.Done():
		return r, ctx.Err()
	case <-s.relay.done:
		return r, exitErr(s.relay)
	case <-time.After(cfg.writesWindow):
	}
	s2, err := s.lastSeqs(opCtx)
	if err != nil {
		return r, err
	}
	c2 := counter.counts()
	snap := e.rcv.snapshot(id)
	if r.overflowEnd, err = s.inOverflow(opCtx, id); err != nil {
		return r, err
	}
	r.extraWindow = s2.minus(s1)
	r.deliveredWindow = snap.distinct - d1
	r.countsWindow = c2.minus(c1)
	r.requests = snap.requests
	fmt.Fprintf(os.Stderr, "  window: %d delivered (%.1f/s), %d extra writes (%d bring-backs, %d puts, %d parks); %d in overflow\n",
		r.deliveredWindow, float64(r.deliveredWindow)/cfg.writesWindow.Seconds(), r.extraWindow,
		r.countsWindow.bringBacks, r.countsWindow.puts, r.countsWindow.parks, r.overflowEnd)
	return r, nil
}

// fanOutAndOverflow waits until the fan-out has copied every event (its
// consumer has nothing pending or unacknowledged) and then until the
// subscriber's lane has nothing pending (the backlog beyond what the
// subscriber holds went to overflow). Both durations are from start.
//
// fannedOut, when not nil, is called once the fan-out is done, before the
// wait for the lane.
func (e *env) fanOutAndOverflow(ctx context.Context, s *stack, id, lane string, start time.Time, fannedOut func()) (fanout, overflow time.Duration, err error) {
	var fan, laneInfo *jetstream.ConsumerInfo
	progress := func() string {
		msg := ""
		if fan != nil {
			msg = fmt.Sprintf("fanout pending %d ack_pending %d", fan.NumPending, fan.NumAckPending)
		}
		if laneInfo != nil {
			msg += fmt.Sprintf("; %s pending %d ack_pending %d", streams.LaneConsumer(lane), laneInfo.NumPending, laneInfo.NumAckPending)
		}
		if n, err := s.inOverflow(ctx, id); err == nil {
			msg += fmt.Sprintf("; %d in overflow", n)
		}
		if rss, _, err := memory(s.relay.pid()); err == nil {
			msg += fmt.Sprintf("; relay RSS %.0f MB", mb(rss))
		}
		return msg
	}
	err = s.waitUntil(ctx, "fan-out", e.cfg.timeout, func() (bool, error) {
		done, info, err := s.fannedOut(ctx)
		fan = info
		return done, err
	}, progress)
	if err != nil {
		return 0, 0, err
	}
	fanout = time.Since(start)
	if fannedOut != nil {
		fannedOut()
	}
	err = s.waitUntil(ctx, "overflow", e.cfg.timeout, func() (bool, error) {
		info, err := s.consumerInfo(ctx, streams.Deliveries, streams.LaneConsumer(lane))
		laneInfo = info
		return err == nil && info.NumPending == 0, err
	}, progress)
	return fanout, time.Since(start), err
}

// ---- backlog and its lane-mate ----

type latency struct {
	published, arrived int
	p50, p99, max      time.Duration
}

type backlogResult struct {
	events   int
	rate     float64
	id       string
	mate     string
	lane     string
	mateN    int
	mateRate float64
	publish  time.Duration
	fanout   time.Duration
	overflow time.Duration

	rssBefore, hwmBefore int64 // after the baseline, before the backlog
	rss, hwm             int64 // after the backlog settled
	hwmEnd               int64 // after the lane-mate's run beside it
	inOverflow           uint64
	delivered            int // of the backlog, when the RSS was read

	baseline, during, beside latency
}

func (e *env) backlog(ctx context.Context) (res *backlogResult, err error) {
	cfg := e.cfg
	r := &backlogResult{events: cfg.backlogEvents, rate: cfg.backlogRate, id: "backlog"}
	r.lane = subscribers.LaneFor(r.id, cfg.lanes)
	for k := 0; ; k++ {
		if m := "mate" + strconv.Itoa(k); subscribers.LaneFor(m, cfg.lanes) == r.lane {
			r.mate = m
			break
		}
	}
	r.mateRate = cfg.mateRate
	r.mateN = max(1, int(math.Round(cfg.mateRate*cfg.mateFor.Seconds())))
	fmt.Fprintf(os.Stderr, "backlog: %d events to %s at --rate %g; lane-mate %s (lane %s, --rate 0), %d events at %g/s before and beside it\n",
		r.events, r.id, r.rate, r.mate, r.lane, r.mateN, cfg.mateRate)
	s, err := e.up(ctx, "backlog")
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, s.down()) }()
	if err := e.subAdd(ctx, s, r.id, r.rate, subscribers.DefaultMaxInFlight, "x"); err != nil {
		return nil, err
	}
	defer e.rcv.forget(r.id)
	if err := e.subAdd(ctx, s, r.mate, 0, subscribers.DefaultMaxInFlight, "y"); err != nil {
		return nil, err
	}
	defer e.rcv.forget(r.mate)

	// A warm-up, not measured: the first deliveries of a new subscriber
	// open its connections and fill the relay's caches.
	if _, err = e.mate(ctx, s, r.mate, "warm", max(1, int(cfg.mateRate)), 30*time.Second); err != nil {
		return r, fmt.Errorf("lane-mate warm-up: %w", err)
	}
	if r.baseline, err = e.mate(ctx, s, r.mate, "base", r.mateN, 30*time.Second); err != nil {
		return r, fmt.Errorf("lane-mate baseline: %w", err)
	}
	fmt.Fprintf(os.Stderr, "  baseline: %s\n", r.baseline)
	if r.rssBefore, r.hwmBefore, err = memory(s.relay.pid()); err != nil {
		return r, err
	}

	opCtx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	start := time.Now()
	if err := e.publishProgress(opCtx, s, "x", eventPrefix+"k-", r.events); err != nil {
		return r, err
	}
	r.publish = time.Since(start)
	fmt.Fprintf(os.Stderr, "  published %d events in %.1fs\n", r.events, r.publish.Seconds())
	// While the backlog leaves the lane for overflow (the fan-out is done,
	// the lane consumer still has much of it pending), the lane-mate's new
	// deliveries are queued on the same consumer.
	type measured struct {
		l   latency
		err error
	}
	duringCtx, stopDuring := context.WithCancel(ctx)
	defer stopDuring()
	var during chan measured
	startDuring := func() {
		during = make(chan measured, 1)
		go func() {
			l, err := e.mate(duringCtx, s, r.mate, "during", r.mateN, cfg.timeout)
			during <- measured{l, err}
		}()
	}
	r.fanout, r.overflow, err = e.fanOutAndOverflow(opCtx, s, r.id, r.lane, start, startDuring)
	if during != nil {
		if err != nil {
			stopDuring()
		}
		m := <-during
		r.during = m.l
		if err == nil && m.err != nil {
			err = fmt.Errorf("lane-mate while the backlog leaves the lane: %w", m.err)
		}
	}
	if err != nil {
		return r, err
	}
	fmt.Fprintf(os.Stderr, "  while the backlog left the lane: %s\n", r.during)
	fmt.Fprintf(os.Stderr, "  fanned out %.1fs, left the lane %.1fs after the first publish; settling %v\n",
		r.fanout.Seconds(), r.overflow.Seconds(), cfg.settle)
	select {
	case <-ctx.Done():
		return r, ctx.Err()
	case <-s.relay.done:
		return r, exitErr(s.relay)
	case <-time.After(cfg.settle):
	}
	if r.rss, r.hwm, err = memory(s.relay.pid()); err != nil {
		return r, err
	}
	if r.inOverflow, err = s.inOverflow(opCtx, r.id); err != nil {
		return r, err
	}
	r.delivered = e.rcv.snapshot(r.id).distinct
	fmt.Fprintf(os.Stderr, "  relay VmRSS %.0f MB, VmHWM %.0f MB; %d in overflow, %d delivered\n",
		mb(r.rss), mb(r.hwm), r.inOverflow, r.delivered)

	if r.beside, err = e.mate(ctx, s, r.mate, "beside", r.mateN, 30*time.Second); err != nil {
		return r, fmt.Errorf("lane-mate beside the backlog: %w", err)
	}
	fmt.Fprintf(os.Stderr, "  beside the backlog: %s\n", r.beside)
	if _, r.hwmEnd, err = memory(s.relay.pid()); err != nil {
		return r, err
	}
	return r, nil
}

func (l latency) String() string {
	return fmt.Sprintf("%d of %d arrived, p50 %.1f ms, p99 %.1f ms, max %.1f ms",
		l.arrived, l.published, ms(l.p50), ms(l.p99), ms(l.max))
}

// mate publishes n events on events.y at -mate-rate, each on its own
// schedule (not behind the previous PubAck), and measures the time from the
// publish call to the first arrival of its webhook-id at subscriber id.
// It waits up to wait after the last PubAck for them to arrive; those that
// have not are reported as missing.
func (e *env) mate(ctx context.Context, s *stack, id, tag string, n int, wait time.Duration) (latency, error) {
	e.rcv.forget(id)
	out := latency{published: n}
	prefix := eventPrefix + "m" + tag + "-"
	sent := make([]time.Time, n)
	acks := make([]jetstream.PubAckFuture, 0, n)
	interval := time.Duration(float64(time.Second) / e.cfg.mateRate)
	start := time.Now()
	for i := range n {
		if wait := time.Until(start.Add(time.Duration(i) * interval)); wait > 0 {
			select {
			case <-ctx.Done():
				return out, ctx.Err()
			case <-time.After(wait):
			}
		}
		sent[i] = time.Now()
		f, err := s.js.PublishMsgAsync(&nats.Msg{Subject: "events.y", Data: e.body},
			jetstream.WithMsgID(prefix+strconv.Itoa(i)))
		if err != nil {
			return out, err
		}
		acks = append(acks, f)
	}
	if err := waitAcks(ctx, acks); err != nil {
		return out, err
	}
	err := s.waitUntil(ctx, "lane-mate deliveries", wait, func() (bool, error) {
		return e.rcv.snapshot(id).distinct >= n, nil
	}, func() string { return fmt.Sprintf("%d of %d arrived", e.rcv.snapshot(id).distinct, n) })
	if err != nil && ctx.Err() != nil {
		return out, err
	}
	// Missing deliveries are reported as such, not as an error.
	arrived := e.rcv.arrivals(id, prefix) // one request for all of them
	var lat []time.Duration
	for i := range n {
		if at, ok := arrived[prefix+strconv.Itoa(i)]; ok {
			lat = append(lat, at.Sub(sent[i]))
		}
	}
	out.arrived = len(lat)
	if len(lat) > 0 {
		slices.Sort(lat)
		out.p50, out.p99, out.max = percentile(lat, 0.50), percentile(lat, 0.99), lat[len(lat)-1]
	}
	return out, nil
}

// percentile is the nearest-rank percentile of sorted values.
func percentile(sorted []time.Duration, p float64) time.Duration {
	k := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(k, 0), len(sorted)-1)]
}

// publishProgress is publish with a progress line on stderr every 5 s.
func (e *env) publishProgress(ctx context.Context, s *stack, eventType, prefix string, n int) error {
	start := time.Now()
	last := start
	const step = 50 * publishChunk
	for from := 0; from < n; from += step {
		count := min(step, n-from)
		if err := e.publishFrom(ctx, s, eventType, prefix, from, count); err != nil {
			return err
		}
		if now := time.Now(); now.Sub(last) >= 5*time.Second {
			last = now
			fmt.Fprintf(os.Stderr, "  %5.0fs publishing: %d of %d\n", now.Sub(start).Seconds(), from+count, n)
		}
	}
	return nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
func mb(b int64) float64         { return float64(b) / (1 << 20) }
