package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/relay-dev/relay/internal/subscribers"
)

// ---- isolation: a healthy subscriber beside misbehaving lane-mates ----

// The isolation scenario's subscribers: the healthy one measured, its two
// healthy peers of phase (a), and the hanging and the failing one of phase
// (b). The peers and the bad ones get numbered ids chosen to share the
// healthy one's lane.
const (
	isoHealthy    = "iso"
	isoPeerPrefix = "isopeer"
	isoHangPrefix = "isohang"
	isoFailPrefix = "isofail"
)

// isolationRun is one run on a fresh server and relay: the healthy
// subscriber alone, beside healthy peers, then beside a hanging and a
// failing subscriber.
type isolationRun struct {
	run    int
	lane   string
	events int

	alone  burstRun // the events copied to the healthy subscriber alone
	peers  burstRun // (a): beside two peers answering 204
	beside burstRun // (b): beside a receiver that hangs and one that answers 500

	// During (b), until the healthy subscriber had everything.
	hung   int64 // requests the hanging receiver took (and never answered)
	failed int64 // requests the failing receiver answered with 500
}

// ratio is (b)'s delivered/s over (a)'s: the figure the target is about.
func (r isolationRun) ratio() float64 {
	if a := r.peers.rate(); a > 0 {
		return r.beside.rate() / a
	}
	return 0
}

// ratioAlone is (b)'s delivered/s over the healthy subscriber's alone. The
// healthy peers of (a) cost the relay two full deliveries of every event,
// the misbehaving ones of (b) far less once relay backs off from them, so
// (b) ÷ (a) flatters (b) on a machine whose CPU is the limit; this one
// charges the misbehaving ones with everything they cost (their copies,
// their parked retries, their overflow).
func (r isolationRun) ratioAlone() float64 {
	if a := r.alone.rate(); a > 0 {
		return r.beside.rate() / a
	}
	return 0
}

// isolation measures, -isolation-runs times and each time on a fresh server
// and relay, one healthy subscriber (--rate 0 --max-in-flight 64) taking
// -isolation-events three times: alone, (a) beside two peers that answer
// 204, (b) beside one subscriber whose receiver hangs until the request
// times out (-isolation-timeout) and one whose receiver answers 500, the
// peers and the misbehaving ones receiving the same events as the healthy
// one. Every subscriber is on the healthy one's lane, the hard case: they
// share its consumer, its pulls and its slots. docs/delivery-rules.md promises that a
// failing or slow subscriber never delays its lane-mates; (b) ÷ (a) says how
// far that holds for throughput.
func (e *env) isolation(ctx context.Context) ([]isolationRun, error) {
	cfg := e.cfg
	fmt.Fprintf(os.Stderr, "isolation: %d runs of %d events to a healthy subscriber, alone, beside healthy peers, then beside a hanging (--timeout %v) and a failing one, all on lane %s\n",
		cfg.isolationRuns, cfg.isolationEvents, cfg.isolationTimeout, subscribers.LaneFor(isoHealthy, cfg.lanes))
	var out []isolationRun
	for i := 1; i <= cfg.isolationRuns && ctx.Err() == nil; i++ {
		r, err := e.isolationOne(ctx, i)
		if err != nil {
			return out, fmt.Errorf("isolation run %d: %w", i, err)
		}
		fmt.Fprintf(os.Stderr, "  [%d] alone %.0f/s, beside healthy peers %.0f/s, beside a hanging and a failing one %.0f/s (%d requests held, %d answered 500): (b)/(a) %.2f, (b)/alone %.2f\n",
			i, r.alone.rate(), r.peers.rate(), r.beside.rate(), r.hung, r.failed, r.ratio(), r.ratioAlone())
		out = append(out, r)
	}
	return out, ctx.Err()
}

