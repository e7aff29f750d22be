package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/streams"
)

// ---- scheduled: events held until their Relay-Deliver-At ----

const (
	// scheduledLead is from the first publish call to the first due time:
	// long enough for the publish and the fan-out of the default 100,000
	// events on this machine (about 1 s and a few s), so that the window
	// before the first due time shows what holding them costs, and the
	// lateness is the schedule's, not a backlog's.
	scheduledLead = 10 * time.Second
	// scheduledIdle is how long the processes' CPU is read before
	// publishing, the reference for the windows after it.
	scheduledIdle = 5 * time.Second
	// scheduledSample is how often the processes' VmRSS is read for the
	// peaks: /proc/<pid>/status is cheap, and a short spike still shows.
	scheduledSample = 250 * time.Millisecond
	// scheduledWarmup events without a due time, not measured, open the
	// subscriber's connections before the idle window.
	scheduledWarmup = 100
	// scheduledProgress is how often a line on stderr says where a run of
	// ten minutes and more stands.
	scheduledProgress = 30 * time.Second
)

// procFigures is one process's memory and CPU over the scheduled scenario's
// windows: idle (before publishing), waiting (last PubAck → first due
// time), holding (fan-out done → first due time, the part of waiting that
// only holds) and firing (first → last due time). CPU is a share of one
// core, NaN when it could not be read or the window is empty.
type procFigures struct {
	idleRSS  int64 // VmRSS after the idle window, bytes
	waitPeak int64 // the highest VmRSS sampled while waiting
	firePeak int64 // the highest VmRSS sampled from the first due time to the end of the drain
	hwm      int64 // VmHWM at the end: the process's peak over its life, the publish included

	idleCPU, waitCPU, holdCPU, fireCPU float64
}

// scheduledResult is what the scheduled scenario measured: events whose
// Relay-Deliver-At is in the future, held by relay until then.
type scheduledResult struct {
	events int
	span   time.Duration // the due times' spread
	lead   time.Duration // first publish call → first due time
	server string        // where the NATS server ran: "in-process" (in this program) or "embedded" (in the relay)

	publish   time.Duration // first publish call → last PubAck
	fanout    time.Duration // first publish call → the fan-out consumer had nothing pending or unacked (sampled every 250 ms)
	fannedOut bool          // it was seen so, before the end
	held      uint64        // messages in RETRIES at the first due time (nothing else waits there in this scenario)

	requests int // requests that reached the subscriber, duplicates included
	distinct int // webhook-ids that reached it
	arrived  int // of the published events
	early    int // events whose first request came before their due time; the contract allows none
	earliest time.Duration

	// Lateness, first arrival − due time, over every event that arrived,
	// an early one negative; nearest-rank percentiles.
	p50, p90, p99, max time.Duration
	drain              time.Duration // last due time → last arrival

	relay   procFigures // the relay process (its embedded server included with -embedded)
	program procFigures // this program's process: the in-process nats-server (without -embedded), the publisher
}

// missing is how many of the published events never arrived.
func (r scheduledResult) missing() int { return r.events - r.arrived }

// duplicates is how many requests repeated a webhook-id.
func (r scheduledResult) duplicates() int { return r.requests - r.distinct }

// procWatch reads the CPU time and the memory of the relay (pids[0]) and of
// this program (pids[1]).
type procWatch struct{ pids [2]int }

// cpuMark is both processes' CPU time at one moment.
type cpuMark struct {
	at  time.Time
	cpu [2]time.Duration
	ok  bool // both were read
}

func (w procWatch) mark() cpuMark {
	m := cpuMark{at: time.Now(), ok: true}
	for i, pid := range w.pids {
		c, err := cpuTime(pid)
		m.cpu[i], m.ok = c, m.ok && err == nil
	}
	return m
}

// cpuShare is each process's CPU time between a and b as a share of one
// core; NaN when either mark failed or the window is empty.
func cpuShare(a, b cpuMark) (relay, program float64) {
	d := b.at.Sub(a.at).Seconds()
	if !a.ok || !b.ok || d <= 0 {
		return math.NaN(), math.NaN()
	}
	return (b.cpu[0] - a.cpu[0]).Seconds() / d, (b.cpu[1] - a.cpu[1]).Seconds() / d
}

