// Command engine measures the relay engine end to end, as a user runs it:
// the real binary (built once with `go build ./cmd/relay`) runs
// `relay run --allow-private-targets --nats URL` against a nats-server this
// program starts in-process (the configuration of relay's embedded server,
// streams.StartServer: JetStream in a temporary directory, a random loopback
// port). Subscribers are added with `relay sub add`, events are published on
// events.<type> with Nats-Msg-Id and JetStream PubAcks (async, then a wait
// for every ack), and a receiver in a process of its own (this program's
// binary started again with -receiver-mode, see receiver.go, so that its
// CPU time shows apart) answers 204 on 127.0.0.1 and records when each
// webhook-id arrived.
//
// Scenarios (-scenarios):
//
//   - burst: -burst-events to one subscriber (--rate 0 --max-in-flight 64),
//     -burst-runs times, each on a fresh server and a fresh relay: the time to
//     all delivered, deliveries/s, the worst idle gap between two arrivals
//     (a stalled lane shows up as a gap of seconds), and the extra JetStream
//     writes per delivered message.
//   - scale: -scale-subscribers subscribers on one relay, each with an
//     event type of its own: the time to load them, idle CPU and RSS, one
//     subscriber alone against every subscriber getting -scale-events-each
//     events, one event of 16 KB to every subscriber (fanned out, delivered,
//     the relay's warnings meanwhile), peak RSS, `relay sub add` → first
//     delivery, `relay status`.
//   - throughput: relay against the simplest correct loop and the two-hop
//     loop, in turn (baseline, two-hop, relay, baseline…), -throughput-runs
//     of each with -throughput-events. The baseline, on a fresh server and a
//     receiver of its own: a durable pull consumer on a stream of its own
//     (BASE) POSTs each message signed (deliver.Sign) and acks it after the
//     2xx, -throughput-in-flight at a time, while the events are published.
//     The two-hop loop (twohop.go): the baseline behind relay's second hop,
//     the floor of any design that stores a copy per subscriber: events on
//     HOPA, copied with async PubAcks to the work-queue HOPB (the settings
//     of EVENTS and DELIVERIES), which the baseline's loop drains. Relay:
//     a fresh server and relay, one subscriber (--rate 0, --max-in-flight
//     -throughput-in-flight). All: delivered/s from the first publish to the
//     last arrival, relay/baseline, two-hop/baseline and relay/two-hop per
//     run and over the runs (median); the relay's CPU time per 1,000
//     deliveries (Linux only).
//   - tracing: what relay's OpenTelemetry spans cost: -tracing-runs pairs
//     of the throughput scenario's relay run (-throughput-events, one
//     subscriber at --rate 0 --max-in-flight -throughput-in-flight, each on
//     a fresh server and relay), tracing off (no OTEL_* variable in relay's
//     environment) and on (OTEL_EXPORTER_OTLP_ENDPOINT set to an OTLP/HTTP
//     endpoint in this program that decodes and counts every export),
//     alternating which goes first so that the machine's drift reaches
//     both; half of the events carry a traceparent, so that both of relay's
//     paths are measured. Per pair and over the pairs (median, worst):
//     deliveries/s on ÷ off, the relay's CPU per 1,000 deliveries both
//     ways, and the spans received per delivery of the on run (about 2);
//     a span received while tracing was off is reported as an error.
//   - writes: a backlog of -writes-events to one subscriber at
//     -writes-rate/s, observed for -writes-window once it is fanned out and
//     has left its lane: the extra JetStream writes (growth of the last
//     sequence of DELIVERIES and RETRIES beyond the fan-out's copies) per
//     message for the backlog and per delivered message in the window.
//   - backlog: -backlog-events to one subscriber at -backlog-rate/s: how
//     long the fan-out and the overflow take, the relay's VmRSS and VmHWM
//     once they are done; and the publish→arrival latency of a lane-mate
//     (same lane, --rate 0, another event type, -mate-rate events/s for
//     -mate-for) beside that backlog, against a baseline measured on the same
//     relay before the backlog was published.
//   - latency: one subscriber (--rate 0 --max-in-flight 64) on one relay,
//     events published at each rate of -latency-rates for -latency-for, each
//     on its own schedule with an async PubAck, after an unmeasured second
//     at that rate: publish call → first arrival, p50/p90/p99/max, how many
//     arrived, and the publish rate achieved (a publisher that fell behind
//     its schedule is reported). Before relay at each rate, the same for the
//     throughput scenario's baseline loop on a fresh in-process server (the
//     same pacer and warm-up), so that the machine's own latency shows
//     apart: relay's p50 and p99 minus the baseline's, per rate.
//   - fanout: for each body size of -fanout-payloads, on a fresh relay,
//     -fanout-subscribers subscribers on one event type and one more on
//     another (--rate 0 --max-in-flight 64): the solo one taking
//     -throughput-events, then -fanout-events copied to every one of the
//     others; events/s and deliveries/s (first publish → last arrival),
//     their ratio to the solo one's, whether each subscriber got every
//     event, the bytes the relay wrote to DELIVERIES and BODIES per
//     delivery, and the relay's peak RSS.
//   - filters: what content filters cost the fan-out: -filters-runs pairs
//     for each body size of -filters-payloads, each run on a fresh server
//     and relay, -fanout-subscribers subscribers on one event type (--rate
//     0 --max-in-flight 64) taking -filters-events each, without a filter
//     and with --filter 'body.status == "paid" && body.amount > 100 &&
//     has(body.customer)', true of every event (the same JSON bodies both
//     ways), so that both deliver the same requests; alternating which goes
//     first. Per pair and over the pairs (median, worst): deliveries/s with
//     ÷ without, the relay's CPU per 1,000 deliveries both ways, whether
//     every subscriber got every event, duplicate requests, and the growth
//     of the relay's relay_filter_evaluations_total (matched must be
//     events × subscribers, no other result).
//   - isolation: -isolation-runs times, each on a fresh server and relay, a
//     healthy subscriber (--rate 0 --max-in-flight 64) taking
//     -isolation-events alone, (a) beside two peers answering 204 and (b)
//     beside a subscriber whose receiver never answers (it times out after
//     -isolation-timeout) and one answering 500, all on its lane: its
//     deliveries/s in each, (b)/(a) and (b)/alone.
//   - overload: -overload-subscribers − 1 healthy subscribers (--rate 0
//     --max-in-flight 64) on one relay taking -overload-events each, alone
//     and then beside a paused subscriber with --max-backlog -overload-bound
//     that gets the same events: the healthy ones' deliveries/s beside ÷
//     alone, what the paused one kept waiting and what it shed as backlog;
//     then DELIVERIES' max_bytes set to what it holds and the paused one
//     resumed: the time until its backlog is delivered.
//   - scheduled: -scheduled-events to one subscriber (--rate 0
//     --max-in-flight 64), each with a Relay-Deliver-At, the due times
//     evenly spaced over -scheduled-span from 10 s after the first publish,
//     in a shuffled order: per event, first arrival − due time
//     (p50/p90/p99/max), the early ones (a request before its due time; the
//     contract allows none), missing and duplicates; and the relay's (and
//     this program's, which holds the in-process server) RSS and CPU idle,
//     while the events wait and while they fire. With the defaults it takes
//     about 11 minutes, the span and its lead.
//   - rate: the rate rule of docs/delivery-rules.md, on the library rather than the binary
//     (see rate.go): for each of -rate-rates and each of -rate-relays, a
//     backlog of rate × -rate-backlog straight onto DELIVERIES, drained by
//     that many relays run in this process on a server of its own: the
//     achieved share of the rate, the worst overshoot of burst + rate × T,
//     and the rate limit's KV writes, conflicts and reads per request.
//   - soak (only when named): what minutes of steady traffic cost (see
//     soak.go). A healthy subscriber (--rate 0 --max-in-flight 64) takes
//     -soak-rate events/s alone for -soak-alone, then beside three
//     lane-mates taking the same events for -soak-for: one whose receiver
//     answers 500 to a fifth of requests at random, one at --rate 50, one
//     whose receiver answers after 200 ms. Per subscriber: received,
//     delivered, retried, dead by reason, waiting at the end; the relay's
//     RSS and Go heap (and, on --nats, the server's: a nats-server process
//     of its own here) every -soak-sample, with the growth over the last
//     half; goroutines and file descriptors at the start and the end; the
//     healthy one's p50/p99 beside ÷ alone; and its targets, met or not.
//
// It measures and prints; it never fails on a threshold, only on errors.
// Everything it starts (the relays, the servers, the receiver, the tracing
// scenario's OTLP endpoint) is stopped on exit, Ctrl-C included. Every relay
// runs without the user's NATS_URL and OTEL_* variables (only the tracing
// scenario sets its own). The relays' stderr goes to files under -logs, which
// are kept. The markdown tables go to stdout (and -out); -json also writes
// every scenario's result and the machine facts to a file (see results.go).
//
// Run it from the module root:
//
//	go run ./bench/engine                                  # everything, about 23 minutes on 2 cores (scheduled alone 11)
//	go run ./bench/engine -scenarios burst -burst-runs 3   # one scenario, fewer runs
//	go run ./bench/engine -scenarios throughput            # relay against the simplest loop and the two-hop loop
//	go run ./bench/engine -backlog-events 100000           # a smaller backlog
//	go run ./bench/engine -scenarios latency,fanout,isolation   # steady-rate latency, fan-out, isolation
//	go run ./bench/engine -scenarios filters -filters-runs 1 -filters-events 300   # a smoke run of the content filters' cost
//	go run ./bench/engine -scenarios rate -rate-backlog 5s   # the rate rule, quick mode
//	go run ./bench/engine -scenarios scheduled -scheduled-events 20000 -scheduled-span 1m   # Relay-Deliver-At, quick
//	go run ./bench/engine -json bench/results.json         # what make bench runs
//	go run ./bench/engine -scenarios soak -soak-for 2m     # the soak, quick (10 minutes by default)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The scenarios, in the order they run: by default every one of
// allScenarios; the opt-in ones only when -scenarios names them.
var (
	allScenarios   = []string{"burst", "throughput", "tracing", "records", "writes", "backlog", "scale", "latency", "fanout", "filters", "isolation", "overload", "scheduled", "rate"}
	optInScenarios = []string{"soak"} // ten minutes by default: not part of make bench
)

