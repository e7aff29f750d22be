package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/internal/deliver"
	"github.com/relay-dev/relay/streams"
)

// ---- throughput: relay against the simplest correct loop and the two-hop loop ----

// The baseline's stream and durable consumer, on a server of its own: no
// relay stream is involved.
const (
	baseStream   = "BASE"
	baseSubject  = "base.x"
	baseConsumer = "base"
)

// throughputRun is one baseline run, the two-hop run after it and the
// relay run after that, on the same machine a few seconds apart.
type throughputRun struct {
	run      int
	baseline burstRun
	twoHop   burstRun
	relay    burstRun
}

// rateOver is a's delivered/s over b's, 0 when b delivered nothing: the
// ratios the table prints, each between contenders of the same run.
func rateOver(a, b burstRun) float64 {
	if r := b.rate(); r > 0 {
		return a.rate() / r
	}
	return 0
}

// ratio is relay's delivered/s over the baseline's.
func (r throughputRun) ratio() float64 { return rateOver(r.relay, r.baseline) }

// twoHopRatio is the two-hop loop's delivered/s over the baseline's: what
// the second JetStream hop alone costs.
func (r throughputRun) twoHopRatio() float64 { return rateOver(r.twoHop, r.baseline) }

// relayPerTwoHop is relay's delivered/s over the two-hop loop's: what is
// left of the gap once the second hop is paid for.
func (r throughputRun) relayPerTwoHop() float64 { return rateOver(r.relay, r.twoHop) }

// cpuPer1000 is the relay's CPU seconds per 1,000 deliveries; ok is false
// when the CPU time could not be read.
func (r burstRun) cpuPer1000() (float64, bool) {
	if !r.cpuKnown || r.delivered == 0 {
		return 0, false
	}
	return r.cpu.Seconds() * 1000 / float64(r.delivered), true
}

// throughput runs the baseline, the two-hop loop and relay in turn,
// -throughput-runs times each, so that the machine's drift reaches all
// three: the same events, the same receiver code, the same number in
// flight, the same clock (first publish → last arrival).
func (e *env) throughput(ctx context.Context) ([]throughputRun, error) {
	cfg := e.cfg
	fmt.Fprintf(os.Stderr, "throughput: %d × (the simplest loop, the two-hop loop, then relay), %d events each, %d in flight\n",
		cfg.throughputRuns, cfg.throughputEvents, cfg.throughputInFlight)
	key, err := deliver.ParseSecret(e.secret)
	if err != nil {
		return nil, err
	}
	// The loops' own receiver, so that nothing they record mixes with
	// relay's: another port of the receiver process, the same code. The
	// baseline and the two-hop loop share it under ids of their own, one
	// after the other.
	rcv := e.baseRcv
	var out []throughputRun
	for i := 1; i <= cfg.throughputRuns && ctx.Err() == nil; i++ {
		r := throughputRun{run: i}
		if r.baseline, err = e.baselineOne(ctx, i, rcv, rcv.URL, key); err != nil {
			return out, fmt.Errorf("throughput run %d, baseline: %w", i, err)
		}
		fmt.Fprintf(os.Stderr, "  [%d] baseline: %d of %d delivered in %.2fs (%.0f/s, publish %.2fs); worst idle gap %.3fs\n",
			i, r.baseline.delivered, r.baseline.events, r.baseline.total.Seconds(), r.baseline.rate(),
			r.baseline.publish.Seconds(), r.baseline.gap.Seconds())
		if ctx.Err() != nil {
			break
		}
		if r.twoHop, err = e.twoHopOne(ctx, i, rcv, rcv.URL, key); err != nil {
			return out, fmt.Errorf("throughput run %d, two-hop loop: %w", i, err)
		}
		fmt.Fprintf(os.Stderr, "  [%d] two-hop:  %d of %d delivered in %.2fs (%.0f/s, publish %.2fs); worst idle gap %.3fs; two-hop/baseline %.2f\n",
			i, r.twoHop.delivered, r.twoHop.events, r.twoHop.total.Seconds(), r.twoHop.rate(),
			r.twoHop.publish.Seconds(), r.twoHop.gap.Seconds(), r.twoHopRatio())
		if ctx.Err() != nil {
			break
		}
		r.relay, err = e.burstOne(ctx, i, burstSpec{
			name: fmt.Sprintf("tput%02d", i), prefix: fmt.Sprintf("%st%02d-", eventPrefix, i),
			events: cfg.throughputEvents, inFlight: cfg.throughputInFlight, timeout: cfg.timeout,
		})
		if err != nil {
			return out, fmt.Errorf("throughput run %d, relay: %w", i, err)
		}
		cpu := "relay CPU not read"
		if per, ok := r.relay.cpuPer1000(); ok {
			cpu = fmt.Sprintf("relay CPU %.2fs (%.2f cores, %.3fs per 1,000)", r.relay.cpu.Seconds(),
				r.relay.cpu.Seconds()/r.relay.total.Seconds(), per)
		}
		fmt.Fprintf(os.Stderr, "  [%d] relay:    %d of %d delivered in %.2fs (%.0f/s, publish %.2fs); worst idle gap %.3fs; %s; relay/baseline %.2f, relay/two-hop %.2f\n",
			i, r.relay.delivered, r.relay.events, r.relay.total.Seconds(), r.relay.rate(),
			r.relay.publish.Seconds(), r.relay.gap.Seconds(), cpu, r.ratio(), r.relayPerTwoHop())
		out = append(out, r)
	}
	return out, ctx.Err()
}

