package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/streams"
)

// fanoutConsumer is the fan-out's consumer on EVENTS (docs/streams.md); the
// lane consumers on DELIVERIES are streams.LaneConsumer's.
const fanoutConsumer = "fanout"

// publishChunk is how many events are published before waiting for their
// PubAcks, well under the client's limit of pending async publishes.
const publishChunk = 4096

// publishBytes bounds the bytes of one chunk: a nats-server queues at most
// 128 MiB for a stream to store, and refuses what comes beyond it (429,
// 10167 "too many requests"): 4,096 events of 64 KiB would be 256 MiB.
const publishBytes = 16 << 20

// chunk is how many events of the run's body one chunk holds.
func (e *env) chunk() int {
	return max(1, min(publishChunk, publishBytes/max(1, len(e.body))))
}

// env is what every scenario shares: the relay binary, the receiver
// process and its clients, the signing secret and the body.
type env struct {
	cfg     config
	bin     string
	work    string
	rcvProc *receiverProc // the receiver process, whose CPU time the results report
	rcv     *receiver     // where the relays' webhooks go
	baseRcv *receiver     // the throughput loops' (baseline and two-hop): another port of the same process, a record of its own
	hook    *receiver     // rcv, by the name the scenarios use for its URL
	secret  string
	body    []byte
	stacks  int
}

// newEnv starts the receiver process (two listeners: the relays' and the
// throughput loops') and makes the secret and the body. fail is called
// once should the receiver process fail (see startReceivers).
func newEnv(cfg config, bin, work string, fail func(error)) (*env, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	proc, rcvs, err := startReceivers(2, fail)
	if err != nil {
		return nil, err
	}
	return &env{
		cfg: cfg, bin: bin, work: work, rcvProc: proc, rcv: rcvs[0], baseRcv: rcvs[1], hook: rcvs[0],
		secret: "whsec_" + base64.StdEncoding.EncodeToString(key),
		body:   payload(cfg.payload),
	}, nil
}

// close stops the receiver process; a failure to stop is printed, since
// it comes after the figures.
func (e *env) close() {
	if err := e.rcvProc.stop(); err != nil {
		fmt.Fprintln(os.Stderr, "engine:", err)
	}
}

// payload is a JSON body of n bytes.
func payload(n int) []byte {
	const pre, post = `{"pad":"`, `"}`
	if n < len(pre)+len(post) {
		return []byte(`{}`)
	}
	return []byte(pre + strings.Repeat("x", n-len(pre)-len(post)) + post)
}

// stack is one fresh nats-server and one relay process running against it.
type stack struct {
	name  string
	dir   string
	srv   *server.Server
	proc  *serverProc // a nats-server process of its own (the soak on --nats), instead of srv
	url   string
	nc    *nats.Conn
	js    jetstream.JetStream
	relay *relayProc
}

// up starts a nats-server in-process (relay's embedded configuration, on a
// random loopback port, JetStream in a new directory) and a relay process
// on it, and returns once the relay is ready.
func (e *env) up(ctx context.Context, name string) (*stack, error) {
	return e.upWith(ctx, name, nil)
}

// upWith is up with extra environment for the relay process (KEY=VALUE,
// after what it inherits, so that they win) and extra relay run flags: how
// a scenario turns on what relay reads from its environment alone, such as
// tracing, or turns off records, for its own relays and no other
// scenario's.
func (e *env) upWith(ctx context.Context, name string, relayEnv []string, args ...string) (*stack, error) {
	s, logPath, err := e.newStack(name)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*stack, error) { return nil, errors.Join(err, s.down()) }
	if e.cfg.embedded {
		// The relay's own server, in its process, as `make run` has it.
		port, err := freePort()
		if err != nil {
			return fail(err)
		}
		listen := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		s.url = "nats://" + listen
		if s.relay, err = startRelay(ctx, e.bin, e.cfg.lanes, s.dir, logPath, relayEnv,
			append([]string{"--data", filepath.Join(s.dir, "relay-data"), "--listen", listen}, args...)...); err != nil {
			return fail(err)
		}
	} else if err := s.startServer(); err != nil {
		return fail(err)
	}
	if err := s.connect(); err != nil {
		return fail(err)
	}
	if s.relay == nil {
		if s.relay, err = startRelay(ctx, e.bin, e.cfg.lanes, s.dir, logPath, relayEnv, append([]string{"--nats", s.url}, args...)...); err != nil {
			return fail(err)
		}
	}
	return s, nil
}

