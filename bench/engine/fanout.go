package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/sourcegraph/conc/pool"
)

// ---- fan-out: one event type, many subscribers ----

// fanoutPrefix starts the ids of the fan-out's subscribers; no other
// subscriber of this program starts with it, so that the receiver's counts
// by prefix are theirs alone.
const fanoutPrefix = "fan"

// fanoutSolo is the subscriber that takes its events alone, for the
// figure the fan-out is compared with.
const fanoutSolo = "solo"

// fanoutResult is one relay delivering every event of one type to many
// subscribers, against one subscriber alone on the same relay.
type fanoutResult struct {
	subscribers, events int
	payload             int // the body's bytes

	solo burstRun // -throughput-events to fanoutSolo alone
	// fan counts deliveries (events × subscribers): delivered/s from the
	// first publish to the last arrival at any of the subscribers.
	fan       burstRun
	fannedOut time.Duration // first publish → the fan-out consumer has nothing pending or unacked (to 100 ms)

	complete   int // subscribers that got every event
	fewest     int // distinct webhook-ids at the subscriber that got the fewest
	duplicates int // requests beyond the distinct webhook-ids, over all subscribers

	// writes are the relay's publishes on deliveries.> and bodies.>
	// during the fan-out run (see writeCounts), and stored the messages
	// the server stored in DELIVERIES and BODIES meanwhile (the growth of
	// their last sequences).
	writes writeCounts
	stored int64
	// peakRSS is the relay's VmHWM at the end of the run.
	peakRSS int64
}

// bytesPerDelivery is what the relay wrote to DELIVERIES and BODIES for
// each delivery of the fan-out run.
func (r fanoutResult) bytesPerDelivery() float64 {
	if r.fan.delivered <= 0 {
		return 0
	}
	return float64(r.writes.stored) / float64(r.fan.delivered)
}

// bytesTarget is the most a delivery may write: 1 KB and its share of
// the body.
func (r fanoutResult) bytesTarget() float64 {
	return 1024 + float64(r.payload)/float64(max(1, r.subscribers))
}

// fanouts runs the fan-out scenario once for each size of -fanout-payloads,
// each on a fresh stack.
func (e *env) fanouts(ctx context.Context) ([]fanoutResult, error) {
	body := e.body
	defer func() { e.body = body }()
	var out []fanoutResult
	for _, size := range e.cfg.fanoutPayloads {
		e.body = payload(size)
		res, err := e.fanout(ctx)
		res.payload = size
		out = append(out, res)
		if err != nil {
			return out, fmt.Errorf("%d bytes: %w", size, err)
		}
	}
	return out, nil
}

// ratio is the fan-out's deliveries/s over one subscriber's alone.
func (r fanoutResult) ratio() float64 {
	if s := r.solo.rate(); s > 0 {
		return r.fan.rate() / s
	}
	return 0
}

// eventRate is the fan-out's events/s: each event counted once, however
// many subscribers it went to.
func (r fanoutResult) eventRate() float64 {
	if r.fan.total <= 0 {
		return 0
	}
	return float64(r.events) / r.fan.total.Seconds()
}