// baselineOne is the simplest correct loop, on a fresh in-process server:
// a durable pull consumer on BASE, started before the first publish (as
// relay is), POSTs each message signed to the receiver at url and acks it
// after the 2xx, -throughput-in-flight at a time, while -throughput-events
// are published with PubAcks as publish does for relay.
func (e *env) baselineOne(ctx context.Context, i int, rcv *receiver, url string, key []byte) (burstRun, error) {
	return e.loopOne(ctx, i, loopSpec{
		id: fmt.Sprintf("base%02d", i), what: "baseline deliveries",
		subject: baseSubject, prefix: fmt.Sprintf("%sbase%02d-", eventPrefix, i),
		setup: baselineSetup,
	}, rcv, url, key)
}

// baselineSetup is the baseline's setup (a loopSpec's): the stream BASE
// and its durable pull consumer, which signedLoop drains, and no loop
// beside it. It is a function of its own because the latency scenario
// measures the same loop at a steady rate.
func baselineSetup(ctx context.Context, s *stack) (jetstream.Consumer, []func(context.Context) error, error) {
	if _, err := s.js.CreateStream(ctx, jetstream.StreamConfig{
		Name: baseStream, Subjects: []string{"base.>"}, Storage: jetstream.FileStorage,
	}); err != nil {
		return nil, nil, err
	}
	cons, err := s.js.CreateOrUpdateConsumer(ctx, baseStream, jetstream.ConsumerConfig{
		Durable: baseConsumer, AckPolicy: jetstream.AckExplicitPolicy,
	})
	return cons, nil, err
}

// loopSpec is one of the hand-written loops that relay is measured
// against: the baseline and the two-hop loop differ only in the streams and
// loops that setup makes, so that everything else (the server, the
// publisher, the signed loop, the HTTP client, the clock) is one code.
type loopSpec struct {
	id      string // the stack's name and the receiver's subscriber id
	what    string // names the wait in its messages
	subject string // where the events are published
	prefix  string // starts the run's event ids
	// setup creates the streams and consumers on s. It returns the
	// consumer that signedLoop drains and any loops to run beside it, each
	// until its context is cancelled; it is called before the first
	// publish, so every loop is already pulling when the events arrive.
	setup func(ctx context.Context, s *stack) (drain jetstream.Consumer, beside []func(context.Context) error, err error)
}