// serverOnly is up without the relay: a nats-server in-process, whatever
// -embedded says, and a connection to it.
func (e *env) serverOnly(name string) (*stack, error) {
	s, _, err := e.newStack(name)
	if err != nil {
		return nil, err
	}
	if err := s.startServer(); err != nil {
		return nil, errors.Join(err, s.down())
	}
	if err := s.connect(); err != nil {
		return nil, errors.Join(err, s.down())
	}
	return s, nil
}

// newStack numbers a new stack and makes its directory; logPath is where
// its relay's stderr goes.
func (e *env) newStack(name string) (s *stack, logPath string, err error) {
	e.stacks++
	s = &stack{name: name, dir: filepath.Join(e.work, fmt.Sprintf("%02d-%s", e.stacks, name))}
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return nil, "", err
	}
	return s, filepath.Join(e.cfg.logs, fmt.Sprintf("%02d-%s.log", e.stacks, name)), nil
}

// startServer starts the stack's nats-server in-process.
func (s *stack) startServer() error {
	srv, err := streams.StartServer(streams.ServerConfig{Listen: "127.0.0.1:0", DataDir: filepath.Join(s.dir, "jetstream")})
	if err != nil {
		return err
	}
	s.srv, s.url = srv, srv.ClientURL()
	return nil
}

// connect opens the program's own connection to the stack's server.
func (s *stack) connect() error {
	var err error
	if s.nc, err = nats.Connect(s.url, nats.Name("bench/engine")); err != nil {
		return err
	}
	s.js, err = jetstream.New(s.nc, jetstream.WithPublishAsyncMaxPending(2*publishChunk),
		jetstream.WithPublishAsyncTimeout(30*time.Second))
	return err
}

// down stops the relay (SIGTERM, then SIGKILL after 30 s), the connection
// and the server, and removes the server's files. Safe on a partial stack.
func (s *stack) down() error {
	var errs []error
	if s.relay != nil {
		errs = append(errs, s.relay.stop())
	}
	if s.nc != nil {
		s.nc.Close()
	}
	if s.srv != nil {
		s.srv.Shutdown()
		s.srv.WaitForShutdown()
	}
	if s.proc != nil {
		errs = append(errs, s.proc.stop())
	}
	errs = append(errs, os.RemoveAll(s.dir))
	return errors.Join(errs...)
}

// relayProc is one `relay run` process.
type relayProc struct {
	cmd     *exec.Cmd
	logPath string
	metrics string
	done    chan struct{}
	err     error // how it exited; set before done is closed
	started time.Time
	// ready is the time from its start to its first 200 on /readyz.
	ready time.Duration
}

// startRelay starts `relay run` from bin in dir, its stderr and stdout to
// logPath, on a metrics port of its own (where its readiness is asked)
// with where saying which NATS it uses, and returns once it is ready. Its
// environment is this program's without the user's NATS and OTEL settings
// (withoutUserEnv), then extraEnv (KEY=VALUE, none when nil).
func startRelay(ctx context.Context, bin string, lanes int, dir, logPath string, extraEnv []string, where ...string) (*relayProc, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	p := &relayProc{logPath: logPath, metrics: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), done: make(chan struct{})}
	args := append([]string{"run", "--allow-private-targets", "--metrics", p.metrics, "--lanes", strconv.Itoa(lanes)}, where...)
	p.cmd = exec.Command(bin, args...)
	p.cmd.Dir = dir
	p.cmd.Env = append(withoutUserEnv(os.Environ()), extraEnv...)
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	ownProcess(p.cmd)
	if err := p.cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting relay: %w", err)
	}
	logFile.Close() // the child has its own descriptor
	p.started = time.Now()
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	if err := p.waitReady(ctx, 30*time.Second); err != nil {
		return nil, errors.Join(err, p.stop())
	}
	p.ready = time.Since(p.started)
	return p, nil
}