type config struct {
	scenarios map[string]bool

	burstEvents   int
	burstRuns     int
	burstInFlight int
	burstTimeout  time.Duration

	throughputEvents   int
	throughputRuns     int
	throughputInFlight int
	tracingRuns        int // pairs, tracing off and on, with the throughput scenario's events and in flight
	recordsRuns        int // pairs, records off and on, likewise
	scaleSubscribers   int
	scaleEach          int
	scalePrestore      bool

	writesEvents int
	writesRate   float64
	writesWindow time.Duration

	backlogEvents int
	backlogRate   float64
	settle        time.Duration
	mateRate      float64
	mateFor       time.Duration

	latencyRates []float64 // events/s, one run each
	latencyFor   time.Duration

	fanoutSubscribers int
	fanoutEvents      int
	fanoutPayloads    []int

	filtersRuns     int   // pairs, without filters and with, each run with -fanout-subscribers subscribers
	filtersEvents   int   // events per run, each to every subscriber
	filtersPayloads []int // body sizes, -filters-runs pairs each

	overloadSubscribers int // the healthy ones and the paused one
	overloadEvents      int
	overloadBound       int // the paused one's --max-backlog

	isolationEvents  int
	isolationRuns    int
	isolationTimeout time.Duration // the hanging subscriber's --timeout

	scheduledEvents int
	scheduledSpan   time.Duration // the due times' spread

	rate rateConfig // the -rate-* flags

	soakFor    time.Duration // how long the four subscribers take events
	soakAlone  time.Duration // the healthy subscriber alone, before
	soakRate   float64       // events/s, alone and beside
	soakSample time.Duration // memory, goroutines and descriptors read this often
	soakDrain  time.Duration // longest wait after the last publish for the healthy and the flaky subscriber

	lanes    int
	payload  int
	stallGap time.Duration
	timeout  time.Duration
	relayBin string
	embedded bool
	logs     string
	out      string
	jsonOut  string // -json: the results file, none when empty
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == receiverModeArg { // this binary started again as the receiver process
		os.Exit(receiverMain(os.Args[2:]))
	}
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "engine:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "engine:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (config, error) {
	fs := flag.NewFlagSet("engine", flag.ContinueOnError)
	scenarios := fs.String("scenarios", strings.Join(allScenarios, ","), "comma-separated scenarios: "+strings.Join(allScenarios, ", ")+"; and, only when named, "+strings.Join(optInScenarios, ", "))
	var cfg config
	fs.IntVar(&cfg.burstEvents, "burst-events", 20_000, "burst: events per run")
	fs.IntVar(&cfg.burstRuns, "burst-runs", 10, "burst: runs, each on a fresh server and relay")
	fs.IntVar(&cfg.burstInFlight, "burst-in-flight", 64, "burst: the subscriber's --max-in-flight")
	fs.DurationVar(&cfg.burstTimeout, "burst-timeout", 2*time.Minute, "burst: longest wait for one run's deliveries")
	fs.IntVar(&cfg.throughputEvents, "throughput-events", 20_000, "throughput: events per run, baseline, two-hop loop and relay")
	fs.IntVar(&cfg.throughputRuns, "throughput-runs", 3, "throughput: runs of each, in turn")
	fs.IntVar(&cfg.throughputInFlight, "throughput-in-flight", 64, "throughput: requests in flight, the loops' and the subscriber's --max-in-flight")
	fs.IntVar(&cfg.tracingRuns, "tracing-runs", 5, "tracing: pairs of relay runs, tracing off and on (with -throughput-events and -throughput-in-flight), alternating which goes first")
	fs.IntVar(&cfg.recordsRuns, "records-runs", 5, "records: pairs of relay runs, --record-attempts=false and records on (with -throughput-events and -throughput-in-flight), alternating which goes first")
	fs.IntVar(&cfg.scaleSubscribers, "scale-subscribers", 10_000, "scale: subscribers on the one relay")
	fs.IntVar(&cfg.scaleEach, "scale-events-each", 2, "scale: events to every subscriber in the spread run")
	fs.BoolVar(&cfg.scalePrestore, "scale-prestore", false, "scale: store the subscribers before the relay starts, so that it reads them all at its start rather than from its watch")
	fs.IntVar(&cfg.writesEvents, "writes-events", 100_000, "writes: backlog, events")
	fs.Float64Var(&cfg.writesRate, "writes-rate", 100, "writes: the subscriber's --rate")
	fs.DurationVar(&cfg.writesWindow, "writes-window", 40*time.Second, "writes: how long to watch the backlog drain once it is fanned out")
	fs.IntVar(&cfg.backlogEvents, "backlog-events", 1_000_000, "backlog: events")
	fs.Float64Var(&cfg.backlogRate, "backlog-rate", 10, "backlog: the subscriber's --rate")
	fs.DurationVar(&cfg.settle, "settle", 5*time.Second, "backlog: wait after the fan-out and overflow are done before reading the RSS")
	fs.Float64Var(&cfg.mateRate, "mate-rate", 50, "backlog: events/s published to the lane-mate")
	fs.DurationVar(&cfg.mateFor, "mate-for", 20*time.Second, "backlog: how long the lane-mate's events are published, baseline and beside the backlog")
	latencyRates := fs.String("latency-rates", "1000,5000", "latency: events/s, comma separated, one run each")
	fs.DurationVar(&cfg.latencyFor, "latency-for", 30*time.Second, "latency: how long each rate's events are published")
	fs.IntVar(&cfg.fanoutSubscribers, "fanout-subscribers", 100, "fanout: subscribers on the one event type")
	fs.IntVar(&cfg.fanoutEvents, "fanout-events", 2_000, "fanout: events, each to every subscriber")
	fanoutPayloads := fs.String("fanout-payloads", "200,4096,16384,65536", "fanout: body sizes in bytes, a run each")
	fs.IntVar(&cfg.filtersRuns, "filters-runs", 3, "filters: pairs of fan-out runs without filters and with (to -fanout-subscribers subscribers), alternating which goes first, for each size of -filters-payloads")
	fs.IntVar(&cfg.filtersEvents, "filters-events", 1_000, "filters: events per run, each to every subscriber")
	filtersPayloads := fs.String("filters-payloads", "4096", fmt.Sprintf("filters: JSON body sizes in bytes (at least %d), comma separated, -filters-runs pairs each", filterBodyMin))
	fs.IntVar(&cfg.overloadSubscribers, "overload-subscribers", 100, "overload: subscribers, all healthy but one, which is paused")
	fs.IntVar(&cfg.overloadEvents, "overload-events", 1_000, "overload: events to every subscriber, alone and beside the paused one")
	fs.IntVar(&cfg.overloadBound, "overload-bound", 200, "overload: the paused subscriber's --max-backlog")
	fs.IntVar(&cfg.isolationEvents, "isolation-events", 20_000, "isolation: events to the healthy subscriber, beside healthy peers and beside misbehaving ones")
	fs.IntVar(&cfg.isolationRuns, "isolation-runs", 3, "isolation: runs, each on a fresh server and relay")
	fs.DurationVar(&cfg.isolationTimeout, "isolation-timeout", time.Second, "isolation: the hanging subscriber's --timeout")
	fs.IntVar(&cfg.scheduledEvents, "scheduled-events", 100_000, "scheduled: events, each with a Relay-Deliver-At")
	fs.DurationVar(&cfg.scheduledSpan, "scheduled-span", 10*time.Minute, "scheduled: the due times are spread evenly over this span, from 10s after the first publish")
	fs.IntVar(&cfg.lanes, "lanes", 16, "shared lanes (relay run --lanes)")
	fs.IntVar(&cfg.payload, "payload", 200, "body size in bytes")
	fs.DurationVar(&cfg.stallGap, "stall-gap", 2*time.Second, "an idle gap at least this long counts as a stall (and is diagnosed on stderr)")
	fs.DurationVar(&cfg.timeout, "timeout", 10*time.Minute, "longest wait for any other step (a publish, a fan-out, a drain)")
	fs.StringVar(&cfg.relayBin, "relay", "", "use this relay binary instead of building ./cmd/relay")
	fs.BoolVar(&cfg.embedded, "embedded", false, "run each relay on its own embedded NATS server (relay run --data --listen) instead of one this program starts")
	fs.StringVar(&cfg.logs, "logs", "", "directory for the relays' stderr (default: a new one under the temp dir; kept)")
	fs.StringVar(&cfg.out, "out", "", "also write the tables to this file")
	fs.StringVar(&cfg.jsonOut, "json", "", "also write every scenario's results and the machine facts to this file, as JSON")
	fs.DurationVar(&cfg.soakFor, "soak-for", 10*time.Minute, "soak: how long events are published to the four subscribers (shorter for a quick run, such as 2m)")
	fs.DurationVar(&cfg.soakAlone, "soak-alone", 30*time.Second, "soak: how long the healthy subscriber takes events alone first, its baseline latency")
	fs.Float64Var(&cfg.soakRate, "soak-rate", 1000, "soak: events/s, alone and beside")
	fs.DurationVar(&cfg.soakSample, "soak-sample", 5*time.Second, "soak: how often the relay's memory, goroutines and descriptors are read (the flaky subscriber's circuit: once a second)")
	fs.DurationVar(&cfg.soakDrain, "soak-drain", 2*time.Minute, "soak: longest wait after the last publish for the healthy and the flaky subscriber to have every event")
	cfg.rate.register(fs)
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	rates, err := parseRates(*latencyRates)
	if err != nil {
		return cfg, err
	}
	cfg.latencyRates = rates
	for part := range strings.SplitSeq(*fanoutPayloads, ",") {
		size, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil || size < 2 {
			return cfg, fmt.Errorf("-fanout-payloads: %q is not a body size of at least 2 bytes; give a comma-separated list such as 200,4096", part)
		}
		cfg.fanoutPayloads = append(cfg.fanoutPayloads, size)
	}
	for part := range strings.SplitSeq(*filtersPayloads, ",") {
		size, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil || size < filterBodyMin {
			return cfg, fmt.Errorf("-filters-payloads: %q is not a body size of at least %d bytes (the filtered fields); give a comma-separated list such as 4096,16384", part, filterBodyMin)
		}
		cfg.filtersPayloads = append(cfg.filtersPayloads, size)
	}
	if err := cfg.rate.check(); err != nil {
		return cfg, err
	}
	cfg.scenarios = map[string]bool{}
	for s := range strings.SplitSeq(*scenarios, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if !slices.Contains(allScenarios, s) && !slices.Contains(optInScenarios, s) {
			return cfg, fmt.Errorf("-scenarios: unknown scenario %q (have %s)", s, strings.Join(append(slices.Clone(allScenarios), optInScenarios...), ", "))
		}
		cfg.scenarios[s] = true
	}
	switch {
	case len(cfg.scenarios) == 0:
		return cfg, errors.New("-scenarios: empty list")
	case cfg.burstEvents < 1 || cfg.burstRuns < 1 || cfg.burstInFlight < 1:
		return cfg, errors.New("-burst-events, -burst-runs and -burst-in-flight must be at least 1")
	case cfg.scaleSubscribers < 1 || cfg.scaleEach < 1:
		return cfg, errors.New("-scale-subscribers and -scale-events-each must be at least 1")
	case cfg.throughputEvents < 1 || cfg.throughputRuns < 1 || cfg.throughputInFlight < 1:
		return cfg, errors.New("-throughput-events, -throughput-runs and -throughput-in-flight must be at least 1")
	case cfg.tracingRuns < 1 || cfg.recordsRuns < 1:
		return cfg, errors.New("-tracing-runs and -records-runs must be at least 1")
	case cfg.writesEvents < 1 || cfg.backlogEvents < 1:
		return cfg, errors.New("-writes-events and -backlog-events must be at least 1")
	case !(cfg.writesRate > 0) || !(cfg.backlogRate > 0) || !(cfg.mateRate > 0):
		return cfg, errors.New("-writes-rate, -backlog-rate and -mate-rate must be positive")
	case cfg.writesWindow <= 0 || cfg.mateFor <= 0 || cfg.settle < 0:
		return cfg, errors.New("-writes-window and -mate-for must be positive, -settle not negative")
	case cfg.burstTimeout <= 0 || cfg.timeout <= 0 || cfg.stallGap <= 0:
		return cfg, errors.New("-burst-timeout, -timeout and -stall-gap must be positive")
	case cfg.latencyFor <= 0:
		return cfg, errors.New("-latency-for must be a positive duration, such as 30s")
	case cfg.fanoutSubscribers < 1 || cfg.fanoutEvents < 1:
		return cfg, errors.New("-fanout-subscribers and -fanout-events must be at least 1")
	case cfg.filtersRuns < 1 || cfg.filtersEvents < 1:
		return cfg, errors.New("-filters-runs and -filters-events must be at least 1")
	case cfg.overloadSubscribers < 2 || cfg.overloadEvents < 1 || cfg.overloadBound < 1:
		return cfg, errors.New("-overload-subscribers must be at least 2, -overload-events and -overload-bound at least 1")
	case cfg.isolationEvents < 1 || cfg.isolationRuns < 1:
		return cfg, errors.New("-isolation-events and -isolation-runs must be at least 1")
	case cfg.isolationTimeout <= 0 || cfg.isolationTimeout > 5*time.Minute:
		return cfg, errors.New("-isolation-timeout must be a positive duration of at most 5m (relay sub add --timeout's range), such as 1s")
	case cfg.scheduledEvents < 1 || cfg.scheduledSpan <= 0:
		return cfg, errors.New("-scheduled-events must be at least 1 and -scheduled-span a positive duration, such as 10m")
	case cfg.soakFor <= 0 || cfg.soakAlone <= 0 || cfg.soakSample <= 0 || cfg.soakDrain <= 0:
		return cfg, errors.New("-soak-for, -soak-alone, -soak-sample and -soak-drain must be positive durations, such as 10m, 30s, 5s, 2m")
	case !(cfg.soakRate > 0) || math.IsInf(cfg.soakRate, 0):
		return cfg, errors.New("-soak-rate must be a positive number of events/s, such as 1000")
	case cfg.lanes < 1 || cfg.lanes > 256:
		return cfg, errors.New("-lanes must be between 1 and 256")
	case cfg.payload < 2:
		return cfg, errors.New("-payload must be at least 2 bytes")
	}
	return cfg, nil
}

func run(ctx context.Context, cfg config) error {
	rs := newResults(cfg) // at the start: the tree may change while this runs
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil) // also how a failed receiver process stops the run
	work, err := os.MkdirTemp("", "relay-bench-engine-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	if cfg.logs == "" {
		cfg.logs = filepath.Join(os.TempDir(), "relay-bench-engine-logs-"+time.Now().Format("20060102-150405"))
	}
	if err := os.MkdirAll(cfg.logs, 0o755); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "relay logs in %s\n", cfg.logs)

	bin := cfg.relayBin
	if bin == "" {
		bin = filepath.Join(work, "relay")
		fmt.Fprintln(os.Stderr, "building ./cmd/relay")
		build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/relay")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("go build ./cmd/relay: %w", err)
		}
	}
	e, err := newEnv(cfg, bin, work, cancel)
	if err != nil {
		return err
	}
	defer e.close()
	rs.follow(e.rcvProc.cpu)

	var report strings.Builder
	var runErr error
	if cfg.scenarios["burst"] {
		res, err := e.burst(ctx)
		if len(res) > 0 {
			report.WriteString(burstTable(cfg, res) + "\n")
		}
		rs.add("burst", res, err)
		runErr = errors.Join(runErr, err)
	}
	if cfg.scenarios["throughput"] && ctx.Err() == nil {
		res, err := e.throughput(ctx)
		if len(res) > 0 {
			report.WriteString(throughputTable(cfg, res) + "\n")
		}
		rs.add("throughput", res, err)
		runErr = errors.Join(runErr, err)
	}
	if cfg.scenarios["tracing"] && ctx.Err() == nil {
		res, err := e.tracing(ctx)
		if len(res) > 0 {
			report.WriteString(tracingTable(cfg, res) + "\n")
		}
		rs.add("tracing", res, err)
		runErr = errors.Join(runErr, err)
	}
	if cfg.scenarios["records"] && ctx.Err() == nil {
		res, err := e.records(ctx)
		if len(res) > 0 {
			report.WriteString(recordsTable(cfg, res) + "\n")
		}
		rs.add("records", res, err)
		runErr = errors.Join(runErr, err)
	}
	if cfg.scenarios["writes"] && ctx.Err() == nil {
		res, err := e.writes(ctx)
		if err == nil { // a partial result is on stderr
			report.WriteString(writesTable(*res) + "\n")
		}
		rs.add("writes", res, err)
		runErr = errors.Join(runErr, err)
	}
	if cfg.scenarios["backlog"] && ctx.Err() == nil {
		res, err := e.backlog(ctx)
		if err == nil { // a partial result is on stderr
			report.WriteString(backlogTable(*res) + "\n")
		}
		rs.add("backlog", res, err)
		runErr = errors.Join(runErr, err)
	}
	if cfg.scenarios["scale"] && ctx.Err() == nil {
		res, err := e.scale(ctx)
		if err == nil {
			report.WriteString(scaleTable(res) + "\n")
		}
		rs.add("scale", res, err)
		runErr = errors.Join(runErr, err)
	}
	if cfg.scenarios["latency"] && ctx.Err() == nil {
		res, err := e.latency(ctx)
		if len(res) > 0 {
			report.WriteString(latencyTable(res) + "\n")
		}
		rs.add("latency", res, err)
		runErr = errors.Join(runErr, err)
	}
	if cfg.scenarios["fanout"] && ctx.Err() == nil {
		res, err := e.fanouts(ctx)
		if len(res) > 0 {
			report.WriteString(fanoutTable(res) + "\n")
		}
		rs.add("fanout", res, err)
		runErr = errors.Join(runErr, err)
	}
	if cfg.scenarios["filters"] && ctx.Err() == nil {
		res, err := e.filters(ctx)
		if len(res) > 0 {
			report.WriteString(filtersTable(cfg, res) + "\n")
		}
		rs.add("filters", res, err)
		runErr = errors.Join(runErr, err)
	}
	if cfg.scenarios["isolation"] && ctx.Err() == nil {
		res, err := e.isolation(ctx)
		if len(res) > 0 {
			report.WriteString(isolationTable(cfg, res) + "\n")
		}
		rs.add("isolation", res, err)
		runErr = errors.Join(runErr, err)
	}
	if cfg.scenarios["overload"] && ctx.Err() == nil {
		res, err := e.overload(ctx)
		if err == nil { // a partial result is on stderr
			report.WriteString(overloadTable(res) + "\n")
		}
		rs.add("overload", res, err)
		runErr = errors.Join(runErr, err)
	}
	if cfg.scenarios["scheduled"] && ctx.Err() == nil {
		res, err := e.scheduled(ctx)
		if err == nil { // a partial result is on stderr
			report.WriteString(scheduledTable(*res) + "\n")
		}
		rs.add("scheduled", res, err)
		runErr = errors.Join(runErr, err)
	}
	if cfg.scenarios["rate"] && ctx.Err() == nil {
		res, err := e.rate(ctx)
		if len(res) > 0 {
			report.WriteString(rateTable(cfg.rate, res) + "\n")
		}
		rs.add("rate", res, err)
		runErr = errors.Join(runErr, err)
	}
	if cfg.scenarios["soak"] && ctx.Err() == nil {
		res, err := e.soak(ctx)
		if len(res.samples) > 0 {
			report.WriteString(soakTable(res) + "\n")
		}
		rs.add("soak", res, err)
		runErr = errors.Join(runErr, err)
	}
	rs.end()
	report.WriteString(rs.machineLine())
	fmt.Print("\n" + report.String())
	if cfg.out != "" {
		if err := os.WriteFile(cfg.out, []byte(report.String()), 0o644); err != nil {
			runErr = errors.Join(runErr, err)
		}
	}
	if cfg.jsonOut != "" {
		runErr = errors.Join(runErr, rs.writeJSON(cfg.jsonOut))
	}
	fmt.Fprintf(os.Stderr, "relay logs kept in %s\n", cfg.logs)
	return runErr
}
