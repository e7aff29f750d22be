// Command ratelimit measures how closely relay keeps DESIGN.md's rate rule:
//
//	In any interval of length T, at most burst + rate × T requests go to one
//	subscriber, summed over all relay instances, plus at most one lease of
//	tokens (≤ max(1, rate × 0.1)). With a backlog, the lane achieves ≥ 95% of
//	its rate.
//
// For each rate and each number of relays it starts, it creates a fresh
// subscriber with that rate, publishes a backlog of rate × -backlog
// deliveries straight onto DELIVERIES, starts the relays in this process
// (each with its own NATS connection, subscriber watch, HTTP client and
// shared rate limiter, as separate `relay run` processes would have), waits
// until every delivery has reached a loopback receiver, and reports:
//
//   - achieved/rate: (requests − burst) ÷ (last − first arrival) ÷ rate;
//   - the worst overshoot of the cap over every window between two arrivals,
//     max(requests in [tᵢ, tⱼ] − (burst + rate × (tⱼ − tᵢ))), in requests
//     and in leases (ratelimit.LeaseSize);
//   - the relay_ratelimit KV writes and lost compare-and-sets per request,
//     summed over the relays' limiters.
//
// Run it from the module root:
//
//	go run ./bench/ratelimit                 # 10,100,1000/s × 1,3 relays, 30 s backlogs (about 3 min)
//	go run ./bench/ratelimit -backlog 5s     # quick mode
//
// A run lasts about its backlog when the lanes keep the rate, longer when
// they fall behind.
package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
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

// Thresholds of DESIGN.md's rate rule.
const (
	minAchieved  = 0.95 // of the rate, with a backlog
	slackInLease = 1.0  // at most one lease over burst + rate × T
)

// publishChunk is how many deliveries are published before waiting for
// their PubAcks, well under the client's limit of pending async publishes.
const publishChunk = 2000

type config struct {
	rates         []float64
	relays        []int
	backlog       time.Duration
	lanes         int
	burst         int
	burstFraction float64
	maxInFlight   int
	payload       int
	out           string
	verbose       bool
	timeline      time.Duration
}

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "ratelimit:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "ratelimit:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (config, error) {
	fs := flag.NewFlagSet("ratelimit", flag.ContinueOnError)
	rates := fs.String("rates", "10,100,1000", "comma-separated subscriber rates, requests/s")
	relays := fs.String("relays", "1,3", "comma-separated numbers of relays sharing the subscriber")
	var cfg config
	fs.DurationVar(&cfg.backlog, "backlog", 30*time.Second, "backlog per run, as time at the rate (rate × backlog messages)")
	fs.IntVar(&cfg.lanes, "lanes", 4, "shared lanes (--lanes)")
	fs.IntVar(&cfg.burst, "burst", 0, "burst of every subscriber (0: the rate, as `relay sub add` defaults)")
	fs.Float64Var(&cfg.burstFraction, "burst-fraction", 0, "burst as a fraction of the rate, rounded up (0: unset)")
	fs.IntVar(&cfg.maxInFlight, "max-in-flight", 64, "max in-flight requests per relay and subscriber")
	fs.IntVar(&cfg.payload, "payload", 200, "body size in bytes")
	fs.StringVar(&cfg.out, "out", "", "also write the table to this file")
	fs.BoolVar(&cfg.verbose, "v", false, "show the relays' info logs")
	fs.DurationVar(&cfg.timeline, "timeline", 0, "print each run's arrivals per interval of this length (0: off)")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	var err error
	if cfg.rates, err = parseList(*rates, func(s string) (float64, error) { return strconv.ParseFloat(s, 64) }); err != nil {
		return cfg, fmt.Errorf("-rates: %w", err)
	}
	if cfg.relays, err = parseList(*relays, strconv.Atoi); err != nil {
		return cfg, fmt.Errorf("-relays: %w", err)
	}
	for _, r := range cfg.rates {
		if r <= 0 || math.IsInf(r, 0) || math.IsNaN(r) {
			return cfg, fmt.Errorf("-rates: %v is not a positive rate", r)
		}
	}
	for _, n := range cfg.relays {
		if n < 1 {
			return cfg, fmt.Errorf("-relays: %d is not a positive count", n)
		}
	}
	switch {
	case cfg.backlog <= 0:
		return cfg, errors.New("-backlog must be positive")
	case cfg.lanes < 1:
		return cfg, errors.New("-lanes must be at least 1")
	case cfg.burst < 0 || cfg.burstFraction < 0:
		return cfg, errors.New("-burst and -burst-fraction must not be negative")
	case cfg.burst > 0 && cfg.burstFraction > 0:
		return cfg, errors.New("give -burst or -burst-fraction, not both")
	case cfg.maxInFlight < 1:
		return cfg, errors.New("-max-in-flight must be at least 1")
	case cfg.payload < 2:
		return cfg, errors.New("-payload must be at least 2 bytes")
	}
	return cfg, nil
}

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
func (c config) burstFor(rate float64) int {
	switch {
	case c.burst > 0:
		return c.burst
	case c.burstFraction > 0:
		return max(1, int(math.Ceil(rate*c.burstFraction)))
	default:
		return max(1, int(math.Ceil(rate)))
	}
}