// pid is the relay process's, for /proc.
func (p *relayProc) pid() int { return p.cmd.Process.Pid }

// waitReady polls the relay's /readyz until it answers 200, the relay
// exits, ctx is done or d passes; the errors carry the end of its log,
// which says why a relay did not start.
func (p *relayProc) waitReady(ctx context.Context, d time.Duration) error {
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(d)
	for {
		resp, err := client.Get("http://" + p.metrics + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-p.done:
			return fmt.Errorf("relay exited before it was ready (%v); its log: %s\n%s", p.err, p.logPath, tail(p.logPath, 20))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("relay not ready after %v; its log: %s\n%s", d, p.logPath, tail(p.logPath, 20))
		}
	}
}

// exited reports whether the relay has exited on its own.
func (p *relayProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop asks the relay to stop (SIGTERM, as a user's service manager would)
// and waits for it; after 30 s it is killed, and that is reported.
func (p *relayProc) stop() error {
	if p.exited() {
		return exitErr(p)
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	start := time.Now()
	select {
	case <-p.done:
		took := time.Since(start)
		if took > 5*time.Second {
			fmt.Fprintf(os.Stderr, "  relay (pid %d) took %v to stop after SIGTERM\n", p.pid(), took.Round(time.Millisecond))
		}
		if p.err != nil {
			return fmt.Errorf("relay (pid %d) exited with %v after SIGTERM; its log: %s", p.pid(), p.err, p.logPath)
		}
		return nil
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("relay (pid %d) did not stop within 30 s of SIGTERM and was killed; its log: %s", p.pid(), p.logPath)
	}
}

// exitErr describes a relay that exited by itself, with the end of its
// log: a scenario cannot go on without it.
func exitErr(p *relayProc) error {
	return fmt.Errorf("relay (pid %d) exited by itself after %v: %v; its log: %s\n%s",
		p.pid(), time.Since(p.started).Round(time.Second), p.err, p.logPath, tail(p.logPath, 20))
}

// tail returns the last n lines of a file, indented.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "  (" + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	lines = lines[max(0, len(lines)-n):]
	return "  " + strings.Join(lines, "\n  ")
}

// withoutUserEnv is env without NATS_URL and without any OTEL_* variable,
// so that every relay command uses the server it is given and never one of
// the user's, and that a user's own OpenTelemetry settings never turn
// tracing on (or change it) in a measured relay: only a scenario that asks
// for it (upWith) traces, and every other relay runs as tracing off.
func withoutUserEnv(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, "NATS_URL=") && !strings.HasPrefix(kv, "OTEL_") {
			out = append(out, kv)
		}
	}
	return out
}

// freePort is a loopback port that was free a moment ago, for a listener
// another process opens (the relay's metrics, an embedded server).
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// subAdd runs `relay sub add` for a subscriber whose webhook is the
// receiver's /<id>.
func (e *env) subAdd(ctx context.Context, s *stack, id string, rate float64, inFlight int, events string) error {
	return e.subAddAt(ctx, s, id, e.hook.URL+"/"+id, rate, inFlight, events)
}

// subAddAt runs `relay sub add` for a subscriber whose webhook is url, with
// extra flags.
func (e *env) subAddAt(ctx context.Context, s *stack, id, url string, rate float64, inFlight int, events string, extra ...string) error {
	args := append([]string{"sub", "add", id, "--url", url, "--secret", e.secret,
		"--rate", strconv.FormatFloat(rate, 'g', -1, 64), "--max-in-flight", strconv.Itoa(inFlight),
		"--events", events}, extra...)
	return e.relayCommand(ctx, s, args...)
}