// loops is a loopSpec running: its fresh in-process server, its loops
// (those setup made and signedLoop on its drain consumer) and their HTTP
// client. It is apart from loopOne so that the latency scenario drives the
// same loops with its own publisher.
type loops struct {
	s         *stack
	cancel    context.CancelFunc // stops every loop
	stopped   chan error         // each loop's return, as it stops
	n, ended  int                // the loops started, and those whose return was taken
	err       error              // why the first loop to stop early stopped
	transport *http.Transport
}

// startLoops starts spec on a fresh in-process server: its setup, then its
// loops and signedLoop on its drain consumer, POSTing to url/<id> with
// inFlight requests at most. Every loop is pulling when it returns, so that
// the first event published is taken at once, as a running relay takes it.
func (e *env) startLoops(ctx context.Context, spec loopSpec, url string, key []byte, inFlight int) (*loops, error) {
	s, err := e.serverOnly(spec.id)
	if err != nil {
		return nil, err
	}
	opCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cons, beside, err := spec.setup(opCtx, s)
	if err != nil {
		return nil, errors.Join(err, s.down())
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.Proxy = nil
	transport.MaxIdleConnsPerHost = inFlight // as relay keeps them: no churn
	client := &http.Client{Transport: transport, Timeout: deliver.DefaultTimeout}

	loopCtx, stopLoops := context.WithCancel(ctx)
	all := append(slices.Clone(beside), func(ctx context.Context) error {
		return signedLoop(ctx, cons, client, url+"/"+spec.id, key, inFlight)
	})
	l := &loops{s: s, cancel: stopLoops, stopped: make(chan error, len(all)), n: len(all), transport: transport}
	for _, loop := range all {
		go func() { l.stopped <- loop(loopCtx) }()
	}
	return l, nil
}

// failed is, without waiting, why a loop stopped before halt, nil while
// every loop runs: a loop that stops early fails the run, since the events
// it leaves would never arrive.
func (l *loops) failed() error {
	if l.err != nil {
		return l.err
	}
	select {
	case err := <-l.stopped:
		l.ended++
		if err == nil {
			err = errors.New("it returned before it was stopped")
		}
		l.err = fmt.Errorf("a loop stopped: %w", err)
	default:
	}
	return l.err
}

// halt stops the loops and waits for each, so that every request they
// started has ended. It may be called more than once.
func (l *loops) halt() {
	l.cancel()
	for ; l.ended < l.n; l.ended++ {
		<-l.stopped
	}
}

// close halts the loops, closes their idle connections and takes their
// server down.
func (l *loops) close() error {
	l.halt()
	l.transport.CloseIdleConnections()
	return l.s.down()
}

// loopOne runs spec on a fresh in-process server (startLoops), POSTing to
// the receiver at url/<id>, while -throughput-events are published with
// PubAcks as publish does for relay, until every event has arrived. A loop
// that stops early fails the run.
func (e *env) loopOne(ctx context.Context, i int, spec loopSpec, rcv *receiver, url string, key []byte) (res burstRun, err error) {
	res = burstRun{run: i, events: e.cfg.throughputEvents}
	id := spec.id
	l, err := e.startLoops(ctx, spec, url, key, e.cfg.throughputInFlight)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, l.close()) }()
	defer rcv.forget(id)

	start := time.Now()
	err = e.publishOn(ctx, l.s, spec.subject, spec.prefix, 0, res.events)
	res.publish = time.Since(start)
	if err == nil {
		err = l.s.waitUntil(ctx, spec.what, e.cfg.timeout, func() (bool, error) {
			if err := l.failed(); err != nil {
				return false, err
			}
			return rcv.snapshot(id).distinct >= res.events, nil
		}, func() string { return fmt.Sprintf("%d of %d delivered", rcv.snapshot(id).distinct, res.events) })
	}
	l.halt() // before the snapshot, so that it counts every request the loops made
	if err != nil {
		return res, err
	}
	snap := rcv.snapshot(id)
	res.delivered, res.requests, res.complete = snap.distinct, snap.requests, true
	res.total = snap.last.Sub(start)
	res.gap, res.gapAt, res.gapAfter = snap.gap, snap.gapAt+snap.start.Sub(start), snap.gapAfter
	return res, nil
}

