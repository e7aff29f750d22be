package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"github.com/sourcegraph/conc"
	"github.com/spf13/cobra"

	"github.com/relay-dev/relay/internal/attempts"
	"github.com/relay-dev/relay/internal/deliver"
	"github.com/relay-dev/relay/internal/fanout"
	"github.com/relay-dev/relay/internal/gcpace"
	"github.com/relay-dev/relay/internal/lanes"
	"github.com/relay-dev/relay/internal/logs"
	"github.com/relay-dev/relay/internal/metrics"
	"github.com/relay-dev/relay/internal/opevent"
	"github.com/relay-dev/relay/internal/overflow"
	"github.com/relay-dev/relay/internal/ratelimit"
	"github.com/relay-dev/relay/internal/retention"
	"github.com/relay-dev/relay/internal/retry"
	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/internal/testrequest"
	"github.com/relay-dev/relay/internal/timeliness"
	"github.com/relay-dev/relay/internal/tracing"
	"github.com/relay-dev/relay/streams"
)

// maxSharedLanes bounds --lanes: every lane is a JetStream consumer, and each
// ack on a work-queue stream scans them all.
const maxSharedLanes = 256

// defaultSharedLanes is relay run's --lanes when none is given, and what
// the commands that need the count assume before any relay ran.
const defaultSharedLanes = 16

// defaultDLQMaxAge is how long a new DLQ keeps dead letters: a month to
// notice, fix and replay.
const defaultDLQMaxAge = 30 * 24 * time.Hour

// defaultEventsMaxAge is how long EVENTS keeps an event the fan-out has
// copied when --events-max-age is not given: the 7 days EVENTS' own max_age
// kept every event, copied or not, before relay purged EVENTS itself.
const defaultEventsMaxAge = 7 * 24 * time.Hour

// maxAckWait bounds --ack-wait, and is its default. A relay that crashes
// right after a write (a copy, a dead letter) and before its ack has the
// message redelivered an ack wait after it last kept it alive; the write is
// made again then, after the next relay's own request if need be, and only
// within the streams' duplicate window is it dropped as a duplicate. Half
// the window leaves the other half for that request.
const maxAckWait = streams.DuplicateWindow / 2

// tracerFlushTimeout bounds how long a stopping relay run waits to export
// the spans still queued: a collector that is down does not hold the stop.
const tracerFlushTimeout = 5 * time.Second

// defaultAttemptsMaxAge is how long a new ATTEMPTS keeps the records of
// relay trace: three days, a weekend's questions about a webhook.
const defaultAttemptsMaxAge = 72 * time.Hour

// minDLQMaxAge keeps --dlq-max-age above the DLQ's duplicate window, which
// JetStream requires, with room for an operator to act.
const minDLQMaxAge = time.Hour

type runFlags struct {
	data        string
	listen      string
	metricsAddr string
	// metricsSubscribers is --metrics-subscribers, and series what it
	// says once validated.
	metricsSubscribers string
	series             metrics.SubscriberSeries
	lanes              int
	allowPrivate       bool
	logLevel           string
	maxPause           time.Duration
	replicas           int
	ackWait            time.Duration
	// ackWaitGiven is true when --ack-wait was given: the cluster's own is
	// then changed, or refused while other relays run with another.
	ackWaitGiven bool
	maxRequests  int
	logFormat    string
	// shutdownTimeout bounds how long a stop waits for requests in flight.
	shutdownTimeout time.Duration
	// dlqMaxAge is --dlq-max-age when given, else 0: keep the age of a DLQ
	// stream that exists.
	dlqMaxAge time.Duration
	// recordAttempts is --record-attempts: write the records of relay
	// trace. attemptsMaxAge is --attempts-max-age when given, else 0: keep
	// the age of an ATTEMPTS that exists.
	recordAttempts bool
	attemptsMaxAge time.Duration
	// eventsMaxAge is --events-max-age: how long EVENTS keeps an event the
	// fan-out has copied (internal/retention).
	eventsMaxAge time.Duration
	// proxy and noProxy are --proxy and --no-proxy; proxyGiven says
	// --proxy was given, else HTTPS_PROXY, HTTP_PROXY and NO_PROXY say.
	proxy, noProxy string
	proxyGiven     bool
	// service is the credentials of the connection relay sub test is
	// answered from, on a cluster (--service-user and the like).
	service *serviceFlags
	// apiAddr is --api, the HTTP API's address ("" for none), served over
	// TLS with apiTLSCert and apiTLSKey when given.
	apiAddr, apiTLSCert, apiTLSKey string
	// ready, when set (by tests), is called once the relay consumes, with
	// the client URL of the NATS server and the metrics address.
	ready func(natsURL string, metricsAddr net.Addr)
}

