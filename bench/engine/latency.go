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

// latencyRun is one steady rate: how well the publisher kept its schedule
// and how long each event took from its publish call to its first arrival.
type latencyRun struct {
	rate     float64       // the schedule, events/s
	span     time.Duration // how long the schedule lasts (-latency-for)
	l        latency       // published, arrived, p50, p99, max
	p90      time.Duration // not in latency, which the lane-mate shares
	achieved float64       // events/s actually published: (n−1) ÷ (last publish call − first)
	worstLag time.Duration // the latest any publish call came after its scheduled time
	requests int           // requests that reached the receiver, duplicates included
	distinct int           // webhook-ids that reached the receiver
}

// behind reports whether the publisher fell short of its schedule by more
// than 1%: then the latency was measured at the achieved rate, not the
// asked one, and the table says so.
func (r latencyRun) behind() bool { return r.achieved < 0.99*r.rate }

// latency measures publish → first arrival for one subscriber (--rate 0
// --max-in-flight 64) at each rate of -latency-rates in turn, for
// -latency-for each, on one relay: the question is how long an event waits
// in relay when the relay is not saturated, which a burst cannot tell. Each
// run starts with an unmeasured second at its rate, so that connections,
// caches and the lane's pull are warm.
func (e *env) latency(ctx context.Context) (out []latencyRun, err error) {
	cfg := e.cfg
	fmt.Fprintf(os.Stderr, "latency: one subscriber (--rate 0 --max-in-flight %d), events at %s/s for %v each\n",
		unlimitedInFlight, formatRates(cfg.latencyRates), cfg.latencyFor)
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
	for k, rate := range cfg.latencyRates {
		if ctx.Err() != nil {
			break
		}
		warmN := max(1, int(math.Round(rate)))
		if _, err := e.latencyOne(ctx, s, id, fmt.Sprintf("%sl%dw-", eventPrefix, k), rate, warmN); err != nil {
			return out, fmt.Errorf("latency at %g/s, warm-up: %w", rate, err)
		}
		n := max(1, int(math.Round(rate*cfg.latencyFor.Seconds())))
		r, err := e.latencyOne(ctx, s, id, fmt.Sprintf("%sl%d-", eventPrefix, k), rate, n)
		r.span = cfg.latencyFor
		if err != nil {
			return out, fmt.Errorf("latency at %g/s: %w", rate, err)
		}
		fmt.Fprintf(os.Stderr, "  %g/s: published %d at %.0f/s (worst lag %.1f ms); %d arrived, p50 %.1f ms, p90 %.1f ms, p99 %.1f ms, max %.1f ms\n",
			rate, r.l.published, r.achieved, ms(r.worstLag), r.l.arrived, ms(r.l.p50), ms(r.p90), ms(r.l.p99), ms(r.l.max))
		out = append(out, r)
	}
	return out, ctx.Err()
}

// latencyOne publishes n events on events.x at rate on a schedule (the
// pacer), waits for them at subscriber id and computes the latencies from
// each event's publish call to its first arrival. The receiver's record of
// id is cleared first, so that a warm-up does not count.
func (e *env) latencyOne(ctx context.Context, s *stack, id, prefix string, rate float64, n int) (latencyRun, error) {
	e.rcv.forget(id)
	r := latencyRun{rate: rate, l: latency{published: n}}
	sent, p, err := e.paced(ctx, s, "events.x", prefix, rate, n)
	if err != nil {
		return r, err
	}
	r.achieved, r.worstLag = p.achieved(n), p.worstLag
	err = s.waitUntil(ctx, "deliveries at a steady rate", latencyWait, func() (bool, error) {
		return e.rcv.snapshot(id).distinct >= n, nil
	}, func() string { return fmt.Sprintf("%d of %d arrived", e.rcv.snapshot(id).distinct, n) })
	if err != nil && (ctx.Err() != nil || s.relay.exited()) {
		return r, err
	}
	// Missing deliveries are reported as such, not as an error.
	arrived := e.rcv.arrivals(id, prefix) // one request for all of them
	lat := make([]time.Duration, 0, n)
	for i := range n {
		if at, ok := arrived[prefix+strconv.Itoa(i)]; ok {
			lat = append(lat, at.Sub(sent[i]))
		}
	}
	r.l.arrived = len(lat)
	snap := e.rcv.snapshot(id)
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

// latencyTable is a row per rate: the publisher's schedule as kept, what
// arrived and the latency percentiles.
func latencyTable(runs []latencyRun) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "### Latency: one subscriber (--rate 0 --max-in-flight %d), events at a steady rate, publish call → first arrival\n\n",
		unlimitedInFlight)
	sb.WriteString("Every rate on the same relay, one after the other, each after an unmeasured second at its rate; " +
		"each event published on its own schedule with an async PubAck.\n\n")
	sb.WriteString("| rate, events/s | for, s | published | achieved, events/s | worst lag behind schedule, ms | arrived | p50, ms | p90, ms | p99, ms | max, ms |\n")
	sb.WriteString("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, r := range runs {
		fmt.Fprintf(&sb, "| %s | %.0f | %s | %s | %.1f | %s of %s | %.1f | %.1f | **%.1f** | %.1f |\n",
			rateString(r.rate), r.span.Seconds(), thousands(int64(r.l.published)), thousands(int64(math.Round(r.achieved))),
			ms(r.worstLag), thousands(int64(r.l.arrived)), thousands(int64(r.l.published)),
			ms(r.l.p50), ms(r.p90), ms(r.l.p99), ms(r.l.max))
	}
	for _, r := range runs {
		if r.behind() {
			fmt.Fprintf(&sb, "- at %s/s the publisher fell behind its schedule: it published %s/s; the latencies are at that rate\n",
				rateString(r.rate), thousands(int64(math.Round(r.achieved))))
		}
		if dup := r.requests - r.distinct; dup > 0 {
			fmt.Fprintf(&sb, "- at %s/s: %d duplicate requests (same webhook-id twice)\n", rateString(r.rate), dup)
		}
	}
	return sb.String()
}

// rateString writes a rate with thousands separators when it is whole
// (5,000), as it is given otherwise (2.5).
func rateString(r float64) string {
	if r == math.Trunc(r) && r < 1e15 {
		return thousands(int64(r))
	}
	return strconv.FormatFloat(r, 'g', -1, 64)
}