// receiver records when each subscriber's requests arrive and answers 204
// at once.
type receiver struct {
	mu     sync.Mutex
	at     map[string][]time.Time
	unique map[string]map[string]struct{}
}

func newReceiver() *receiver {
	return &receiver{at: map[string][]time.Time{}, unique: map[string]map[string]struct{}{}}
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	_, _ = io.Copy(io.Discard, req.Body)
	id := strings.TrimPrefix(req.URL.Path, "/")
	r.mu.Lock()
	r.at[id] = append(r.at[id], time.Now())
	u := r.unique[id]
	if u == nil {
		u = map[string]struct{}{}
		r.unique[id] = u
	}
	u[req.Header.Get("webhook-id")] = struct{}{}
	r.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// counts returns the requests and the distinct webhook-ids seen for id.
func (r *receiver) counts(id string) (requests, distinct int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.at[id]), len(r.unique[id])
}

func (r *receiver) times(id string) []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.at[id])
}

// forget drops what was recorded for id.
func (r *receiver) forget(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.at, id)
	delete(r.unique, id)
}

// result is one row of the table.
type result struct {
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

func (r result) ratio() float64  { return r.achieved / r.rate }
func (r result) leases() float64 { return r.overshoot / float64(r.lease) }
func (r result) perReq(n int64) float64 {
	if r.requests == 0 {
		return math.NaN()
	}
	return float64(n) / float64(r.requests)
}

type bench struct {
	cfg    config
	url    string // NATS
	js     jetstream.JetStream
	store  *subscribers.Store
	rcv    *receiver
	hook   string // receiver URL
	secret string
	log    *slog.Logger
	body   []byte
}

func run(ctx context.Context, cfg config) error {
	level := slog.LevelWarn
	if cfg.verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	slog.SetDefault(log)

	dir, err := os.MkdirTemp("", "relay-bench-ratelimit-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	srv, err := streams.StartServer(streams.ServerConfig{Listen: "127.0.0.1:0", DataDir: dir})
	if err != nil {
		return err
	}
	defer func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	}()

	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	setupCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := streams.Ensure(setupCtx, js, streams.Options{}); err != nil {
		return err
	}
	store, err := subscribers.Open(setupCtx, js)
	if err != nil {
		return err
	}
	rcv := newReceiver()
	hook := httptest.NewServer(rcv)
	defer hook.Close()

	secret, err := newSecret()
	if err != nil {
		return err
	}
	b := &bench{
		cfg: cfg, url: srv.ClientURL(), js: js, store: store, rcv: rcv,
		hook: hook.URL, secret: secret, log: log, body: payload(cfg.payload),
	}

	rev := revision() // at the start: the tree may change while this runs
	runs := len(cfg.rates) * len(cfg.relays)
	fmt.Fprintf(os.Stderr, "%d runs, backlog %v each at the rate, %d shared lanes; about %v in all\n",
		runs, cfg.backlog, cfg.lanes, time.Duration(runs)*cfg.backlog)
	var results []result
	i := 0
	for _, rate := range cfg.rates {
		for _, n := range cfg.relays {
			i++
			res, err := b.runOne(ctx, i, rate, n)
			if err != nil {
				return fmt.Errorf("rate %g, %d relays: %w", rate, n, err)
			}
			fmt.Fprintf(os.Stderr, "  -> %s\n", detail(res))
			results = append(results, res)
			if ctx.Err() != nil {
				break
			}
		}
		if ctx.Err() != nil {
			break
		}
	}
	report := table(results) + "\n" + costs(results) + "\n" + notes(results) + machine(rev)
	fmt.Print("\n" + report)
	if cfg.out != "" {
		if err := os.WriteFile(cfg.out, []byte(report), 0o644); err != nil {
			return err
		}
	}
	return ctx.Err()
}

func newSecret() (string, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return "", err
	}
	return deliver.SecretPrefix + base64.StdEncoding.EncodeToString(key), nil
}