// sample raises the peaks to both processes' VmRSS now. A failed read
// leaves them as they are: the CPU marks say whether /proc is readable.
func (w procWatch) sample(relayPeak, programPeak *int64) {
	for i, peak := range []*int64{relayPeak, programPeak} {
		if rss, _, err := memory(w.pids[i]); err == nil {
			*peak = max(*peak, rss)
		}
	}
}

// scheduled publishes -scheduled-events events to one subscriber (--rate 0
// --max-in-flight 64), each with a Relay-Deliver-At: the due times evenly
// spaced over [first publish + scheduledLead, + -scheduled-span], given to
// the events in a shuffled order (fixed seed), so that the relay gets them
// out of order, as business times come. The question is twofold: is any
// request sent before its time (the contract says never), and how late is
// each; and what do the held events cost while they wait (memory, CPU) and
// when they fire. Lateness is measured per event from the due time the
// publisher gave it to the first arrival of its webhook-id (the receiver's
// wall clock, the same machine's). The relay and this program (which runs
// the nats-server, unless -embedded puts it in the relay) are sampled
// throughout: VmRSS every 250 ms for the peaks, CPU time at each window's
// ends. After the last due time it waits up to latencyWait for those still
// missing, which are then counted as such.
func (e *env) scheduled(ctx context.Context) (res *scheduledResult, err error) {
	cfg := e.cfg
	r := &scheduledResult{events: cfg.scheduledEvents, span: cfg.scheduledSpan, lead: scheduledLead, server: "in-process"}
	if cfg.embedded {
		r.server = "embedded"
	}
	fmt.Fprintf(os.Stderr, "scheduled: %d events to one subscriber (--rate 0 --max-in-flight %d), %s spread over %v from %v after the first publish\n",
		r.events, unlimitedInFlight, streams.HeaderDeliverAt, r.span, r.lead)
	s, err := e.up(ctx, "scheduled")
	if err != nil {
		return r, err
	}
	defer func() { err = errors.Join(err, s.down()) }()
	const id = "sched"
	if err := e.subAdd(ctx, s, id, 0, unlimitedInFlight, "x"); err != nil {
		return r, err
	}
	defer e.rcv.forget(id)

	// A warm-up, not measured: the first deliveries of a new subscriber
	// open its connections and fill the relay's caches.
	if err := e.publish(ctx, s, "x", eventPrefix+"sw-", scheduledWarmup); err != nil {
		return r, fmt.Errorf("warm-up: %w", err)
	}
	if err := s.waitUntil(ctx, "warm-up deliveries", latencyWait, func() (bool, error) {
		return e.rcv.snapshot(id).distinct >= scheduledWarmup, nil
	}, func() string { return fmt.Sprintf("%d of %d arrived", e.rcv.snapshot(id).distinct, scheduledWarmup) }); err != nil {
		return r, fmt.Errorf("warm-up: %w", err)
	}
	e.rcv.forget(id)

	w := procWatch{pids: [2]int{s.relay.pid(), os.Getpid()}}
	idle0 := w.mark()
	if err := sleepCtx(ctx, s, scheduledIdle); err != nil {
		return r, err
	}
	idle1 := w.mark()
	r.relay.idleCPU, r.program.idleCPU = cpuShare(idle0, idle1)
	r.relay.idleRSS, _, _ = memory(w.pids[0])
	r.program.idleRSS, _, _ = memory(w.pids[1])
	fmt.Fprintf(os.Stderr, "  idle: relay RSS %.0f MB, CPU %s of a core; this program RSS %.0f MB, CPU %s\n",
		mb(r.relay.idleRSS), pct(r.relay.idleCPU), mb(r.program.idleRSS), pct(r.program.idleCPU))

	// The due times, with no monotonic reading: they are wall-clock
	// statements, compared with the receiver's wall-clock arrivals.
	n := r.events
	slots := rand.New(rand.NewPCG(1, uint64(n))).Perm(n)
	start := time.Now()
	firstDue := start.Round(0).Add(r.lead)
	lastDue := firstDue.Add(r.span)
	due := make([]time.Time, n)
	for i, k := range slots {
		due[i] = firstDue
		if n > 1 {
			due[i] = firstDue.Add(time.Duration(float64(r.span) * float64(k) / float64(n-1)))
		}
	}
	prefix := eventPrefix + "s-"
	if err := e.publishDue(ctx, s, "events.x", prefix, due); err != nil {
		return r, err
	}
	r.publish = time.Since(start)
	fmt.Fprintf(os.Stderr, "  published %d in %.1fs; the first is due at +%v, the last at +%v\n",
		n, r.publish.Seconds(), r.lead, r.lead+r.span)

	h := &scheduledWatch{e: e, s: s, w: w, r: r, id: id, start: start, firstDue: firstDue}
	wait0 := w.mark()
	if err := h.until(ctx, firstDue, &r.relay.waitPeak, &r.program.waitPeak, nil); err != nil {
		return r, err
	}
	wait1 := w.mark()
	r.relay.waitCPU, r.program.waitCPU = cpuShare(wait0, wait1)
	r.relay.holdCPU, r.program.holdCPU = math.NaN(), math.NaN()
	if r.fannedOut { // before the first due time
		r.relay.holdCPU, r.program.holdCPU = cpuShare(h.fanoutMark, wait1)
	}
	opCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if r.held, err = s.retriesHeld(opCtx); err != nil {
		return r, err
	}
	fmt.Fprintf(os.Stderr, "  at the first due time: %d in RETRIES, %d arrived already (early); relay CPU while waiting %s of a core\n",
		r.held, e.rcv.snapshot(id).distinct, pct(r.relay.waitCPU))

	if err := h.until(ctx, lastDue, &r.relay.firePeak, &r.program.firePeak, nil); err != nil {
		return r, err
	}
	fire1 := w.mark()
	r.relay.fireCPU, r.program.fireCPU = cpuShare(wait1, fire1)
	// The drain: those not yet arrived, for at most latencyWait.
	err = h.until(ctx, lastDue.Add(latencyWait), &r.relay.firePeak, &r.program.firePeak, func() bool {
		return e.rcv.snapshot(id).distinct >= n
	})
	if err != nil {
		return r, err
	}
	_, r.relay.hwm, _ = memory(w.pids[0])
	_, r.program.hwm, _ = memory(w.pids[1])

	// Missing deliveries are reported as such, not as an error.
	arrived := e.rcv.arrivals(id, prefix) // one request for all of them
	late := make([]time.Duration, 0, n)
	for i := range n {
		at, ok := arrived[prefix+strconv.Itoa(i)]
		if !ok {
			continue
		}
		d := at.Sub(due[i])
		if d < 0 {
			r.early++
			r.earliest = max(r.earliest, -d)
		}
		late = append(late, d)
	}
	r.arrived = len(late)
	snap := e.rcv.snapshot(id)
	r.requests, r.distinct = snap.requests, snap.distinct
	if len(late) > 0 {
		slices.Sort(late)
		r.p50, r.p90, r.p99, r.max = percentile(late, 0.50), percentile(late, 0.90), percentile(late, 0.99), late[len(late)-1]
		r.drain = snap.last.Sub(lastDue)
	}
	fmt.Fprintf(os.Stderr, "  %d of %d arrived, %d early (the earliest %.1fs before its time); lateness p50 %.1f ms, p99 %.1f ms, max %.1f ms; relay CPU while firing %s of a core\n",
		r.arrived, n, r.early, r.earliest.Seconds(), ms(r.p50), ms(r.p99), ms(r.max), pct(r.relay.fireCPU))
	return r, nil
}