func newRunCmd(conn *connFlags) *cobra.Command {
	f := &runFlags{}
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the fan-out and every lane (on an embedded NATS server unless --nats or NATS_URL)",
		Long: `Runs the fan-out from EVENTS and every delivery lane.

Without --nats (and with NATS_URL unset) it starts an embedded NATS server with
JetStream, storing in --data and listening on --listen, so that nats pub works
against it. Several relay run against one cluster share the work.

Stops cleanly on SIGINT or SIGTERM: deliveries in flight finish or are handed
back to JetStream, nothing is lost. A second SIGINT or SIGTERM ends it at once
(exit 130 or 143): what it holds is handed back, requests in flight are
abandoned and their messages handed back too.

EVENTS keeps an event --events-max-age after it was stored, and for as long
as the fan-out has not copied it: relay purges EVENTS itself, never of an
event the fan-out has not copied.

On its embedded server it locks --data (the file relay.lock in it): a second
relay run on the same directory exits 1 at once, naming the process that
holds it.

An event's traceparent and tracestate headers go on to its webhook
requests. With OTEL_EXPORTER_OTLP_ENDPOINT (or
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) set, relay run also exports a span for
each fan-out and each request over OTLP/HTTP, honouring the standard OTEL_*
variables (docs/cli.md lists them).`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case !cmd.Flags().Changed("dlq-max-age"):
				f.dlqMaxAge = 0
			case f.dlqMaxAge < minDLQMaxAge:
				return usagef("--dlq-max-age: must be at least %s, got %s", minDLQMaxAge, f.dlqMaxAge)
			}
			if !cmd.Flags().Changed("attempts-max-age") {
				f.attemptsMaxAge = 0
			}
			if err := f.checkAPI(); err != nil {
				return err
			}
			f.ackWaitGiven = cmd.Flags().Changed("ack-wait")
			f.proxyGiven = cmd.Flags().Changed("proxy")
			err := runRelay(cmd.Context(), conn, f, cmd.ErrOrStderr())
			if err != nil && cmd.Context().Err() != nil && errors.Is(err, context.Canceled) {
				// Stopped (SIGINT, SIGTERM) while it started: no lane had
				// taken anything, so it is a clean stop, not a failure.
				return nil
			}
			return err
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.data, "data", "./relay-data", "directory of the embedded NATS server's JetStream files, locked while relay run uses it")
	fl.StringVar(&f.listen, "listen", "127.0.0.1:4222", "HOST:PORT the embedded NATS server listens on")
	fl.StringVar(&f.metricsAddr, "metrics", "127.0.0.1:9469", "HOST:PORT serving /metrics, /healthz and /readyz (empty to turn off)")
	fl.StringVar(&f.metricsSubscribers, "metrics-subscribers", metrics.SeriesAuto, fmt.Sprintf("which subscribers have series of their own on /metrics: all, top:N (the N most active and every one failing, paused or with a backlog) or none; the others count under subscriber=\"_other\" (default: all up to %d subscribers, then top:%d)", metrics.AutoAllUpTo, metrics.AutoTop))
	fl.IntVar(&f.lanes, "lanes", defaultSharedLanes, fmt.Sprintf("number of shared lanes (1-%d); every relay on one cluster must use the same", maxSharedLanes))
	fl.BoolVar(&f.allowPrivate, "allow-private-targets", false, "allow subscriber URLs on loopback and private addresses (for local testing)")
	fl.IntVar(&f.replicas, "replicas", 0, "replicas of the streams and buckets relay creates: 1, 3 or 5 (default: keep those of existing streams, 1 for new ones)")
	fl.DurationVar(&f.maxPause, "max-pause", retry.DefaultMaxPause, "longest Retry-After relay obeys")
	fl.DurationVar(&f.ackWait, "ack-wait", maxAckWait, "JetStream ack wait of the relay's consumers: how soon another relay takes over the messages of one that crashed (1s to 1m); one for the whole cluster: without it a relay takes the one the running relays use")
	fl.IntVar(&f.maxRequests, "max-requests", lanes.DefaultMaxRequests, "most HTTP requests in flight over all subscribers, shared fairly among them (0: unlimited)")
	fl.DurationVar(&f.dlqMaxAge, "dlq-max-age", defaultDLQMaxAge, "how long dead letters are kept; a DLQ that exists keeps its age (nats stream edit DLQ --max-age) unless this is given")
	fl.BoolVar(&f.recordAttempts, "record-attempts", true, "record each fan-out and each attempt in the stream ATTEMPTS, for relay trace and relay status --subscriber (false: no records, no ATTEMPTS)")
	fl.DurationVar(&f.attemptsMaxAge, "attempts-max-age", defaultAttemptsMaxAge, "how long ATTEMPTS keeps the records of relay trace; an ATTEMPTS that exists keeps its age (nats stream edit ATTEMPTS --max-age) unless this is given")
	fl.DurationVar(&f.eventsMaxAge, "events-max-age", defaultEventsMaxAge, "how long EVENTS keeps an event the fan-out has copied; one it has not copied stays until it has (at least the 2m duplicate window)")
	fl.DurationVar(&f.shutdownTimeout, "shutdown-timeout", lanes.DefaultShutdownTimeout, "on SIGINT or SIGTERM, how long requests in flight may finish; those still open then are abandoned and their messages handed back (0: at once)")
	fl.StringVar(&f.proxy, "proxy", "", "egress proxy of every webhook request and OAuth2 grant: an http:// (or https://) proxy URL, CONNECT for https targets (default: HTTPS_PROXY, HTTP_PROXY)")
	fl.StringVar(&f.noProxy, "no-proxy", "", "with --proxy, targets reached directly, in NO_PROXY's syntax (hosts, .domains, IPs, CIDRs, each with an optional port)")
	fl.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fl.StringVar(&f.logFormat, "log-format", "text", "text or json")
	fl.StringVar(&f.apiAddr, "api", "", "HOST:PORT serving the HTTP API (docs/api.md); keys from relay key add (default: none)")
	fl.StringVar(&f.apiTLSCert, "api-tls-cert", "", "certificate file (PEM) of the HTTP API, served over TLS with --api-tls-key")
	fl.StringVar(&f.apiTLSKey, "api-tls-key", "", "private key file (PEM) of --api-tls-cert")
	f.service = addServiceFlags(fl)
	return cmd
}

