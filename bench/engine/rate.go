package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/internal/deliver"
	"github.com/relay-dev/relay/internal/lanes"
	"github.com/relay-dev/relay/internal/metrics"
	"github.com/relay-dev/relay/internal/ratelimit"
	"github.com/relay-dev/relay/internal/retry"
	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/streams"
)

// ---- rate: does relay keep a subscriber's rate? ----
//
// The rate scenario measures how closely relay keeps the rate rule of docs/delivery-rules.md:
//
//	In any interval of length T, at most burst + rate × T requests go to one
//	subscriber, summed over all relay instances, plus at most one lease of
//	tokens (≤ max(1, rate × 0.1)). With a backlog, the lane achieves ≥ 95% of
//	its rate.
//
// Unlike the other scenarios it measures the library, not the binary: the
// rule is about how relays share one token bucket, and several relays are
// cheapest and best controlled in this process. On a nats-server of its own
// (in-process, one for the whole scenario), for each rate and each number
// of relays, it creates a fresh subscriber with that rate, publishes a
// backlog of rate × -rate-backlog deliveries straight onto DELIVERIES,
// starts the relays in this process (each with its own NATS connection,
// subscriber watch, HTTP client and shared rate limiter, as separate `relay
// run` processes would have, running lanes.Run, retry.Move and the limiter's watch), waits until
// every delivery has reached the receiver process, and reports:
//
//   - achieved/rate: (requests − burst) ÷ (last − first arrival) ÷ rate;
//   - the worst overshoot of the cap over every window between two arrivals,
//     max(requests in [tᵢ, tⱼ] − (burst + rate × (tⱼ − tᵢ))), in requests
//     and in leases (ratelimit.LeaseSize);
//   - the relay_ratelimit KV writes, lost compare-and-sets and reads per
//     request, summed over the relays' limiters, and the deliveries the
//     lanes moved to overflow per request.
//
// A run lasts about its backlog when the lanes keep the rate, longer when
// they fall behind.

// Thresholds of the rate rule of docs/delivery-rules.md.
const (
	rateMinAchieved  = 0.95 // of the rate, with a backlog
	rateSlackInLease = 1.0  // at most one lease over burst + rate × T
)

// rateChunk is how many deliveries the rate scenario publishes before
// waiting for their PubAcks, well under its connection's default limit of
// pending async publishes.
const rateChunk = 2000

// rateConfig is the rate scenario's flags, all prefixed rate-. The body
// size is the engine's -payload.
type rateConfig struct {
	ratesList, relaysList string // the flags as given, parsed by check

	rates         []float64
	relays        []int
	backlog       time.Duration
	lanes         int
	burst         int
	burstFraction float64
	maxInFlight   int
	verbose       bool
	timeline      time.Duration
}

// register defines the rate scenario's flags on fs.
func (c *rateConfig) register(fs *flag.FlagSet) {
	fs.StringVar(&c.ratesList, "rate-rates", "10,100,1000", "rate: comma-separated subscriber rates, requests/s")
	fs.StringVar(&c.relaysList, "rate-relays", "1,3", "rate: comma-separated numbers of in-process relays sharing the subscriber")
	fs.DurationVar(&c.backlog, "rate-backlog", 30*time.Second, "rate: backlog per run, as time at the rate (rate × backlog messages)")
	fs.IntVar(&c.lanes, "rate-lanes", 4, "rate: shared lanes of the in-process relays")
	fs.IntVar(&c.burst, "rate-burst", 0, "rate: burst of every subscriber (0: the rate, as `relay sub add` defaults)")
	fs.Float64Var(&c.burstFraction, "rate-burst-fraction", 0, "rate: burst as a fraction of the rate, rounded up (0: unset)")
	fs.IntVar(&c.maxInFlight, "rate-max-in-flight", 64, "rate: max in-flight requests per relay and subscriber")
	fs.BoolVar(&c.verbose, "rate-v", false, "rate: show the in-process relays' info logs")
	fs.DurationVar(&c.timeline, "rate-timeline", 0, "rate: print each run's arrivals per interval of this length on stderr (0: off)")
}