// isolationOne is one run on a fresh server and relay: alone, (a), then
// (b). The healthy subscriber takes every event of iso.*; the events it
// takes alone are iso.o, its peers take iso.a and the misbehaving ones
// iso.b, so that (a) and (b) copy every event to three subscribers. The
// misbehaving ones are added only after (a), and are not warmed up: how
// they start misbehaving is part of what (b) measures.
func (e *env) isolationOne(ctx context.Context, i int) (res isolationRun, err error) {
	cfg := e.cfg
	res = isolationRun{run: i, events: cfg.isolationEvents, lane: subscribers.LaneFor(isoHealthy, cfg.lanes)}
	peers := sameLane(isoPeerPrefix, res.lane, cfg.lanes, 2)
	hangID := sameLane(isoHangPrefix, res.lane, cfg.lanes, 1)[0]
	failID := sameLane(isoFailPrefix, res.lane, cfg.lanes, 1)[0]
	hang, fail := newHangingReceiver(), newFailingReceiver()
	defer hang.close()
	defer fail.close()
	s, err := e.up(ctx, fmt.Sprintf("iso%02d", i))
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, s.down()) }()
	// Before the relay stops: it waits for its requests in flight, and
	// those to the hanging receiver would wait out their timeout.
	defer hang.release()
	forget := func() {
		for _, id := range append([]string{isoHealthy}, peers...) {
			e.rcv.forget(id)
		}
	}
	defer forget()

	if err := e.subAdd(ctx, s, isoHealthy, 0, unlimitedInFlight, "iso.*"); err != nil {
		return res, err
	}
	for _, id := range peers {
		if err := e.subAdd(ctx, s, id, 0, unlimitedInFlight, "iso.a"); err != nil {
			return res, err
		}
	}
	healthy := func() int { return e.rcv.snapshot(isoHealthy).distinct }
	peersDone := func(n int) func() (bool, error) {
		return func() (bool, error) {
			for _, id := range peers {
				if e.rcv.snapshot(id).distinct < n {
					return false, nil
				}
			}
			return true, nil
		}
	}
	// A warm-up, not measured: connections opened, caches filled.
	warm := min(res.events, 1000)
	if err := e.publish(ctx, s, "iso.a", fmt.Sprintf("%si%02dw-", eventPrefix, i), warm); err != nil {
		return res, err
	}
	if err := s.waitUntil(ctx, "isolation warm-up", cfg.timeout, func() (bool, error) {
		if healthy() < warm {
			return false, nil
		}
		return peersDone(warm)()
	}, func() string { return fmt.Sprintf("%d of %d arrived at %s", healthy(), warm, isoHealthy) }); err != nil {
		return res, err
	}
	forget()
	// phase publishes the events on events.<eventType> and measures the
	// healthy subscriber's delivered/s up to its last arrival.
	phase := func(eventType, tag string) (burstRun, error) {
		var start time.Time
		r, err := e.measure(ctx, s, res.events, func() error {
			start = time.Now()
			return e.publish(ctx, s, eventType, fmt.Sprintf("%si%02d%s-", eventPrefix, i, tag), res.events)
		}, healthy)
		if err != nil {
			return r, err
		}
		snap := e.rcv.snapshot(isoHealthy)
		r.total = snap.last.Sub(start) // the last arrival, not the poll that saw it
		r.requests = snap.requests
		return r, nil
	}

	if res.alone, err = phase("iso.o", "o"); err != nil {
		return res, fmt.Errorf("alone: %w", err)
	}
	forget()

	// (a) Beside healthy peers.
	if res.peers, err = phase("iso.a", "a"); err != nil {
		return res, fmt.Errorf("beside healthy peers: %w", err)
	}
	if err := s.waitUntil(ctx, "the peers' deliveries", cfg.timeout, peersDone(res.events),
		func() string { return "waiting for the peers" }); err != nil {
		return res, err
	}
	forget()

	// (b) Beside a hanging and a failing subscriber on the same lane.
	timeout := []string{"--timeout", cfg.isolationTimeout.String()}
	if err := e.subAddAt(ctx, s, hangID, hang.srv.URL+"/"+hangID, 0, unlimitedInFlight, "iso.b", timeout...); err != nil {
		return res, err
	}
	if err := e.subAddAt(ctx, s, failID, fail.srv.URL+"/"+failID, 0, unlimitedInFlight, "iso.b", timeout...); err != nil {
		return res, err
	}
	hung0, failed0 := hang.requests.Load(), fail.requests.Load()
	res.beside, err = phase("iso.b", "b")
	res.hung, res.failed = hang.requests.Load()-hung0, fail.requests.Load()-failed0
	if err != nil {
		return res, fmt.Errorf("beside a hanging and a failing subscriber: %w", err)
	}
	return res, nil
}