// egressProxy is the proxy --proxy and --no-proxy name, else the one the
// environment names.
func (f *runFlags) egressProxy() deliver.Proxy {
	if f.proxyGiven {
		return deliver.Proxy{HTTP: f.proxy, HTTPS: f.proxy, NoProxy: f.noProxy}
	}
	return deliver.ProxyFromEnvironment()
}

func (f *runFlags) validate() (slog.Level, error) {
	var level slog.Level
	if f.lanes < 1 || f.lanes > maxSharedLanes {
		return level, usagef("--lanes: must be between 1 and %d, got %d", maxSharedLanes, f.lanes)
	}
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		return level, usagef("--log-level: must be debug, info, warn or error, got %q", f.logLevel)
	}
	if f.logFormat != "text" && f.logFormat != "json" {
		return level, usagef("--log-format: must be text or json, got %q", f.logFormat)
	}
	if _, _, err := net.SplitHostPort(f.listen); err != nil {
		return level, usagef("--listen: must be HOST:PORT, got %q", f.listen)
	}
	if f.metricsAddr != "" {
		if _, _, err := net.SplitHostPort(f.metricsAddr); err != nil {
			return level, usagef("--metrics: must be HOST:PORT or empty, got %q", f.metricsAddr)
		}
	}
	series, err := metrics.ParseSubscriberSeries(f.metricsSubscribers)
	if err != nil {
		return level, usagef("--metrics-subscribers: %w", err)
	}
	f.series = series
	if r := f.replicas; r != 0 && r != 1 && r != 3 && r != 5 {
		return level, usagef("--replicas: must be 1, 3 or 5, got %d", r)
	}
	if f.maxPause < time.Second {
		return level, usagef("--max-pause: must be at least 1s, got %s", f.maxPause)
	}
	if f.ackWait < time.Second || f.ackWait > maxAckWait {
		return level, usagef("--ack-wait: must be between 1s and %s, half the streams' %s duplicate window, so that a crashed relay's last write, made again, is still dropped as a duplicate; got %s",
			maxAckWait, streams.DuplicateWindow, f.ackWait)
	}
	if f.eventsMaxAge < streams.DuplicateWindow {
		return level, usagef("--events-max-age: must be at least %s, EVENTS' duplicate window (as JetStream requires of a max age), got %s",
			streams.DuplicateWindow, f.eventsMaxAge)
	}
	if f.attemptsMaxAge != 0 && f.attemptsMaxAge < streams.DuplicateWindow {
		return level, usagef("--attempts-max-age: must be at least %s, ATTEMPTS' duplicate window (as JetStream requires of a max age), got %s",
			streams.DuplicateWindow, f.attemptsMaxAge)
	}
	if f.attemptsMaxAge != 0 && !f.recordAttempts {
		return level, usagef("--attempts-max-age: goes with recorded attempts; --record-attempts=false records none")
	}
	if f.shutdownTimeout < 0 {
		return level, usagef("--shutdown-timeout: must be 0 (abandon requests in flight at once) or more, got %s", f.shutdownTimeout)
	}
	if f.maxRequests < 0 {
		return level, usagef("--max-requests: must be 0 (unlimited) or more, got %d", f.maxRequests)
	}
	if strings.TrimSpace(f.data) == "" {
		return level, usagef("--data: must name a directory")
	}
	if f.noProxy != "" && !f.proxyGiven {
		return level, usagef("--no-proxy: goes with --proxy (without it, NO_PROXY applies to HTTPS_PROXY and HTTP_PROXY)")
	}
	if f.proxyGiven && f.proxy == "" {
		return level, usagef("--proxy: give the proxy's URL, such as http://proxy.internal:3128")
	}
	if err := f.egressProxy().Check(); err != nil {
		flag := "--proxy"
		if !f.proxyGiven {
			flag = "HTTPS_PROXY or HTTP_PROXY"
		}
		return level, usagef("%s: %s", flag, strings.TrimPrefix(err.Error(), deliver.ErrInvalidOption.Error()+": "))
	}
	return level, nil
}