// check parses the lists and validates the flags, after fs.Parse.
func (c *rateConfig) check() error {
	var err error
	if c.rates, err = parseList(c.ratesList, func(s string) (float64, error) { return strconv.ParseFloat(s, 64) }); err != nil {
		return fmt.Errorf("-rate-rates: %w", err)
	}
	if c.relays, err = parseList(c.relaysList, strconv.Atoi); err != nil {
		return fmt.Errorf("-rate-relays: %w", err)
	}
	for _, r := range c.rates {
		if r <= 0 || math.IsInf(r, 0) || math.IsNaN(r) {
			return fmt.Errorf("-rate-rates: %v is not a positive rate", r)
		}
	}
	for _, n := range c.relays {
		if n < 1 {
			return fmt.Errorf("-rate-relays: %d is not a positive count", n)
		}
	}
	switch {
	case c.backlog <= 0:
		return errors.New("-rate-backlog must be positive")
	case c.lanes < 1:
		return errors.New("-rate-lanes must be at least 1")
	case c.burst < 0 || c.burstFraction < 0:
		return errors.New("-rate-burst and -rate-burst-fraction must not be negative")
	case c.burst > 0 && c.burstFraction > 0:
		return errors.New("give -rate-burst or -rate-burst-fraction, not both")
	case c.maxInFlight < 1:
		return errors.New("-rate-max-in-flight must be at least 1")
	case c.timeline < 0:
		return errors.New("-rate-timeline must not be negative")
	}
	return nil
}

// parseList parses a comma-separated list, ignoring empty items; an empty
// list is an error.
func parseList[T any](s string, parse func(string) (T, error)) ([]T, error) {
	var out []T
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		v, err := parse(f)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, errors.New("empty list")
	}
	return out, nil
}

// burstFor is the burst a subscriber with rate gets.
func (c rateConfig) burstFor(rate float64) int {
	switch {
	case c.burst > 0:
		return c.burst
	case c.burstFraction > 0:
		return max(1, int(math.Ceil(rate*c.burstFraction)))
	default:
		return max(1, int(math.Ceil(rate)))
	}
}

// rateRun is one row of the rate table: one rate, one number of relays.
type rateRun struct {
	rate      float64
	relays    int
	burst     int
	lease     int
	backlog   int
	requests  int
	distinct  int
	achieved  float64 // requests/s after the burst
	overshoot float64 // requests over burst + rate × T, worst window
	worstN    int     // requests in the worst window
	worstT    float64 // its length, s
	worstAt   float64 // its start, s after the first arrival
	gap       float64 // longest time between two arrivals, s
	gapAt     float64 // its start, s after the first arrival
	span      float64 // first to last arrival, s
	writes    int64
	conflicts int64
	reads     int64
	handBacks float64 // deliveries the lanes moved to overflow
	complete  bool
}

// ratio is the achieved rate as a share of the subscriber's.
func (r rateRun) ratio() float64 { return r.achieved / r.rate }

// leases is the worst overshoot in leases, the unit of the rule's slack.
func (r rateRun) leases() float64 { return r.overshoot / float64(r.lease) }

// perReq is n per request that arrived; NaN when none did.
func (r rateRun) perReq(n int64) float64 {
	if r.requests == 0 {
		return math.NaN()
	}
	return float64(n) / float64(r.requests)
}

// derived is the figures the rate table prints, for the -json file.
func (r rateRun) derived() map[string]any {
	return map[string]any{
		"achieved_per_rate": r.ratio(), "overshoot_leases": r.leases(),
		"kv_writes_per_request": r.perReq(r.writes), "conflicts_per_request": r.perReq(r.conflicts),
		"kv_reads_per_request": r.perReq(r.reads), "overflow_per_request": r.handBacks / float64(max(1, r.requests)),
	}
}

// rateBench is what the rate scenario's runs share: its server, its
// subscriber store and the receiver.
type rateBench struct {
	cfg    rateConfig
	url    string // NATS
	js     jetstream.JetStream
	store  *subscribers.Store
	rcv    *receiver
	secret string
	log    *slog.Logger
	body   []byte
}