// signedLoop pulls from cons and, inFlight at a time, POSTs each message's
// body to url with Standard Webhooks headers (webhook-id is the message's
// Relay-Event-Id, as on relay's copies, else its Nats-Msg-Id), acking it after a 2xx and handing it back otherwise, until
// ctx is cancelled. It returns once every request it started has ended.
func signedLoop(ctx context.Context, cons jetstream.Consumer, client *http.Client, url string, key []byte, inFlight int) error {
	it, err := cons.Messages(jetstream.PullMaxMessages(inFlight))
	if err != nil {
		return err
	}
	stopped := make(chan struct{})
	defer close(stopped)
	go func() {
		select {
		case <-ctx.Done():
		case <-stopped:
		}
		it.Stop()
	}()
	var wg sync.WaitGroup
	defer wg.Wait()
	slots := make(chan struct{}, inFlight)
	for {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		msg, err := it.Next()
		switch {
		case errors.Is(err, jetstream.ErrMsgIteratorClosed):
			return nil
		case errors.Is(err, jetstream.ErrNoHeartbeat):
			<-slots
			continue // the iterator sends a new pull request
		case err != nil:
			return err
		}
		wg.Go(func() {
			defer func() { <-slots }()
			if postSigned(ctx, client, url, key, msg) {
				_ = msg.Ack()
			} else {
				_ = msg.Nak()
			}
		})
	}
}

// postSigned POSTs msg's body to url, signed with deliver.Sign as relay
// signs, and reports whether the reply was a 2xx.
func postSigned(ctx context.Context, client *http.Client, url string, key []byte, msg jetstream.Msg) bool {
	id := msg.Headers().Get(streams.HeaderEventID) // a two-hop copy's
	if id == "" {
		id = msg.Headers().Get(jetstream.MsgIDHeader)
	}
	body := msg.Data()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return false
	}
	ts := time.Now().Unix()
	req.Header.Set("Webhook-Id", id)
	req.Header.Set("Webhook-Timestamp", strconv.FormatInt(ts, 10))
	req.Header.Set("Webhook-Signature", deliver.Sign(key, id, ts, body))
	req.Header.Set("Content-Type", deliver.DefaultContentType)
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body) // to the end, so the connection is reused
	resp.Body.Close()
	return resp.StatusCode >= 200 && resp.StatusCode < 300
}