// relayCommand runs one relay command (sub add, sub pause, …) against the
// stack's server, at most 30 s.
func (e *env) relayCommand(ctx context.Context, s *stack, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, e.bin, append(args, "--nats", s.url)...)
	cmd.Dir = s.dir
	cmd.Env = withoutUserEnv(os.Environ())
	ownProcess(cmd)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("relay %s: %w: %s", strings.Join(args[:min(3, len(args))], " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// publish publishes n events on events.<eventType> with Nats-Msg-Id
// <prefix><i>, i from 0, async in chunks, and waits for every PubAck.
func (e *env) publish(ctx context.Context, s *stack, eventType, prefix string, n int) error {
	return e.publishFrom(ctx, s, eventType, prefix, 0, n)
}

// publishWith is publish with the headers that header gives the i-th event
// beside its Nats-Msg-Id (see publishEachWith); a nil header publishes
// exactly what publish does, so that a scenario can add a header (a
// traceparent) without changing what the others publish.
func (e *env) publishWith(ctx context.Context, s *stack, eventType, prefix string, n int, header func(i int) nats.Header) error {
	subject := "events." + eventType
	return e.publishEachWith(ctx, s, n, func(i int) (string, string) {
		return subject, prefix + strconv.Itoa(i)
	}, header)
}

// publishFrom is publish for i from first to first+n-1.
func (e *env) publishFrom(ctx context.Context, s *stack, eventType, prefix string, first, n int) error {
	return e.publishOn(ctx, s, "events."+eventType, prefix, first, n)
}

// publishOn is publishFrom on any subject.
func (e *env) publishOn(ctx context.Context, s *stack, subject, prefix string, first, n int) error {
	return e.publishEach(ctx, s, n, func(i int) (string, string) {
		return subject, prefix + strconv.Itoa(first+i)
	})
}

// publishEach publishes n events, the i-th on the subject and with the
// Nats-Msg-Id that msg gives it, async in chunks of publishChunk, and waits
// for every PubAck.
func (e *env) publishEach(ctx context.Context, s *stack, n int, msg func(i int) (subject, id string)) error {
	return e.publishEachWith(ctx, s, n, msg, nil)
}

// publishEachWith is publishEach with the headers header(i) gives the i-th
// event, none when header is nil or returns nil. header must return a new
// map each call: the publish adds the Nats-Msg-Id to it, and the client
// keeps the message until its PubAck, to publish it again if need be.
func (e *env) publishEachWith(ctx context.Context, s *stack, n int, msg func(i int) (subject, id string), header func(i int) nats.Header) error {
	chunk := e.chunk()
	for from := 0; from < n; from += chunk {
		to := min(n, from+chunk)
		acks := make([]jetstream.PubAckFuture, 0, to-from)
		for i := from; i < to; i++ {
			subject, id := msg(i)
			m := &nats.Msg{Subject: subject, Data: e.body}
			if header != nil {
				m.Header = header(i)
			}
			f, err := s.js.PublishMsgAsync(m, jetstream.WithMsgID(id))
			if err != nil {
				return fmt.Errorf("publishing: %w", err)
			}
			acks = append(acks, f)
		}
		if err := waitAcks(ctx, acks); err != nil {
			return err
		}
	}
	return nil
}

// waitAcks waits for every PubAck of acks, at most a minute in all: a
// publish that is never acknowledged is an error, not a wait forever.
func waitAcks(ctx context.Context, acks []jetstream.PubAckFuture) error {
	timeout := time.After(time.Minute)
	for _, f := range acks {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return fmt.Errorf("publishing: %w", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-timeout:
			return errors.New("publishing: no PubAck within a minute")
		}
	}
	return nil
}

// seqs are the last sequences of DELIVERIES, RETRIES and BODIES: each
// stored message, whatever its subject, adds one.
type seqs struct{ deliveries, retries, bodies uint64 }

// minus is how many messages were stored between b and a, b read first.
func (a seqs) minus(b seqs) int64 {
	return int64(a.deliveries-b.deliveries) + int64(a.retries-b.retries) + int64(a.bodies-b.bodies)
}

// lastSeqs reads the last sequences of DELIVERIES, RETRIES and BODIES from
// their stream info (BODIES 0 against a relay older than it).
func (s *stack) lastSeqs(ctx context.Context) (seqs, error) {
	var out seqs
	for _, x := range []struct {
		name string
		seq  *uint64
	}{{streams.Deliveries, &out.deliveries}, {streams.Retries, &out.retries}, {streams.Bodies, &out.bodies}} {
		st, err := s.js.Stream(ctx, x.name)
		if x.name == streams.Bodies && errors.Is(err, jetstream.ErrStreamNotFound) {
			continue
		}
		if err != nil {
			return out, err
		}
		info, err := st.Info(ctx)
		if err != nil {
			return out, err
		}
		*x.seq = info.State.LastSeq
	}
	return out, nil
}

// inOverflow is how many deliveries wait on deliveries.overflow.<id>, from
// the stream's per-subject counts.
func (s *stack) inOverflow(ctx context.Context, id string) (uint64, error) {
	st, err := s.js.Stream(ctx, streams.Deliveries)
	if err != nil {
		return 0, err
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(streams.OverflowPrefix+id))
	if err != nil {
		return 0, err
	}
	return info.State.Subjects[streams.OverflowPrefix+id], nil
}

// consumerInfo is the state of one consumer.
func (s *stack) consumerInfo(ctx context.Context, stream, name string) (*jetstream.ConsumerInfo, error) {
	c, err := s.js.Consumer(ctx, stream, name)
	if err != nil {
		return nil, err
	}
	return c.CachedInfo(), nil
}

// fannedOut reports whether the fan-out has copied every event: its
// consumer has nothing pending and nothing unacknowledged.
func (s *stack) fannedOut(ctx context.Context) (bool, *jetstream.ConsumerInfo, error) {
	info, err := s.consumerInfo(ctx, streams.Events, fanoutConsumer)
	if err != nil {
		return false, nil, err
	}
	return info.NumPending == 0 && info.NumAckPending == 0, info, nil
}

// lanesState describes every lane consumer that has messages pending, unacked or
// waiting pulls, and the fan-out's: what a stall looks like from the server.
func (s *stack) lanesState(ctx context.Context, lanes int) string {
	var parts []string
	if info, err := s.consumerInfo(ctx, streams.Events, fanoutConsumer); err == nil {
		parts = append(parts, fmt.Sprintf("fanout pending %d ack_pending %d waiting %d",
			info.NumPending, info.NumAckPending, info.NumWaiting))
	}
	for i := range lanes {
		name := streams.LaneConsumer(subscribers.SharedLane(i))
		info, err := s.consumerInfo(ctx, streams.Deliveries, name)
		if err != nil {
			parts = append(parts, name+": "+err.Error())
			continue
		}
		if info.NumPending > 0 || info.NumAckPending > 0 || info.NumRedelivered > 0 {
			parts = append(parts, fmt.Sprintf("%s pending %d ack_pending %d redelivered %d waiting %d",
				name, info.NumPending, info.NumAckPending, info.NumRedelivered, info.NumWaiting))
		}
	}
	return strings.Join(parts, "; ")
}

// waitUntil polls cond every 100 ms until it holds, the relay (if the stack
// has one) exits, ctx is done or timeout passes; every 5 s it prints progress() on stderr.
func (s *stack) waitUntil(ctx context.Context, what string, timeout time.Duration, cond func() (bool, error), progress func() string) error {
	start := time.Now()
	lastProgress := start
	for {
		ok, err := cond()
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if ok {
			return nil
		}
		if s.relay != nil && s.relay.exited() {
			return fmt.Errorf("%s: %w", what, exitErr(s.relay))
		}
		now := time.Now()
		if now.Sub(start) > timeout {
			if s.relay == nil { // a loop of the throughput scenario, no relay
				return fmt.Errorf("%s: not done after %v (%s)", what, timeout, progress())
			}
			return fmt.Errorf("%s: not done after %v (%s); relay log: %s", what, timeout, progress(), s.relay.logPath)
		}
		if now.Sub(lastProgress) >= 5*time.Second {
			lastProgress = now
			fmt.Fprintf(os.Stderr, "  %5.0fs %s: %s\n", now.Sub(start).Seconds(), what, progress())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