// rate runs every rate × number of relays of the rate scenario on one
// in-process nats-server of its own, and returns the runs done.
func (e *env) rate(ctx context.Context) ([]rateRun, error) {
	cfg := e.cfg.rate
	level := slog.LevelWarn
	if cfg.verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	prev := slog.Default()
	slog.SetDefault(log) // what the library logs without a logger of its own, too
	defer slog.SetDefault(prev)

	dir := filepath.Join(e.work, "rate")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	srv, err := streams.StartServer(streams.ServerConfig{Listen: "127.0.0.1:0", DataDir: dir})
	if err != nil {
		return nil, err
	}
	defer func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	}()

	nc, err := nats.Connect(srv.ClientURL(), nats.Name("bench/engine rate"))
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	setupCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := streams.Ensure(setupCtx, js, streams.Options{}); err != nil {
		return nil, err
	}
	store, err := subscribers.Open(setupCtx, js)
	if err != nil {
		return nil, err
	}
	b := &rateBench{
		cfg: cfg, url: srv.ClientURL(), js: js, store: store, rcv: e.rcv,
		secret: e.secret, log: log, body: e.body,
	}

	runs := len(cfg.rates) * len(cfg.relays)
	fmt.Fprintf(os.Stderr, "rate: %d runs (rates %v/s × %v relays in this process), backlog %v each at the rate, %d shared lanes; about %v in all\n",
		runs, cfg.rates, cfg.relays, cfg.backlog, cfg.lanes, time.Duration(runs)*cfg.backlog)
	var results []rateRun
	i := 0
	for _, rate := range cfg.rates {
		for _, n := range cfg.relays {
			if ctx.Err() != nil {
				return results, ctx.Err()
			}
			i++
			res, err := b.runOne(ctx, i, rate, n)
			if err != nil {
				return results, fmt.Errorf("rate %g, %d relays: %w", rate, n, err)
			}
			fmt.Fprintf(os.Stderr, "  -> %s\n", rateDetail(res))
			results = append(results, res)
		}
	}
	return results, ctx.Err()
}

