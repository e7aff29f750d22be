package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/sourcegraph/conc/pool"

	"github.com/relay-dev/relay/streams"
)

// ---- overload: healthy subscribers beside one whose backlog passes its bound ----

// The overload scenario's subscribers: the healthy ones (numbered) and the
// one that is paused.
const (
	overloadPrefix = "ovh"
	overloadStuck  = "ovstuck"
)

// overloadResult is one run: (a) the healthy subscribers' deliveries alone,
// then beside a paused subscriber whose backlog passes its --max-backlog;
// (b) DELIVERIES shrunk to what it holds, then the paused one resumed.
type overloadResult struct {
	healthy, events, bound int

	alone  burstRun // (a) the healthy subscribers alone: deliveries = healthy × events
	beside burstRun // (a) the same beside the paused one
	// What became of the paused one's copies of (a)'s second half: left
	// waiting (lane, overflow, RETRIES) and dead-lettered as backlog.
	waiting, shed int

	// (b): DELIVERIES' max_bytes set to what it held, the paused one
	// resumed; the time until everything waiting for it was delivered.
	maxBytes int64
	drain    time.Duration
	drained  int
}

// ratio is the healthy subscribers' deliveries/s beside the paused one
// over alone: the figure issue 30 sets at ≥ 0.9.
func (r overloadResult) ratio() float64 {
	if a := r.alone.rate(); a > 0 {
		return r.beside.rate() / a
	}
	return 0
}

// overload measures, on one relay, -overload-subscribers − 1 healthy
// subscribers (--rate 0 --max-in-flight 64) taking -overload-events each,
// alone and then beside a paused subscriber with --max-backlog
// -overload-bound that gets the same events; then shrinks DELIVERIES to
// what it holds (as `nats stream edit DELIVERIES --max-bytes` would),
// resumes the paused one and times the drain of its backlog.
func (e *env) overload(ctx context.Context) (res overloadResult, err error) {
	cfg := e.cfg
	res = overloadResult{healthy: cfg.overloadSubscribers - 1, events: cfg.overloadEvents, bound: cfg.overloadBound}
	fmt.Fprintf(os.Stderr, "overload: %d events to each of %d healthy subscribers, alone, then beside a paused one with --max-backlog %d\n",
		res.events, res.healthy, res.bound)
	s, err := e.up(ctx, "overload")
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, s.down()) }()
	ids := make([]string, res.healthy)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s%04d", overloadPrefix, i)
	}
	defer func() {
		for _, id := range ids {
			e.rcv.forget(id)
		}
		e.rcv.forget(overloadStuck)
	}()
	p := pool.New().WithErrors().WithMaxGoroutines(8).WithContext(ctx)
	for _, id := range ids {
		p.Go(func(ctx context.Context) error { return e.subAdd(ctx, s, id, 0, unlimitedInFlight, "o") })
	}
	if err := p.Wait(); err != nil {
		return res, err
	}
	healthyDelivered := func() int { return e.rcv.distinctWithPrefix(overloadPrefix) }
	// A warm-up, not measured.
	if err := e.publish(ctx, s, "o", eventPrefix+"ovw-", 10); err != nil {
		return res, err
	}
	if err := s.waitUntil(ctx, "overload warm-up", cfg.timeout, func() (bool, error) {
		return healthyDelivered() >= 10*res.healthy, nil
	}, func() string { return fmt.Sprintf("%d of %d arrived", healthyDelivered(), 10*res.healthy) }); err != nil {
		return res, err
	}
	measure := func(prefix string) (burstRun, error) {
		for _, id := range ids {
			e.rcv.forget(id)
		}
		var start time.Time
		run, err := e.measure(ctx, s, res.healthy*res.events, func() error {
			start = time.Now()
			return e.publish(ctx, s, "o", eventPrefix+prefix, res.events)
		}, healthyDelivered)
		if err != nil {
			return run, err
		}
		var last time.Time
		for _, id := range ids {
			if snap := e.rcv.snapshot(id); snap.last.After(last) {
				last = snap.last
			}
		}
		run.total = last.Sub(start)
		return run, nil
	}
	if res.alone, err = measure("ova-"); err != nil {
		return res, fmt.Errorf("healthy alone: %w", err)
	}
	fmt.Fprintf(os.Stderr, "  alone: %d deliveries in %.2fs (%.0f/s)\n", res.alone.delivered, res.alone.total.Seconds(), res.alone.rate())

	if err := e.subAdd(ctx, s, overloadStuck, 0, unlimitedInFlight, "o"); err != nil {
		return res, err
	}
	if err := e.relayCommand(ctx, s, "sub", "update", overloadStuck, "--max-backlog", strconv.Itoa(res.bound)); err != nil {
		return res, err
	}
	if err := e.relayCommand(ctx, s, "sub", "pause", overloadStuck); err != nil {
		return res, err
	}
	// The relay picks the change up within a second.
	time.Sleep(1500 * time.Millisecond)
	if res.beside, err = measure("ovb-"); err != nil {
		return res, fmt.Errorf("healthy beside the paused one: %w", err)
	}
	if err := s.waitUntil(ctx, "overload fan-out", cfg.timeout, func() (bool, error) {
		done, _, err := s.fannedOut(ctx)
		return done, err
	}, func() string { return "fan-out not settled" }); err != nil {
		return res, err
	}
	if res.waiting, res.shed, err = s.stuckCounts(ctx, overloadStuck); err != nil {
		return res, err
	}
	fmt.Fprintf(os.Stderr, "  the paused one got %d requests while paused\n", e.rcv.snapshot(overloadStuck).requests)
	fmt.Fprintf(os.Stderr, "  beside a paused one: %d deliveries in %.2fs (%.0f/s), ratio %.2f; the paused one: %d waiting, %d dead-lettered as backlog\n",
		res.beside.delivered, res.beside.total.Seconds(), res.beside.rate(), res.ratio(), res.waiting, res.shed)

	// (b) DELIVERIES full, then the paused one resumed.
	d, err := s.js.Stream(ctx, streams.Deliveries)
	if err != nil {
		return res, err
	}
	info, err := d.Info(ctx)
	if err != nil {
		return res, err
	}
	sc := info.Config
	res.maxBytes = max(int64(info.State.Bytes), 64<<10)
	sc.MaxBytes = res.maxBytes
	if _, err := s.js.UpdateStream(ctx, sc); err != nil {
		return res, fmt.Errorf("shrinking DELIVERIES: %w", err)
	}
	start := time.Now()
	if err := e.relayCommand(ctx, s, "sub", "resume", overloadStuck); err != nil {
		return res, err
	}
	err = s.waitUntil(ctx, "overload drain", cfg.timeout, func() (bool, error) {
		waiting, _, err := s.stuckCounts(ctx, overloadStuck)
		return waiting == 0 && e.rcv.snapshot(overloadStuck).distinct >= res.waiting, err
	}, func() string {
		return fmt.Sprintf("%d of %d delivered", e.rcv.snapshot(overloadStuck).distinct, res.waiting)
	})
	res.drain = time.Since(start)
	res.drained = e.rcv.snapshot(overloadStuck).distinct
	if err != nil {
		return res, err
	}
	_, shedAfter, _ := s.stuckCounts(ctx, overloadStuck)
	fmt.Fprintf(os.Stderr, "  DELIVERIES set to %s, the paused one resumed: %d delivered in %.1fs (%d requests; %d dead-lettered as backlog now)\n",
		streams.FormatBytes(res.maxBytes), res.drained, res.drain.Seconds(), e.rcv.snapshot(overloadStuck).requests, shedAfter)
	return res, nil
}