// newLogger writes through logs.Handler, which masks secrets and URL
// credentials and queries, and holds back repeated warnings.
func newLogger(w io.Writer, level slog.Level, format string) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler = slog.NewTextHandler(w, opts)
	if format == "json" {
		h = slog.NewJSONHandler(w, opts)
	}
	return slog.New(logs.NewHandler(h, 0, nil))
}

func runRelay(ctx context.Context, conn *connFlags, f *runFlags, stderr io.Writer) error {
	level, err := f.validate()
	if err != nil {
		return err
	}
	named, err := conn.resolve()
	if err != nil {
		return err
	}
	if err := f.service.check(named); err != nil {
		return err
	}
	opts, err := conn.options("relay run")
	if err != nil {
		return err
	}
	keys, err := conn.keys()
	if err != nil {
		return err
	}
	log := newLogger(stderr, level, f.logFormat)
	tracer, err := tracing.FromEnv(ctx, log, version)
	if errors.Is(err, tracing.ErrConfig) {
		return usageError{err}
	}
	if err != nil {
		return err
	}
	// Deferred first, so run last: the spans of the lanes' last requests
	// are flushed too.
	defer func() {
		flushCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tracerFlushTimeout)
		defer cancel()
		if err := tracer.Shutdown(flushCtx); err != nil {
			log.Warn("tracing: flushing spans", "err", err)
		}
	}()
	m := metrics.NewWith(metrics.Options{Series: f.series})
	if gcpace.Wanted(os.Getenv) {
		// Fewer collections of a small heap; GOGC or GOMEMLIMIT overrides.
		paceCtx, stopPace := context.WithCancel(ctx)
		var pace conc.WaitGroup
		pace.Go(func() { gcpace.Run(paceCtx) })
		defer pace.Wait()
		defer stopPace()
	}
	// While NATS is away the relay can neither take nor settle a delivery:
	// /readyz says so until the client has reconnected.
	opts = append(opts,
		nats.DisconnectErrHandler(func(c *nats.Conn, err error) {
			if c.IsClosed() || c.IsDraining() {
				return // the relay's own stop
			}
			m.SetConnected(false)
			log.Warn("disconnected from NATS; reconnecting", "err", err)
		}),
		nats.ReconnectHandler(func(c *nats.Conn) {
			m.SetConnected(true)
			log.Info("reconnected to NATS", "url", c.ConnectedUrlRedacted())
		}),
	)

	var srv *server.Server
	// The password of the embedded server's service user: only this
	// process connects as it.
	servicePassword := nuid.Next()
	url := conn.url
	if !named && f.replicas > 1 {
		return usagef("--replicas: the embedded server is one node and holds 1 replica; give --nats for a cluster")
	}
	if !named {
		// One embedded server per directory: a second would overwrite the
		// first's JetStream files. Taken first, so an unusable --data is
		// named at once.
		lock, err := streams.LockData(f.data)
		if err != nil {
			return fmt.Errorf("--data %s: %w", f.data, err)
		}
		defer func() { _ = lock.Unlock() }()
		srv, err = streams.StartServer(streams.ServerConfig{Listen: f.listen, DataDir: f.data, ServicePassword: servicePassword})
		if err != nil {
			return fmt.Errorf("--data %s, --listen %s: %w", f.data, f.listen, err)
		}
		defer func() {
			srv.Shutdown()
			srv.WaitForShutdown()
		}()
		// A loopback socket rather than an in-process pipe: see LocalURL.
		if url, err = streams.LocalURL(srv); err != nil {
			return err
		}
		log.Info("embedded NATS server started", "url", url, "data", f.data)
	}
	closed := make(chan struct{})
	// A subject NATS refuses during the start-up closes the connection, so
	// that the start-up fails at once with the refusal; later ones are logged.
	refused := newRefusals((*nats.Conn).Close, log)
	opts = append(opts, nats.ClosedHandler(func(*nats.Conn) { close(closed) }), refused.option())
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return cannotConnect(url, err, "is a NATS server up? without --nats and NATS_URL, relay run starts one of its own")
	}
	// Drain, not Close: acks and PubAcks still on their way are flushed.
	// Before the embedded server stops (deferred earlier, so run later):
	// what the server has not read when it stops is lost. A second signal
	// does not wait.
	hurry := hurryOf(ctx)
	defer func() {
		if nc.Drain() != nil {
			nc.Close()
			return
		}
		select {
		case <-closed:
		case <-hurry.Done():
			nc.Close()
		case <-time.After(10 * time.Second):
			nc.Close()
		}
	}()

	// A PubAck that never comes (a leader lost after it stored nothing)
	// must end: the lanes wait for one before they ack what they moved.
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(10*time.Second))
	if err != nil {
		return err
	}
	setupCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := streams.Ensure(setupCtx, js, streams.Options{Replicas: f.replicas, DLQMaxAge: f.dlqMaxAge,
		AttemptsMaxAge: f.attemptsMaxAge, NoAttempts: !f.recordAttempts, Logger: log}); err != nil {
		return refused.explain(err)
	}
	if f.ackWait, err = clusterAckWait(setupCtx, js, f.ackWait, f.ackWaitGiven, log); err != nil {
		return refused.explain(err)
	}
	store, err := subscribers.Open(setupCtx, js, subscribers.WithKeys(keys))
	if err != nil {
		return refused.explain(err)
	}
	if keys == nil {
		log.Warn("subscriber secrets are stored in the clear: give --secrets-key-file (or " + secretsKeyFileEnv + ") to seal them; see docs/secrets.md")
	} else {
		log.Info("subscriber secrets are sealed", "key_id", keys.Current(), "keys", len(keys.IDs()))
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	live, err := store.Watch(runCtx, subscribers.WatchLog(log))
	if err != nil {
		return refused.explain(err)
	}
	// Operational events: what the lanes and the fan-out do to a
	// subscriber, published into EVENTS as relay.* events. A resume is
	// announced only once no later pause (another relay's) holds it.
	var limiter *ratelimit.Shared
	ops, err := opevent.New(opevent.Config{JS: js, Relay: relayName(), Logger: log,
		PausedUntil: func(id string) time.Time { return limiter.PausedUntil(id) }})
	if err != nil {
		return err
	}
	limiter, err = ratelimit.NewShared(setupCtx, js, ratelimit.Options{MaxPause: f.maxPause, Notify: ops})
	if err != nil {
		return refused.explain(err)
	}
	// Stopped after the lanes and the fan-out, to publish what they
	// reported last.
	opsCtx, stopOps := context.WithCancel(context.WithoutCancel(ctx))
	var opsWG conc.WaitGroup
	opsWG.Go(func() { _ = ops.Run(opsCtx) })
	defer opsWG.Wait()
	defer stopOps()
	// The records of relay trace, written after the lanes' and the
	// fan-out's last outcomes, as the operational events are.
	var records *attempts.Recorder
	if f.recordAttempts {
		if _, err := js.Stream(setupCtx, streams.Attempts); err != nil {
			// Ensure said why (no room for it): the relay delivers
			// without records.
			f.recordAttempts = false
		}
	}
	if f.recordAttempts {
		if records, err = attempts.New(attempts.Config{Conn: nc, Relay: relayName(), Logger: log, Metrics: m}); err != nil {
			return err
		}
		recordsCtx, stopRecords := context.WithCancel(context.WithoutCancel(ctx))
		var recordsWG conc.WaitGroup
		recordsWG.Go(func() { records.Run(recordsCtx) })
		defer recordsWG.Wait()
		defer stopRecords()
	}
	kv, err := js.KeyValue(setupCtx, streams.TimelinessBucket)
	if err != nil {
		return refused.explain(fmt.Errorf("opening KV bucket %s: %w", streams.TimelinessBucket, err))
	}
	refused.disarm()
	// The in-time counts outlive the other parts by a final flush: the
	// lanes still settle requests in flight after the stop.
	timely := timeliness.NewRecorder(kv, timeliness.WithLogger(log))
	timelyCtx, stopTimely := context.WithCancel(context.WithoutCancel(ctx))
	var timelyWG conc.WaitGroup
	timelyWG.Go(func() {
		if err := timely.Run(timelyCtx); err != nil {
			log.Error("relay: counting deliveries in time for relay status", "err", err)
		}
	})
	defer timelyWG.Wait()
	defer stopTimely()
	proxy := f.egressProxy()
	client, err := deliver.NewClient(deliver.WithAllowPrivate(f.allowPrivate), deliver.WithIdleConns(idleConns(f.maxRequests)),
		deliver.WithProxy(proxy))
	if err != nil {
		return err
	}
	if proxy.Enabled() {
		shown := proxy.Redacted()
		log.Info("relay: webhook requests go through an egress proxy", "http_proxy", shown.HTTP, "https_proxy", shown.HTTPS,
			"no_proxy", shown.NoProxy, "from", map[bool]string{true: "--proxy", false: "the environment"}[f.proxyGiven])
	}
	defer client.CloseIdleConnections()
	// The keeper purges EVENTS of the events older than --events-max-age
	// that the fan-out has copied, never of another.
	keeper, err := retention.New(retention.Config{JS: js, MaxAge: f.eventsMaxAge, Logger: log})
	if err != nil {
		return err
	}
	// The body keeper purges BODIES of the bodies no delivery on a lane
	// may still need.
	bodyKeeper, err := retention.NewBodyKeeper(retention.Config{JS: js, Logger: log})
	if err != nil {
		return err
	}

	svc, err := openServiceConn(srv, servicePassword, url, conn, f.service, nc, log)
	if err != nil {
		return err
	}
	if svc != nc {
		// After the responder has answered its last request (the wait
		// for the relay's goroutines is over), before the server stops.
		defer func() {
			_ = svc.FlushTimeout(time.Second)
			svc.Close()
		}()
	}

	var metricsAddr net.Addr
	var wg conc.WaitGroup
	errs := make(chan error, 6)
	if f.metricsAddr != "" {
		ln, err := net.Listen("tcp", f.metricsAddr)
		if err != nil {
			return fmt.Errorf("--metrics: %w", err)
		}
		metricsAddr = ln.Addr()
		wg.Go(func() { errs <- m.ServeListener(runCtx, ln) })
	}
	// The gauges about the whole cluster (queues, pauses, circuits) are read
	// from these when /metrics is scraped; removed subscribers' series go.
	wg.Go(func() {
		errs <- m.Run(runCtx, metrics.Sources{JS: js, Subscribers: live, Limiter: limiter, Logger: log})
	})
	// The lanes tell the fan-out which subscribers have a backlog, so that
	// their copies skip the lane (see overflow.Backlogged).
	backlogs := &overflow.Backlogged{}
	wg.Go(func() {
		errs <- fanout.Run(runCtx, fanout.Config{
			JS: js, Subscribers: live, SharedLanes: f.lanes, AckWait: f.ackWait / 2, Logger: log, Metrics: m,
			Backlogs: backlogs, Timeliness: timely, Horizon: f.eventsMaxAge, Tracer: tracer, Ops: ops, Records: records,
		})
	})
	wg.Go(func() { keeper.Run(runCtx) })
	wg.Go(func() { bodyKeeper.Run(runCtx) })
	wg.Go(func() {
		errs <- retry.Move(runCtx, retry.MoverConfig{
			JS: js, Subscribers: live, SharedLanes: f.lanes, AckWait: f.ackWait / 2, Logger: log,
		})
	})
	wg.Go(func() {
		errs <- lanes.Run(runCtx, lanes.Config{
			JS: js, Subscribers: live, SharedLanes: f.lanes, Client: client, Limiter: limiter, Logger: log, Metrics: m,
			AckWait: f.ackWait, MaxPause: f.maxPause, MaxRequests: maxRequests(f.maxRequests), Backlogs: backlogs,
			ShutdownTimeout: shutdownTimeout(f.shutdownTimeout), Timeliness: timely, Hurry: hurry, Tracer: tracer,
			Disable: store.Disable, Ops: ops, Records: records,
		})
	})
	// Rewrites subscribers whose retired secrets or timed pause have ended
	// (nil: the real clock).
	wg.Go(func() { store.RunJanitor(runCtx, live, nil, log) })
	// Says once of each subscriber it cannot deliver to for want of the
	// key its secrets are sealed with.
	wg.Go(func() { live.LogSealed(runCtx, log) })
	// relay sub test: a request made as a delivery is, from this relay,
	// with its client, answered from the service connection. It failing to
	// start stops no delivery.
	if tests, err := testrequest.Start(testrequest.Config{Conn: svc, Subscribers: live, Client: client, Logger: log}); err != nil {
		log.Error("relay: relay sub test cannot ask this relay", "err", err)
	} else {
		wg.Go(func() { tests.Run(runCtx) })
	}
	wg.Go(func() { _ = limiter.Follow(runCtx, log) })
	// The NATS service only on a connection of its own: micro answers its
	// $SRV discovery requests on any reply subject, unchecked.
	serviceConn := svc
	if svc == nc {
		serviceConn = nil
	}
	stopAPI, err := startAPI(setupCtx, runCtx, f, js, store, serviceConn, m, log, &wg, errs)
	if err != nil {
		stop()
		wg.Wait()
		return err
	}
	defer stopAPI()
	m.SetReady(true)
	log.Info("relay running", "nats", maskNATS(url), "metrics", addrString(metricsAddr), "lanes", f.lanes,
		"allow_private_targets", f.allowPrivate, "events_max_age", f.eventsMaxAge, "version", version)
	if f.ready != nil {
		f.ready(url, metricsAddr)
	}

	var first error
	select {
	case <-ctx.Done():
	case first = <-errs:
	case <-live.Done():
		// The view watches the bucket again whenever its watch ends, so
		// it stops for good only with the relay or its connection (said
		// below); else a relay copying events with a frozen view would
		// lose them, so it stops.
		first = fmt.Errorf("relay: the subscriber view stopped following the bucket: %w", live.Err())
		if nc.IsClosed() {
			<-closed
			first = refused.explain(errors.New("the NATS connection was closed"))
		}
	case <-closed:
		// Only a refusal closes the connection before the relay's own
		// stop (it reconnects for ever otherwise).
		first = refused.explain(errors.New("the NATS connection was closed"))
	}
	m.SetReady(false)
	log.Info("relay stopping: finishing or handing back deliveries in flight")
	stop()
	wg.Wait()
	<-live.Done()
	close(errs)
	for err := range errs {
		if first == nil {
			first = err
		}
	}
	if first != nil && !errors.Is(first, context.Canceled) {
		return first
	}
	log.Info("relay stopped")
	return nil
}