// runOne is one run: a fresh subscriber at rate, its backlog, relays
// in-process relays draining it.
func (b *rateBench) runOne(ctx context.Context, index int, rate float64, relays int) (rateRun, error) {
	id := fmt.Sprintf("bench%02d-%d", index, time.Now().UnixNano()%1_000_000_000)
	burst := b.cfg.burstFor(rate)
	res := rateRun{
		rate: rate, relays: relays, burst: burst,
		lease:   ratelimit.LeaseSize(rate, ratelimit.Limit{Rate: rate, Burst: burst}),
		backlog: max(1, int(math.Round(rate*b.cfg.backlog.Seconds()))),
	}
	sub := subscribers.Subscriber{
		ID: id, URL: b.rcv.URL + "/" + id, Secrets: []string{b.secret},
		Rate: rate, Burst: burst, MaxInFlight: b.cfg.maxInFlight,
	}
	opCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := b.store.Put(opCtx, sub); err != nil {
		return res, err
	}
	defer func() {
		delCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = b.store.Delete(delCtx, id)
		b.rcv.forget(id)
	}()
	fmt.Fprintf(os.Stderr, "  [%d] rate %g/s, burst %d, lease %d, %d relays: publishing %d deliveries\n",
		index, rate, burst, res.lease, relays, res.backlog)
	if err := b.enqueue(opCtx, sub, res.backlog); err != nil {
		return res, err
	}

	runCtx, stopRelays := context.WithCancel(ctx)
	defer stopRelays()
	var started []*libRelay
	stopAll := func() error {
		stopRelays()
		var errs []error
		for _, r := range started {
			errs = append(errs, r.wait())
		}
		return errors.Join(errs...)
	}
	start := time.Now()
	for range relays {
		r, err := b.startInProcess(runCtx)
		if err != nil {
			return res, errors.Join(err, stopAll())
		}
		started = append(started, r)
	}

	// Bounded wait: twice the expected drain, plus room for a slow start.
	expect := time.Duration(float64(res.backlog-min(burst, res.backlog)) / rate * float64(time.Second))
	deadline := start.Add(2*expect + 30*time.Second)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	lastProgress := start
	for {
		distinct := b.rcv.snapshot(id).distinct
		if distinct >= res.backlog {
			res.complete = true
			break
		}
		now := time.Now()
		if now.After(deadline) {
			fmt.Fprintf(os.Stderr, "  [%d] gave up after %v: %d of %d delivered\n",
				index, now.Sub(start).Round(time.Second), distinct, res.backlog)
			break
		}
		if now.Sub(lastProgress) >= 5*time.Second {
			lastProgress = now
			fmt.Fprintf(os.Stderr, "  [%d] %5.1fs  %d of %d delivered\n",
				index, now.Sub(start).Seconds(), distinct, res.backlog)
		}
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
		if ctx.Err() != nil {
			break
		}
	}
	// The counters are read before the relays stop: stopping hands messages
	// back but makes no KV operation for a delivered subscriber.
	for _, r := range started {
		st := r.limiter.Stats()
		res.writes += st.Writes
		res.conflicts += st.Conflicts
		res.reads += st.Reads
		res.handBacks += r.handBacks()
	}
	if err := stopAll(); err != nil {
		return res, err
	}

	snap := b.rcv.snapshot(id)
	res.requests, res.distinct = snap.requests, snap.distinct
	at := b.rcv.times(id)
	measureRate(&res, at)
	if b.cfg.timeline > 0 {
		fmt.Fprintf(os.Stderr, "  [%d] arrivals per %v: %s\n", index, b.cfg.timeline, rateTimeline(at, b.cfg.timeline))
	}
	return res, nil
}

// enqueue publishes count deliveries for sub straight onto DELIVERIES, as
// the fan-out would.
func (b *rateBench) enqueue(ctx context.Context, sub subscribers.Subscriber, count int) error {
	subject := streams.DeliverySubject(sub.Lane(b.cfg.lanes), sub.ID)
	for from := 0; from < count; from += rateChunk {
		to := min(count, from+rateChunk)
		acks := make([]jetstream.PubAckFuture, 0, to-from)
		for i := from; i < to; i++ {
			m := &nats.Msg{
				Subject: subject,
				Header: nats.Header{
					streams.HeaderEventID:   []string{fmt.Sprintf("%s-%d", sub.ID, i)},
					streams.HeaderEventType: []string{"bench.ratelimit"},
				},
				Data: b.body,
			}
			f, err := b.js.PublishMsgAsync(m)
			if err != nil {
				return err
			}
			acks = append(acks, f)
		}
		select {
		case <-b.js.PublishAsyncComplete():
		case <-ctx.Done():
			return fmt.Errorf("publishing the backlog: %w", ctx.Err())
		}
		for _, f := range acks {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				return fmt.Errorf("publishing the backlog: %w", err)
			}
		}
	}
	return nil
}

// libRelay is one relay instance in this process: its own connection,
// subscriber view, HTTP client and shared limiter, running the lanes and
// the retry mover.
type libRelay struct {
	nc      *nats.Conn
	live    *subscribers.Live
	limiter *ratelimit.Shared
	metrics *metrics.Metrics
	done    chan error
}