// fanout adds -fanout-subscribers subscribers on one event type (--events
// f, --rate 0 --max-in-flight 64) and one more on another (solo) to one
// relay, and measures on it, one after the other: the solo subscriber
// taking -throughput-events, then -fanout-events on the shared type, each
// copied to every one of them. An event that matches many subscribers is
// the fan-out's own worst case (a copy stored per subscriber before the
// event is acked), and the question is whether relay delivers as many
// copies a second as it does to one subscriber. Both are measured on the
// same relay, after a warm-up of both, so that the ratio compares
// deliveries, not start-ups. Every fan-out subscriber's distinct
// webhook-ids are counted: each must get every event.
func (e *env) fanout(ctx context.Context) (res fanoutResult, err error) {
	cfg := e.cfg
	res = fanoutResult{subscribers: cfg.fanoutSubscribers, events: cfg.fanoutEvents}
	deliveries := res.subscribers * res.events
	fmt.Fprintf(os.Stderr, "fanout: %d events of %d bytes to each of %d subscribers (%d deliveries) against %d to one subscriber alone, on one relay\n",
		res.events, len(e.body), res.subscribers, deliveries, cfg.throughputEvents)
	s, err := e.up(ctx, "fanout")
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, s.down()) }()
	ids := make([]string, res.subscribers)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s%04d", fanoutPrefix, i)
	}
	defer func() {
		for _, id := range ids {
			e.rcv.forget(id)
		}
		e.rcv.forget(fanoutSolo)
	}()
	addStart := time.Now()
	// `relay sub add` a few at a time: each is a process of its own that
	// connects, writes one key and exits.
	p := pool.New().WithErrors().WithMaxGoroutines(8).WithContext(ctx)
	for _, id := range ids {
		p.Go(func(ctx context.Context) error { return e.subAdd(ctx, s, id, 0, unlimitedInFlight, "f") })
	}
	p.Go(func(ctx context.Context) error { return e.subAdd(ctx, s, fanoutSolo, 0, unlimitedInFlight, "solo") })
	if err := p.Wait(); err != nil {
		return res, err
	}
	fmt.Fprintf(os.Stderr, "  added %d subscribers in %.1fs\n", res.subscribers+1, time.Since(addStart).Seconds())
	fanDelivered := func() int { return e.rcv.distinctWithPrefix(fanoutPrefix) }
	soloDelivered := func() int { return e.rcv.snapshot(fanoutSolo).distinct }

	// A warm-up, not measured: connections opened, caches filled.
	warmSolo, warmFan := min(cfg.throughputEvents, 1000), min(res.events, 10)
	if err := e.publish(ctx, s, "solo", eventPrefix+"fsw-", warmSolo); err != nil {
		return res, err
	}
	if err := e.publish(ctx, s, "f", eventPrefix+"ffw-", warmFan); err != nil {
		return res, err
	}
	if err := s.waitUntil(ctx, "fan-out warm-up", cfg.timeout, func() (bool, error) {
		return soloDelivered() >= warmSolo && fanDelivered() >= warmFan*res.subscribers, nil
	}, func() string {
		return fmt.Sprintf("%d of %d and %d of %d arrived", soloDelivered(), warmSolo, fanDelivered(), warmFan*res.subscribers)
	}); err != nil {
		return res, err
	}
	for _, id := range ids {
		e.rcv.forget(id)
	}
	e.rcv.forget(fanoutSolo)

	// One subscriber alone.
	var start time.Time
	res.solo, err = e.measure(ctx, s, cfg.throughputEvents, func() error {
		start = time.Now()
		return e.publish(ctx, s, "solo", eventPrefix+"fs-", cfg.throughputEvents)
	}, soloDelivered)
	if err != nil {
		return res, fmt.Errorf("one subscriber alone: %w", err)
	}
	snap := e.rcv.snapshot(fanoutSolo)
	res.solo.total = snap.last.Sub(start) // the last arrival, not the poll that saw it
	res.solo.requests = snap.requests
	fmt.Fprintf(os.Stderr, "  one subscriber alone: %d in %.2fs (%.0f/s)\n", res.solo.delivered, res.solo.total.Seconds(), res.solo.rate())

	// Every event to every fan-out subscriber, its writes counted.
	counter, cnc, err := s.counter()
	if err != nil {
		return res, err
	}
	defer cnc.Close()
	defer counter.stop()
	c0 := counter.counts()
	seq0, err := s.lastSeqs(ctx)
	if err != nil {
		return res, err
	}
	published := false
	res.fan, err = e.measure(ctx, s, deliveries, func() error {
		start = time.Now()
		err := e.publish(ctx, s, "f", eventPrefix+"ff-", res.events)
		published = true
		return err
	}, func() int {
		if published && res.fannedOut == 0 {
			if done, _, err := s.fannedOut(ctx); err == nil && done {
				res.fannedOut = time.Since(start)
			}
		}
		return fanDelivered()
	})
	if published && res.fannedOut == 0 {
		// Delivered before the poll saw the fan-out's last ack: an upper bound.
		if done, _, err := s.fannedOut(ctx); err == nil && done {
			res.fannedOut = time.Since(start)
		}
	}
	res.fewest = res.events
	var last time.Time
	for _, id := range ids {
		snap := e.rcv.snapshot(id)
		if snap.distinct >= res.events {
			res.complete++
		}
		res.fewest = min(res.fewest, snap.distinct)
		res.duplicates += snap.requests - snap.distinct
		if snap.last.After(last) {
			last = snap.last
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "  fan-out: %d of %d deliveries; %d of %d subscribers got every event, the fewest %d\n",
			res.fan.delivered, deliveries, res.complete, res.subscribers, res.fewest)
		return res, fmt.Errorf("fan-out: %w", err)
	}
	res.fan.total = last.Sub(start)
	res.writes = counter.counts().minus(c0)
	if seq1, err := s.lastSeqs(ctx); err == nil {
		res.stored = seq1.minus(seq0)
	}
	_, res.peakRSS, _ = memory(s.relay.pid())
	fmt.Fprintf(os.Stderr, "  wrote %.0f bytes a delivery to DELIVERIES and BODIES (%d bodies; %d messages stored); relay peak RSS %.0f MB\n",
		res.bytesPerDelivery(), res.writes.bodies, res.stored, mb(res.peakRSS))
	fmt.Fprintf(os.Stderr, "  fan-out: %d deliveries in %.2fs (%.0f/s, %.0f events/s; fanned out after %.1fs); %d of %d subscribers got every event; fan-out / one subscriber %.2f\n",
		res.fan.delivered, res.fan.total.Seconds(), res.fan.rate(), res.eventRate(), res.fannedOut.Seconds(),
		res.complete, res.subscribers, res.ratio())
	return res, nil
}