// scheduledWatch is the scheduled scenario's wait: it samples the memory,
// notes when the fan-out is done and prints progress.
type scheduledWatch struct {
	e          *env
	s          *stack
	w          procWatch
	r          *scheduledResult
	id         string
	start      time.Time // the first publish call
	firstDue   time.Time
	fanoutMark cpuMark // when the fan-out was seen done; zero until then
	progress   time.Time
}

// until samples both processes' VmRSS into the peaks every scheduledSample
// until end, or until stop (when not nil) holds, ctx is done or the relay
// exits. Until the fan-out is seen done it asks for its consumer at each
// sample: a small request, and the only one made of the server while the
// events are held, so that the CPU figures are relay's and the server's
// own. The receiver is asked only for the progress line, every 30 s, and by
// stop.
func (h *scheduledWatch) until(ctx context.Context, end time.Time, relayPeak, programPeak *int64, stop func() bool) error {
	timer := time.NewTimer(time.Hour) // reset before each wait
	defer timer.Stop()
	for {
		h.w.sample(relayPeak, programPeak)
		if !h.r.fannedOut {
			done, _, err := h.s.fannedOut(ctx)
			if err != nil {
				return fmt.Errorf("fan-out: %w", err)
			}
			if done {
				h.r.fannedOut, h.r.fanout, h.fanoutMark = true, time.Since(h.start), h.w.mark()
				fmt.Fprintf(os.Stderr, "  fanned out %.1fs after the first publish\n", h.r.fanout.Seconds())
			}
		}
		if h.s.relay.exited() {
			return exitErr(h.s.relay)
		}
		now := time.Now()
		if !now.Before(end) || (stop != nil && stop()) {
			return nil
		}
		if h.progress.IsZero() {
			h.progress = now
		} else if now.Sub(h.progress) >= scheduledProgress {
			h.progress = now
			what := "none due yet: any arrival is early"
			if !now.Before(h.firstDue) {
				share := min(1, float64(now.Sub(h.firstDue))/float64(h.r.span))
				what = fmt.Sprintf("about %d due so far", int(share*float64(h.r.events)))
			}
			fmt.Fprintf(os.Stderr, "  %5.0fs %d arrived (%s); relay RSS %.0f MB, this program's %.0f MB\n",
				now.Sub(h.start).Seconds(), h.e.rcv.snapshot(h.id).distinct, what, mb(*relayPeak), mb(*programPeak))
		}
		timer.Reset(min(scheduledSample, end.Sub(now)))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
		}
	}
}