// openServiceConn opens the connection relay answers requests on core NATS
// from (package service): on its embedded server srv, in-process, as the
// server's service user, which may publish to inboxes alone; on a cluster,
// as the user of the service flags, with conn's URL and TLS settings. Given
// no service user on a cluster it returns nc, the relay's own connection,
// and warns once that answers then rest on relay's check of the reply
// subject alone; the NATS service relay is then not registered
// (startAPI).
func openServiceConn(srv *server.Server, password, url string, conn *connFlags, service *serviceFlags, nc *nats.Conn, log *slog.Logger) (*nats.Conn, error) {
	// A refusal is logged, and stops nothing: relay sub test is not what a
	// relay runs for.
	common := []nats.Option{nats.MaxReconnects(-1), newRefusals(nil, log).option()}
	switch {
	case srv != nil:
		opts := append(common, nats.Name(serviceConnName), nats.InProcessServer(srv), nats.UserInfo(streams.ServiceUser, password))
		svc, err := nats.Connect("", opts...)
		if err != nil {
			return nil, fmt.Errorf("connecting to the embedded NATS server as %s: %w", streams.ServiceUser, err)
		}
		return svc, nil
	case service.given():
		opts, err := service.options(conn)
		if err != nil {
			return nil, err
		}
		svc, err := nats.Connect(withoutUserinfo(url), append(opts, common...)...)
		if err != nil {
			return nil, fmt.Errorf("cannot connect to NATS at %s as the service user (--service-…): %w", maskNATS(url), err)
		}
		return svc, nil
	default:
		log.Warn("relay: no service user: the NATS service relay is not registered, and relay sub test is answered from relay's own connection, "+
			"which may publish wherever relay writes; give relay run --service-user or --service-creds (see docs/permissions.md)",
			"subject", testrequest.Subject)
		return nc, nil
	}
}