// stuckCounts is what waits for a subscriber (its lane and overflow in
// DELIVERIES, RETRIES) and its backlog dead letters, from per-subject counts.
func (s *stack) stuckCounts(ctx context.Context, id string) (waiting, shed int, err error) {
	for _, q := range []struct {
		stream, filter string
		into           *int
	}{
		{streams.Deliveries, streams.SubscriberDeliveries(id), &waiting},
		{streams.Retries, "retries.*." + id + ".>", &waiting},
		{streams.Retries, streams.RetryDuePrefix + id, &waiting},
		{streams.DLQ, streams.DeadLetterSubject(id, "backlog"), &shed},
	} {
		st, err := s.js.Stream(ctx, q.stream)
		if err != nil {
			return 0, 0, err
		}
		info, err := st.Info(ctx, jetstream.WithSubjectFilter(q.filter))
		if err != nil {
			return 0, 0, err
		}
		for _, n := range info.State.Subjects {
			*q.into += int(n)
		}
	}
	return waiting, shed, nil
}

// overloadTable reports an overload run.
func overloadTable(r overloadResult) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "### Overload: %s events to each of %d healthy subscribers, alone and beside a paused one with --max-backlog %s\n\n",
		thousands(int64(r.events)), r.healthy, thousands(int64(r.bound)))
	sb.WriteString("One relay; delivered ÷ (last arrival − first publish) of the healthy subscribers' deliveries.\n\n")
	sb.WriteString("| what | deliveries | all delivered, s | deliveries/s |\n| --- | ---: | ---: | ---: |\n")
	fmt.Fprintf(&sb, "| healthy alone | %s | %.2f | %.0f |\n", thousands(int64(r.alone.delivered)), r.alone.total.Seconds(), r.alone.rate())
	fmt.Fprintf(&sb, "| beside the paused one | %s | %.2f | %.0f |\n\n", thousands(int64(r.beside.delivered)), r.beside.total.Seconds(), r.beside.rate())
	fmt.Fprintf(&sb, "Beside ÷ alone: **%.2f**. The paused one: %d waiting, %d dead-lettered as `backlog`. ", r.ratio(), r.waiting, r.shed)
	fmt.Fprintf(&sb, "DELIVERIES then set to what it held (%s) and the paused one resumed: its %d delivered in %.1f s.\n",
		streams.FormatBytes(r.maxBytes), r.drained, r.drain.Seconds())
	return sb.String()
}