// sleepCtx waits d, or until ctx is done or the stack's relay exits.
func sleepCtx(ctx context.Context, s *stack, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-s.relay.done:
		return exitErr(s.relay)
	case <-time.After(d):
		return nil
	}
}

// publishDue publishes an event on subject for each due time, the i-th with
// Nats-Msg-Id <prefix><i> and Relay-Deliver-At due[i] (RFC 3339 in UTC, to
// the nanosecond: a relay that rounded it to the second would send up to a
// second early, and that should show), async in chunks of publishChunk, and
// waits for every PubAck.
func (e *env) publishDue(ctx context.Context, s *stack, subject, prefix string, due []time.Time) error {
	chunk := e.chunk()
	for from := 0; from < len(due); from += chunk {
		to := min(len(due), from+chunk)
		acks := make([]jetstream.PubAckFuture, 0, to-from)
		for i := from; i < to; i++ {
			m := &nats.Msg{Subject: subject, Data: e.body, Header: nats.Header{}}
			m.Header.Set(streams.HeaderDeliverAt, due[i].UTC().Format(time.RFC3339Nano))
			f, err := s.js.PublishMsgAsync(m, jetstream.WithMsgID(prefix+strconv.Itoa(i)))
			if err != nil {
				return fmt.Errorf("publishing event %d of %d: %w", i+1, len(due), err)
			}
			acks = append(acks, f)
		}
		if err := waitAcks(ctx, acks); err != nil {
			return err
		}
	}
	return nil
}