// fanoutTable reports the fan-out runs, one per body size: both
// measurements, their ratio, the bytes written per delivery and the
// per-subscriber check.
func fanoutTable(runs []fanoutResult) string {
	var sb strings.Builder
	r0 := runs[0]
	fmt.Fprintf(&sb, "### Fan-out: %s events to each of %s subscribers on one event type (--rate 0 --max-in-flight %d), against one subscriber alone, on one relay, by body size\n\n",
		thousands(int64(r0.events)), thousands(int64(r0.subscribers)), unlimitedInFlight)
	sb.WriteString("Each size on a fresh relay, one subscriber first, after a warm-up of both; delivered ÷ (last arrival − first publish). " +
		"Written: the bytes of the relay's publishes on deliveries.> and bodies.> (subject, headers, body) during the fan-out run, per delivery; " +
		"target 1 KB + body ÷ subscribers. Stored: messages DELIVERIES, RETRIES and BODIES stored meanwhile (the growth of their last sequences).\n\n")
	sb.WriteString("| body, bytes | one alone, deliveries/s | fan-out, deliveries/s | fan-out ÷ one | fanned out, s | all delivered, s | written per delivery, bytes | target, bytes | stored | duplicate requests | relay peak RSS, MB |\n")
	sb.WriteString("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, r := range runs {
		fmt.Fprintf(&sb, "| %s | %s | %s | **%.2f** | %.1f | %.2f | %s | %s | %s | %d | %.0f |\n",
			thousands(int64(r.payload)), thousands(int64(r.solo.rate())), thousands(int64(r.fan.rate())), r.ratio(),
			r.fannedOut.Seconds(), r.fan.total.Seconds(), thousands(int64(r.bytesPerDelivery())), thousands(int64(r.bytesTarget())),
			thousands(r.stored), r.duplicates, mb(r.peakRSS))
	}
	sb.WriteString("\n")
	for _, r := range runs {
		if r.complete < r.subscribers {
			fmt.Fprintf(&sb, "%s bytes: %s of %s subscribers got every event (the fewest: %s of %s).\n",
				thousands(int64(r.payload)), thousands(int64(r.complete)), thousands(int64(r.subscribers)), thousands(int64(r.fewest)), thousands(int64(r.events)))
		}
		if dup := r.solo.requests - r.solo.delivered; dup > 0 {
			fmt.Fprintf(&sb, "%s bytes: %d duplicate requests to the one subscriber.\n", thousands(int64(r.payload)), dup)
		}
	}
	return sb.String()
}
