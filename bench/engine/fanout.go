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

	solo burstRun // -throughput-events to fanoutSolo alone
	// fan counts deliveries (events × subscribers): delivered/s from the
	// first publish to the last arrival at any of the subscribers.
	fan       burstRun
	fannedOut time.Duration // first publish → the fan-out consumer has nothing pending or unacked (to 100 ms)

	complete   int // subscribers that got every event
	fewest     int // distinct webhook-ids at the subscriber that got the fewest
	duplicates int // requests beyond the distinct webhook-ids, over all subscribers
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
	fmt.Fprintf(os.Stderr, "fanout: %d events to each of %d subscribers (%d deliveries) against %d to one subscriber alone, on one relay\n",
		res.events, res.subscribers, deliveries, cfg.throughputEvents)
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

	// Every event to every fan-out subscriber.
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
	fmt.Fprintf(os.Stderr, "  fan-out: %d deliveries in %.2fs (%.0f/s, %.0f events/s; fanned out after %.1fs); %d of %d subscribers got every event; fan-out / one subscriber %.2f\n",
		res.fan.delivered, res.fan.total.Seconds(), res.fan.rate(), res.eventRate(), res.fannedOut.Seconds(),
		res.complete, res.subscribers, res.ratio())
	return res, nil
}

// fanoutTable reports a fan-out run: both measurements, their ratio and
// the per-subscriber check.
func fanoutTable(r fanoutResult) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "### Fan-out: %s events to each of %s subscribers on one event type (--rate 0 --max-in-flight %d), against one subscriber alone, on one relay\n\n",
		thousands(int64(r.events)), thousands(int64(r.subscribers)), unlimitedInFlight)
	sb.WriteString("Both on the same relay, one subscriber first, after a warm-up of both; delivered ÷ (last arrival − first publish).\n\n")
	sb.WriteString("| run | events | deliveries | publish, s | fanned out, s | all delivered, s | events/s | deliveries/s | relay CPU s per 1,000 deliveries |\n")
	sb.WriteString("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	cpu := func(b burstRun) string {
		if per, ok := b.cpuPer1000(); ok {
			return fmt.Sprintf("%.3f", per)
		}
		return "-"
	}
	fmt.Fprintf(&sb, "| one subscriber alone | %s | %s | %.2f | | %.2f | %s | %s | %s |\n",
		thousands(int64(r.solo.events)), thousands(int64(r.solo.delivered)), r.solo.publish.Seconds(), r.solo.total.Seconds(),
		thousands(int64(r.solo.rate())), thousands(int64(r.solo.rate())), cpu(r.solo))
	fmt.Fprintf(&sb, "| fan-out to %s | %s | %s | %.2f | %.1f | %.2f | %s | %s | %s |\n",
		thousands(int64(r.subscribers)), thousands(int64(r.events)), thousands(int64(r.fan.delivered)), r.fan.publish.Seconds(),
		r.fannedOut.Seconds(), r.fan.total.Seconds(), thousands(int64(r.eventRate())), thousands(int64(r.fan.rate())), cpu(r.fan))
	fmt.Fprintf(&sb, "\nfan-out deliveries/s ÷ one subscriber's: **%.2f**; subscribers that got every event: %s of %s (the fewest: %s of %s)",
		r.ratio(), thousands(int64(r.complete)), thousands(int64(r.subscribers)), thousands(int64(r.fewest)), thousands(int64(r.events)))
	if r.duplicates > 0 {
		fmt.Fprintf(&sb, "; %d duplicate requests in the fan-out", r.duplicates)
	}
	if dup := r.solo.requests - r.solo.delivered; dup > 0 {
		fmt.Fprintf(&sb, "; %d duplicate requests to the one subscriber", dup)
	}
	sb.WriteString("\n")
	return sb.String()
}