// retriesHeld is how many messages RETRIES holds, from its stream info: in
// this scenario (a receiver that answers 204) only the held events and
// those fired but not yet moved to a lane.
func (s *stack) retriesHeld(ctx context.Context) (uint64, error) {
	st, err := s.js.Stream(ctx, streams.Retries)
	if err != nil {
		return 0, fmt.Errorf("RETRIES: %w", err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("RETRIES: %w", err)
	}
	return info.State.Msgs, nil
}

// pct writes a share of a core as a percentage, "-" when it was not read.
func pct(share float64) string {
	if math.IsNaN(share) || math.IsInf(share, 0) {
		return "-"
	}
	return fmt.Sprintf("%.1f %%", 100*share)
}

// scheduledTable is the scheduled scenario's timings, its lateness and what
// went wrong (an early request first: the contract allows none), then the
// relay's and this program's memory and CPU per window.
func scheduledTable(r scheduledResult) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "### Scheduled: %s events with %s spread over %v, one subscriber (--rate 0 --max-in-flight %d)\n\n",
		thousands(int64(r.events)), streams.HeaderDeliverAt, r.span, unlimitedInFlight)
	serverAt := "in this program's process (relay on --nats)"
	if r.server == "embedded" {
		serverAt = "embedded in the relay's process"
	}
	fmt.Fprintf(&sb, "Due times evenly spaced from %v to %v after the first publish call, in a shuffled order; "+
		"lateness is the first arrival of each webhook-id − its due time. The nats-server runs %s.\n\n", r.lead, r.lead+r.span, serverAt)
	sb.WriteString("| what | figure |\n| --- | ---: |\n")
	row := func(k, v string) { fmt.Fprintf(&sb, "| %s | %s |\n", k, v) }
	row("published (PubAcks), s", fmt.Sprintf("%.1f", r.publish.Seconds()))
	fanout := "not seen done"
	if r.fannedOut {
		fanout = fmt.Sprintf("%.1f", r.fanout.Seconds())
	}
	row("fanned out (fanout: nothing pending or unacked), s after the first publish", fanout)
	row("held in RETRIES at the first due time, messages", thousands(int64(r.held)))
	row("arrived", fmt.Sprintf("%s of %s", thousands(int64(r.arrived)), thousands(int64(r.events))))
	row("early (a request before its due time; must be 0)", fmt.Sprintf("**%s**", thousands(int64(r.early))))
	row("missing / duplicate requests", fmt.Sprintf("%s / %s", thousands(int64(r.missing())), thousands(int64(r.duplicates()))))
	row("lateness p50 / p90 / p99, ms", fmt.Sprintf("%.1f / %.1f / **%.1f**", ms(r.p50), ms(r.p90), ms(r.p99)))
	row("lateness max, ms", fmt.Sprintf("%.1f", ms(r.max)))
	row("last due time → last arrival, s", fmt.Sprintf("%.2f", r.drain.Seconds()))

	program := "this program (its nats-server, the publisher)"
	if r.server == "embedded" {
		program = "this program (the publisher)"
	}
	relay := "relay"
	if r.server == "embedded" {
		relay = "relay (its nats-server included)"
	}
	fmt.Fprintf(&sb, "\n| process | %s | %s |\n| --- | ---: | ---: |\n", relay, program)
	prow := func(k string, f func(procFigures) string) {
		fmt.Fprintf(&sb, "| %s | %s | %s |\n", k, f(r.relay), f(r.program))
	}
	prow("RSS idle, before publishing, MB", func(p procFigures) string { return fmt.Sprintf("%.0f", mb(p.idleRSS)) })
	prow("peak RSS waiting (last PubAck → first due), MB", func(p procFigures) string { return fmt.Sprintf("**%.0f**", mb(p.waitPeak)) })
	prow("peak RSS firing (first due → last arrival), MB", func(p procFigures) string { return fmt.Sprintf("%.0f", mb(p.firePeak)) })
	prow("VmHWM at the end (the publish included), MB", func(p procFigures) string { return fmt.Sprintf("%.0f", mb(p.hwm)) })
	prow(fmt.Sprintf("CPU idle (%v before publishing), of a core", scheduledIdle), func(p procFigures) string { return pct(p.idleCPU) })
	prow("CPU waiting (last PubAck → first due), of a core", func(p procFigures) string { return pct(p.waitCPU) })
	prow("CPU holding (fanned out → first due), of a core", func(p procFigures) string { return "**" + pct(p.holdCPU) + "**" })
	prow("CPU firing (first → last due), of a core", func(p procFigures) string { return pct(p.fireCPU) })

	var notes []string
	if r.early > 0 {
		notes = append(notes, fmt.Sprintf("**FAIL: %s of %s events had a request before their due time** (the earliest %.1f s before it)",
			thousands(int64(r.early)), thousands(int64(r.arrived)), r.earliest.Seconds()))
	}
	if m := r.missing(); m > 0 {
		notes = append(notes, fmt.Sprintf("%s events had not arrived %v after the last due time", thousands(int64(m)), latencyWait))
	}
	if d := r.duplicates(); d > 0 {
		notes = append(notes, fmt.Sprintf("%s duplicate requests (same webhook-id twice)", thousands(int64(d))))
	}
	if r.publish >= r.lead {
		notes = append(notes, fmt.Sprintf("publishing took %.1f s, past the first due time: no waiting window", r.publish.Seconds()))
	}
	if !r.fannedOut || r.fanout >= r.lead {
		notes = append(notes, "the fan-out was not done by the first due time: no holding window, and the lateness includes its backlog")
	}
	if len(notes) > 0 {
		sb.WriteString("\n- " + strings.Join(notes, "\n- ") + "\n")
	}
	return sb.String()
}