// throughputTable is a row per run (a baseline, the two-hop loop and the
// relay run after them) and the medians of the ratios over the runs.
func throughputTable(cfg config, runs []throughputRun) string {
	var sb strings.Builder
	where := "each on a fresh in-process server"
	if cfg.embedded {
		where = "the loops on a fresh in-process server, relay on its own embedded server"
	}
	fmt.Fprintf(&sb, "### Throughput: %s events to one subscriber, %d in flight: relay against the simplest loop and the two-hop loop, in turn, %s\n\n",
		thousands(int64(cfg.throughputEvents)), cfg.throughputInFlight, where)
	fmt.Fprintf(&sb, "Baseline: publish to a stream of its own (%s, file storage) while a durable pull consumer drains it, "+
		"each message POSTed with Standard Webhooks headers to a receiver of its own and acked after the 2xx. "+
		"Two-hop: the same, with relay's second hop before it: publish to %s (EVENTS' settings), "+
		"a loop copies each message to %s (DELIVERIES' settings: work-queue, a Nats-Msg-Id per copy) with async PubAcks "+
		"and acks it once its copy is stored, and the baseline's loop drains %s. "+
		"Relay: `relay run`, one subscriber `--rate 0 --max-in-flight %d`, events on EVENTS. "+
		"All: delivered ÷ (last arrival − first publish).\n\n",
		baseStream, hopAStream, hopBStream, hopBStream, cfg.throughputInFlight)
	sb.WriteString("| run | baseline, delivered/s | two-hop, delivered/s | relay, delivered/s | relay / baseline | two-hop / baseline | relay / two-hop " +
		"| baseline publish / all delivered, s | two-hop publish / all delivered, s | relay publish / all delivered, s " +
		"| relay worst idle gap, s | relay CPU s per 1,000 deliveries |\n")
	sb.WriteString("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	var cpus []float64
	for _, r := range runs {
		relayRate := thousands(int64(r.relay.rate()))
		if !r.relay.complete {
			relayRate += " (" + thousands(int64(r.relay.delivered)) + " of " + thousands(int64(r.relay.events)) + ", gave up)"
		}
		cpu := "-"
		if per, ok := r.relay.cpuPer1000(); ok {
			cpu = fmt.Sprintf("%.3f", per)
			cpus = append(cpus, per)
		}
		fmt.Fprintf(&sb, "| %d | %s | %s | %s | %.2f | %.2f | %.2f | %.2f / %.2f | %.2f / %.2f | %.2f / %.2f | %.3f | %s |\n",
			r.run, thousands(int64(r.baseline.rate())), thousands(int64(r.twoHop.rate())), relayRate,
			r.ratio(), r.twoHopRatio(), r.relayPerTwoHop(),
			r.baseline.publish.Seconds(), r.baseline.total.Seconds(), r.twoHop.publish.Seconds(), r.twoHop.total.Seconds(),
			r.relay.publish.Seconds(), r.relay.total.Seconds(), r.relay.gap.Seconds(), cpu)
	}
	sb.WriteString("\n")
	for _, x := range []struct {
		name  string
		ratio func(throughputRun) float64
	}{
		{"relay / baseline", throughputRun.ratio},
		{"two-hop / baseline", throughputRun.twoHopRatio},
		{"relay / two-hop", throughputRun.relayPerTwoHop},
	} {
		ratios := collect(runs, x.ratio)
		fmt.Fprintf(&sb, "- %s, median: **%.2f** (lowest %.2f, highest %.2f, runs: %d)\n",
			x.name, median(ratios), slices.Min(ratios), slices.Max(ratios), len(runs))
	}
	fmt.Fprintf(&sb, "- median delivered/s: baseline %s, two-hop %s, relay %s",
		thousands(int64(median(collect(runs, func(r throughputRun) float64 { return r.baseline.rate() })))),
		thousands(int64(median(collect(runs, func(r throughputRun) float64 { return r.twoHop.rate() })))),
		thousands(int64(median(collect(runs, func(r throughputRun) float64 { return r.relay.rate() })))))
	if len(cpus) > 0 {
		fmt.Fprintf(&sb, "; relay CPU per 1,000 deliveries, median: %.3f s", median(cpus))
	}
	sb.WriteString("\n")
	for _, r := range runs {
		for _, x := range []struct {
			name string
			b    burstRun
		}{{"baseline", r.baseline}, {"two-hop", r.twoHop}, {"relay", r.relay}} {
			if dup := x.b.requests - x.b.delivered; dup > 0 {
				fmt.Fprintf(&sb, "- run %d, %s: %d duplicate requests (same webhook-id twice)\n", r.run, x.name, dup)
			}
			if x.name != "relay" && x.b.gap >= cfg.stallGap {
				// The loops pull with nats.go's iterator, which was seen
				// to sit idle for 30 s in one run of eight: that run's
				// ratios then measure the loop's stall, not relay.
				fmt.Fprintf(&sb, "- run %d, the %s loop stalled: idle %.2f s (at least -stall-gap); this run's ratios against it say nothing of relay\n",
					r.run, x.name, x.b.gap.Seconds())
			}
		}
		for _, s := range r.relay.stalls {
			fmt.Fprintf(&sb, "- run %d, relay stalled: %s\n", r.run, s)
		}
	}
	return sb.String()
}