// payload is a JSON body of n bytes.
func payload(n int) []byte {
	const pre, post = `{"pad":"`, `"}`
	if n < len(pre)+len(post) {
		return []byte(`{}`)
	}
	return []byte(pre + strings.Repeat("x", n-len(pre)-len(post)) + post)
}

func (b *bench) runOne(ctx context.Context, index int, rate float64, relays int) (result, error) {
	id := fmt.Sprintf("bench%02d-%d", index, time.Now().UnixNano()%1_000_000_000)
	burst := b.cfg.burstFor(rate)
	res := result{
		rate: rate, relays: relays, burst: burst,
		lease:   ratelimit.LeaseSize(rate, ratelimit.Limit{Rate: rate, Burst: burst}),
		backlog: max(1, int(math.Round(rate*b.cfg.backlog.Seconds()))),
	}
	sub := subscribers.Subscriber{
		ID: id, URL: b.hook + "/" + id, Secrets: []string{b.secret},
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
	fmt.Fprintf(os.Stderr, "[%d] rate %g/s, burst %d, lease %d, %d relays: publishing %d deliveries\n",
		index, rate, burst, res.lease, relays, res.backlog)
	if err := b.enqueue(opCtx, sub, res.backlog); err != nil {
		return res, err
	}

	runCtx, stopRelays := context.WithCancel(ctx)
	defer stopRelays()
	var started []*relay
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
		r, err := b.startRelay(runCtx)
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
		_, distinct := b.rcv.counts(id)
		if distinct >= res.backlog {
			res.complete = true
			break
		}
		now := time.Now()
		if now.After(deadline) {
			fmt.Fprintf(os.Stderr, "[%d] gave up after %v: %d of %d delivered\n",
				index, now.Sub(start).Round(time.Second), distinct, res.backlog)
			break
		}
		if now.Sub(lastProgress) >= 5*time.Second {
			lastProgress = now
			fmt.Fprintf(os.Stderr, "[%d] %5.1fs  %d of %d delivered\n",
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

	res.requests, res.distinct = b.rcv.counts(id)
	at := b.rcv.times(id)
	measure(&res, at)
	if b.cfg.timeline > 0 {
		fmt.Fprintf(os.Stderr, "[%d] arrivals per %v: %s\n", index, b.cfg.timeline, timeline(at, b.cfg.timeline))
	}
	return res, nil
}

// enqueue publishes count deliveries for sub straight onto DELIVERIES, as
// the fan-out would.
func (b *bench) enqueue(ctx context.Context, sub subscribers.Subscriber, count int) error {
	subject := "deliveries." + sub.Lane(b.cfg.lanes) + "." + sub.ID
	for from := 0; from < count; from += publishChunk {
		to := min(count, from+publishChunk)
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

// relay is one relay instance: its own connection, subscriber view, HTTP
// client and shared limiter, running the lanes and the retry mover.
type relay struct {
	nc      *nats.Conn
	live    *subscribers.Live
	limiter *ratelimit.Shared
	metrics *metrics.Metrics
	done    chan error
}

// handBacks is how many deliveries the relay's lanes moved to overflow so far.
func (r *relay) handBacks() float64 {
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

func (b *bench) startRelay(ctx context.Context) (*relay, error) {
	nc, err := nats.Connect(b.url, nats.MaxReconnects(-1))
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*relay, error) {
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
	r := &relay{nc: nc, live: live, limiter: limiter, metrics: metrics.New(), done: make(chan error, 2)}
	go func() {
		r.done <- lanes.Run(ctx, lanes.Config{
			JS: js, Subscribers: live, SharedLanes: b.cfg.lanes, Client: client,
			Limiter: limiter, Logger: b.log, Metrics: r.metrics,
			Disable: func(ctx context.Context, id, reason string) error {
				return store.SetDisabled(ctx, id, true, reason)
			},
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
func (r *relay) wait() error {
	defer r.nc.Close()
	var errs []error
	timeout := time.After(time.Minute)
	for range 2 {
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

// measure fills the achieved rate and the worst window from the arrival
// times.
func measure(res *result, at []time.Time) {
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

// timeline counts the arrivals (sorted) in consecutive intervals of width d
// from the first one.
func timeline(at []time.Time, d time.Duration) string {
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

func detail(r result) string {
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

func table(results []result) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%8s %6s %8s %13s %20s %17s %13s %13s\n",
		"rate", "relays", "requests", "achieved/rate", "worst-overshoot(req)", "overshoot(leases)",
		"kv-writes/req", "conflicts/req")
	for _, r := range results {
		fmt.Fprintf(&sb, "%8g %6d %8d %13.3f %20.1f %17.2f %13.4f %13.4f\n",
			r.rate, r.relays, r.requests, r.ratio(), rounded(r.overshoot, 1), rounded(r.leases(), 2),
			r.perReq(r.writes), r.perReq(r.conflicts))
	}
	return sb.String()
}

// costs is the second table: the other work the rate limit and the lanes
// did per request, which the rule does not bound but a deployment pays for.
func costs(results []result) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%8s %6s %12s %15s\n", "rate", "relays", "kv-reads/req", "overflow/req")
	for _, r := range results {
		fmt.Fprintf(&sb, "%8g %6d %12.3f %15.3f\n",
			r.rate, r.relays, r.perReq(r.reads), r.handBacks/float64(max(1, r.requests)))
	}
	return sb.String()
}

// notes states the burst and lease of each rate, and every row that misses
// DESIGN.md's rule.
func notes(results []result) string {
	var sb strings.Builder
	seen := map[float64]bool{}
	for _, r := range results {
		if !seen[r.rate] {
			seen[r.rate] = true
			fmt.Fprintf(&sb, "rate %g/s: burst %d, lease %d, backlog %d\n", r.rate, r.burst, r.lease, r.backlog)
		}
	}
	ok := true
	for _, r := range results {
		var why []string
		if !r.complete {
			why = append(why, fmt.Sprintf("only %d of %d deliveries arrived", r.distinct, r.backlog))
		}
		if r.requests > r.distinct {
			why = append(why, fmt.Sprintf("%d duplicate requests", r.requests-r.distinct))
		}
		if !(r.ratio() >= minAchieved) {
			why = append(why, fmt.Sprintf("achieved %.3f of the rate, under %.2f", r.ratio(), minAchieved))
		}
		if !(r.leases() <= slackInLease) {
			why = append(why, fmt.Sprintf("a window held %.1f requests (%.2f leases) over burst + rate × T: "+
				"%d requests in %.3fs from +%.3fs", r.overshoot, r.leases(), r.worstN, r.worstT, r.worstAt))
		}
		if len(why) > 0 {
			ok = false
			fmt.Fprintf(&sb, "MISS rate %g, %d relays: %s\n", r.rate, r.relays, strings.Join(why, "; "))
		}
	}
	if ok {
		fmt.Fprintf(&sb, "every run within the rule: achieved ≥ %.2f of the rate, overshoot ≤ one lease\n", minAchieved)
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

func machine(rev string) string {
	return fmt.Sprintf("machine: %d CPUs, %s/%s, %s, nats-server %s (embedded); %s%s\n",
		runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version(), server.VERSION,
		time.Now().UTC().Format("2006-01-02 15:04 MST"), rev)
}

// revision names the commit the code was built from, when run inside a git
// checkout: the code under test changes, and figures mean little without
// it. Empty when git cannot tell.
func revision() string {
	out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return ""
	}
	rev := "; code at " + strings.TrimSpace(string(out))
	dirty, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no", "--", "*.go", "go.mod", "go.sum").Output()
	if err == nil && len(dirty) > 0 {
		rev += " with uncommitted changes"
	}
	return rev
}