// relayName names this relay in its operational events: its host and
// process.
func relayName() string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	return host + "/" + strconv.Itoa(os.Getpid())
}

// shutdownTimeout turns --shutdown-timeout into lanes.Config's terms, where
// 0 takes the default and a negative duration abandons at once.
func shutdownTimeout(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// maxRequests turns --max-requests into lanes.Config's terms, where 0 takes
// the default and a negative number means unlimited.
func maxRequests(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

func addrString(a net.Addr) string {
	if a == nil {
		return "off"
	}
	return a.String()
}

// idleConns sizes the HTTP connection pool to the requests that may be in
// flight at once, so that a burst to one host reuses its connections.
func idleConns(maxRequests int) int {
	if maxRequests <= 0 {
		return deliver.DefaultIdleConns * 4
	}
	return maxRequests
}

// clusterAckWait is the ack wait this relay runs with: the one the lane
// consumers of the cluster have (see lanes.AckWaitUse), unless --ack-wait
// was given. A --ack-wait other than the consumers' changes them, and is
// refused while a relay pulls from them: relays with two ack waits would
// send deliveries twice. With no lane consumer yet, it is --ack-wait (or
// its default).
func clusterAckWait(ctx context.Context, js jetstream.JetStream, flag time.Duration, given bool, log *slog.Logger) (time.Duration, error) {
	use, err := lanes.AckWaitInUse(ctx, js)
	if err != nil {
		return 0, err
	}
	usable := !use.Mixed && use.Wait >= time.Second && use.Wait <= maxAckWait
	switch {
	case use.Wait == 0:
		return flag, nil
	case !given && usable:
		if use.Wait != flag {
			log.Info("relay: using the ack wait of the cluster's lane consumers", "ack_wait", use.Wait)
		}
		return use.Wait, nil
	case usable && use.Wait == flag:
		return flag, nil
	case use.Pulling:
		inUse := use.Wait.String()
		if use.Mixed {
			inUse = "several ack waits, up to " + inUse
		}
		return 0, usagef("--ack-wait %s: the relays running on this cluster use %s, and every relay must use one ack wait; "+
			"to change it, stop every relay, then start them with --ack-wait %s (see docs/deploy.md)", flag, inUse, flag)
	default:
		log.Warn("relay: changing the ack wait of the cluster's lane consumers; start every relay of the cluster with it",
			"from", use.Wait, "to", flag, "mixed", use.Mixed)
		return flag, nil
	}
}