// sameLane returns the first n ids <prefix><k>, k from 0, that
// subscribers.LaneFor puts on lane among lanes shared lanes.
func sameLane(prefix, lane string, lanes, n int) []string {
	var out []string
	for k := 0; len(out) < n; k++ {
		if id := prefix + strconv.Itoa(k); subscribers.LaneFor(id, lanes) == lane {
			out = append(out, id)
		}
	}
	return out
}

// badReceiver is a loopback webhook receiver that misbehaves, counting the
// requests it takes.
type badReceiver struct {
	srv      *httptest.Server
	requests atomic.Int64
	released chan struct{} // closed: a hanging receiver answers at once
	once     sync.Once
}

// newHangingReceiver accepts every request, reads its body and never
// answers: the request ends when the relay's timeout closes the connection,
// or when release is called.
func newHangingReceiver() *badReceiver {
	b := &badReceiver{released: make(chan struct{})}
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b.requests.Add(1)
		_, _ = io.Copy(io.Discard, req.Body)
		select {
		case <-req.Context().Done(): // the relay gave up
		case <-b.released:
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	return b
}

// newFailingReceiver answers every request with 500 at once, which relay
// retries later and counts toward the subscriber's breaker.
func newFailingReceiver() *badReceiver {
	b := &badReceiver{released: make(chan struct{})}
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b.requests.Add(1)
		_, _ = io.Copy(io.Discard, req.Body)
		w.WriteHeader(http.StatusInternalServerError)
	}))
	return b
}

// release makes a hanging receiver answer every request it holds and every
// later one at once, so that nothing waits for a timeout on the way out.
func (b *badReceiver) release() { b.once.Do(func() { close(b.released) }) }

// close releases what the receiver holds and stops it.
func (b *badReceiver) close() {
	b.release()
	b.srv.Close()
}

// isolationTable is a row per run and the ratios over the runs.
func isolationTable(cfg config, runs []isolationRun) string {
	var sb strings.Builder
	lane := subscribers.LaneFor(isoHealthy, cfg.lanes)
	fmt.Fprintf(&sb, "### Isolation: %s events to a healthy subscriber (--rate 0 --max-in-flight %d), alone, beside healthy peers and beside misbehaving ones, all on lane %s\n\n",
		thousands(int64(cfg.isolationEvents)), unlimitedInFlight, lane)
	fmt.Fprintf(&sb, "Each run on a fresh server and relay, the three one after the other on the same relay, after a warm-up; "+
		"every subscriber on lane %s. Alone: the events go to the healthy one only. "+
		"(a) every event also to two peers answering 204; (b) every event also to one subscriber whose receiver never answers "+
		"(`--timeout %v`) and one whose receiver answers 500, both added after (a). "+
		"Delivered to the healthy one ÷ (its last arrival − first publish).\n\n", lane, cfg.isolationTimeout)
	sb.WriteString("| run | alone, delivered/s | (a) beside healthy peers, delivered/s | (b) beside a hanging and a failing one, delivered/s | (b) / (a) | (b) / alone | (b) all delivered, s | requests the hanging one took | 500s the failing one gave |\n")
	sb.WriteString("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, r := range runs {
		fmt.Fprintf(&sb, "| %d | %s | %s | %s | %.2f | %.2f | %.2f | %s | %s |\n", r.run,
			thousands(int64(r.alone.rate())), thousands(int64(r.peers.rate())), thousands(int64(r.beside.rate())),
			r.ratio(), r.ratioAlone(), r.beside.total.Seconds(), thousands(r.hung), thousands(r.failed))
	}
	ratios, alone := collect(runs, isolationRun.ratio), collect(runs, isolationRun.ratioAlone)
	fmt.Fprintf(&sb, "\n(b) / (a), median: **%.2f** (lowest %.2f, highest %.2f); (b) / alone, median: %.2f (lowest %.2f, highest %.2f); runs: %d\n",
		median(ratios), slices.Min(ratios), slices.Max(ratios), median(alone), slices.Min(alone), slices.Max(alone), len(runs))
	for _, r := range runs {
		for _, x := range []struct {
			name string
			b    burstRun
		}{{"alone", r.alone}, {"(a)", r.peers}, {"(b)", r.beside}} {
			if dup := x.b.requests - x.b.delivered; dup > 0 {
				fmt.Fprintf(&sb, "- run %d, %s: %d duplicate requests (same webhook-id twice)\n", r.run, x.name, dup)
			}
		}
	}
	return sb.String()
}