// handBacks is how many deliveries the relay's lanes moved to overflow so far.
func (r *libRelay) handBacks() float64 {
	families, err := r.metrics.Registry.Gather()
	if err != nil {
		return math.NaN()
	}
	for _, f := range families {
		if f.GetName() == "relay_deliveries_overflowed_total" && len(f.GetMetric()) > 0 {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}

// startInProcess starts one relay instance in this process, which runs
// until ctx is cancelled (then wait).
func (b *rateBench) startInProcess(ctx context.Context) (*libRelay, error) {
	nc, err := nats.Connect(b.url, nats.MaxReconnects(-1), nats.Name("bench/engine rate relay"))
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*libRelay, error) {
		nc.Close()
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return fail(err)
	}
	store, err := subscribers.Open(ctx, js)
	if err != nil {
		return fail(err)
	}
	live, err := store.Watch(ctx)
	if err != nil {
		return fail(err)
	}
	client, err := deliver.NewClient(deliver.WithAllowPrivate(true))
	if err != nil {
		return fail(err)
	}
	limiter, err := ratelimit.NewShared(ctx, js, ratelimit.Options{})
	if err != nil {
		return fail(err)
	}
	r := &libRelay{nc: nc, live: live, limiter: limiter, metrics: metrics.New(), done: make(chan error, 3)}
	go func() { r.done <- limiter.Follow(ctx, b.log) }()
	go func() {
		r.done <- lanes.Run(ctx, lanes.Config{
			JS: js, Subscribers: live, SharedLanes: b.cfg.lanes, Client: client,
			Limiter: limiter, Logger: b.log, Metrics: r.metrics,
			Disable: store.Disable,
		})
	}()
	go func() {
		r.done <- retry.Move(ctx, retry.MoverConfig{
			JS: js, Subscribers: live, SharedLanes: b.cfg.lanes, Logger: b.log,
		})
	}()
	return r, nil
}

// wait waits, after its context was cancelled, for the relay to hand back
// or finish what it holds, then closes its connection.
func (r *libRelay) wait() error {
	defer r.nc.Close()
	var errs []error
	timeout := time.After(time.Minute)
	for range 3 {
		select {
		case err := <-r.done:
			errs = append(errs, err)
		case <-timeout:
			return errors.New("a relay did not stop within a minute")
		}
	}
	select {
	case <-r.live.Done():
	case <-timeout:
		return errors.New("a subscriber watch did not stop within a minute")
	}
	return errors.Join(errs...)
}

// measureRate fills the achieved rate and the worst window from the arrival
// times.
func measureRate(res *rateRun, at []time.Time) {
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	res.achieved = math.NaN()
	res.overshoot = math.NaN()
	if len(at) == 0 {
		return
	}
	res.span = at[len(at)-1].Sub(at[0]).Seconds()
	if res.span > 0 && len(at) > res.burst {
		res.achieved = float64(len(at)-res.burst) / res.span
	}
	for k := 1; k < len(at); k++ {
		if g := at[k].Sub(at[k-1]).Seconds(); g > res.gap {
			res.gap, res.gapAt = g, at[k-1].Sub(at[0]).Seconds()
		}
	}
	// The window [tᵢ, tⱼ] holds j − i + 1 requests against a cap of
	// burst + rate × (tⱼ − tᵢ). With xₖ = k − rate × tₖ its overshoot is
	// xⱼ − xᵢ + 1 − burst, so the worst one over all i ≤ j is found in one
	// pass, keeping the smallest xᵢ seen so far.
	t0 := at[0]
	sec := func(k int) float64 { return at[k].Sub(t0).Seconds() }
	bestI, bestX := 0, 0.0
	worst, worstI, worstJ := math.Inf(-1), 0, 0
	for j := range at {
		x := float64(j) - res.rate*sec(j)
		if j == 0 || x < bestX {
			bestI, bestX = j, x
		}
		if over := x - bestX + 1 - float64(res.burst); over > worst {
			worst, worstI, worstJ = over, bestI, j
		}
	}
	res.overshoot = worst
	res.worstN = worstJ - worstI + 1
	res.worstT = sec(worstJ) - sec(worstI)
	res.worstAt = sec(worstI)
}

// rateTimeline counts the arrivals (sorted) in consecutive intervals of
// width d from the first one.
func rateTimeline(at []time.Time, d time.Duration) string {
	if len(at) == 0 {
		return ""
	}
	bins := make([]int, int(at[len(at)-1].Sub(at[0])/d)+1)
	for _, t := range at {
		bins[int(t.Sub(at[0])/d)]++
	}
	var sb strings.Builder
	for i, n := range bins {
		if i > 0 {
			sb.WriteByte(' ')
		}
		sb.WriteString(strconv.Itoa(n))
	}
	return sb.String()
}

// rateDetail is a run's line on stderr: every figure, the longest gap and
// where the worst window was, which the table leaves out.
func rateDetail(r rateRun) string {
	s := fmt.Sprintf("%d requests (%d distinct of %d) over %.3fs; %.1f/s after the burst (%.3f of the rate); "+
		"longest gap %.3fs at +%.3fs; worst window: %d requests in %.3fs from +%.3fs, %+.1f over burst + rate × T "+
		"(%.2f leases of %d); KV %d writes, %d conflicts, %d reads; %.0f to overflow",
		r.requests, r.distinct, r.backlog, r.span, r.achieved, r.ratio(), r.gap, r.gapAt,
		r.worstN, r.worstT, r.worstAt, r.overshoot, r.leases(), r.lease, r.writes, r.conflicts, r.reads, r.handBacks)
	if !r.complete {
		s += " — INCOMPLETE"
	}
	return s
}

// rateTable is the rate scenario's markdown: a row per run, then the burst
// and lease of each rate and a MISS line for every run outside docs/delivery-rules.md's
// rule (or the statement that none is).
func rateTable(cfg rateConfig, runs []rateRun) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "### Rate: backlogs of %v at the rate to one subscriber, shared by in-process relays (the library, %d shared lanes)\n\n",
		cfg.backlog, cfg.lanes)
	sb.WriteString("| rate/s | relays | requests | achieved/rate | worst overshoot, requests | worst overshoot, leases | KV writes/req | conflicts/req | KV reads/req | overflow/req |\n")
	sb.WriteString("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, r := range runs {
		fmt.Fprintf(&sb, "| %g | %d | %s | %.3f | %.1f | %.2f | %.3f | %.3f | %.3f | %.3f |\n",
			r.rate, r.relays, thousands(int64(r.requests)), r.ratio(), rounded(r.overshoot, 1), rounded(r.leases(), 2),
			r.perReq(r.writes), r.perReq(r.conflicts), r.perReq(r.reads), r.handBacks/float64(max(1, r.requests)))
	}
	sb.WriteString("\n")
	seen := map[float64]bool{}
	for _, r := range runs {
		if !seen[r.rate] {
			seen[r.rate] = true
			fmt.Fprintf(&sb, "- rate %g/s: burst %d, lease %d, backlog %s\n", r.rate, r.burst, r.lease, thousands(int64(r.backlog)))
		}
	}
	ok := true
	for _, r := range runs {
		var why []string
		if !r.complete {
			why = append(why, fmt.Sprintf("only %d of %d deliveries arrived", r.distinct, r.backlog))
		}
		if r.requests > r.distinct {
			why = append(why, fmt.Sprintf("%d duplicate requests", r.requests-r.distinct))
		}
		if !(r.ratio() >= rateMinAchieved) {
			why = append(why, fmt.Sprintf("achieved %.3f of the rate, under %.2f", r.ratio(), rateMinAchieved))
		}
		if !(r.leases() <= rateSlackInLease) {
			why = append(why, fmt.Sprintf("a window held %.1f requests (%.2f leases) over burst + rate × T: "+
				"%d requests in %.3fs from +%.3fs", r.overshoot, r.leases(), r.worstN, r.worstT, r.worstAt))
		}
		if len(why) > 0 {
			ok = false
			fmt.Fprintf(&sb, "- MISS rate %g, %d relays: %s\n", r.rate, r.relays, strings.Join(why, "; "))
		}
	}
	if ok {
		fmt.Fprintf(&sb, "\nevery run within the rule: achieved ≥ %.2f of the rate, overshoot ≤ one lease\n", rateMinAchieved)
	}
	return sb.String()
}

// rounded rounds v to the given decimals, without a negative zero.
func rounded(v float64, decimals int) float64 {
	p := math.Pow10(decimals)
	v = math.Round(v*p) / p
	if v == 0 {
		return 0
	}
	return v
}
