package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/relay-dev/relay/streams"
)

// The webhook receiver runs in a process of its own, so that the CPU it
// spends answering the relay (reading requests, the HTTP server's
// goroutines, its GC) shows apart from the relay's and this program's, and
// takes nothing from the publisher or the in-process nats-server. The
// process is this program's own binary, started again with receiverModeArg
// as its first argument (main checks for it before parsing any flag). It
// serves one or more recording listeners on loopback ports, each with a
// record of its own, and answers a small control API beside the webhooks
// under /_bench/ (GET snapshot, distinct, arrival, arrivals, times; POST
// forget), in JSON. The benchmark's *receiver is a client of one listener.
//
// Arrival times cross the process boundary as wall-clock Unix nanoseconds
// (time.Time.UnixNano). Both processes read the same machine's clock, so an
// arrival time is comparable with a publish time taken here: time.Unix
// gives a time.Time without a monotonic reading, and Sub between it and a
// time.Now() of this process then uses the wall clock of both. (A step of
// the system clock during a run would skew those differences; the gaps
// between arrivals are measured in the receiver process on its monotonic
// clock.)

// receiverModeArg, as this program's first argument, makes it the receiver
// process instead of the benchmark.
const receiverModeArg = "-receiver-mode"

// controlPrefix starts the paths of the control API. No webhook uses it:
// a subscriber id holds no slash, and the webhooks go to /<id>.
const controlPrefix = "/_bench/"

// receiverHello is the one line the receiver process writes on its stdout
// once it listens: the base URL of each listener, in order.
type receiverHello struct {
	URLs []string `json:"urls"`
}

// receiverMain is the receiver process. It listens on -listeners loopback
// ports, writes their URLs on stdout and serves until its stdin reaches
// EOF: the benchmark closes it to stop the process, and it closes by itself
// when the benchmark dies however it dies (on Linux the kernel also kills
// the process then, see ownProcess). It returns the exit code.
func receiverMain(args []string) int {
	fs := flag.NewFlagSet("engine "+receiverModeArg, flag.ContinueOnError)
	listeners := fs.Int("listeners", 1, "recording listeners, each on a port and with a record of its own")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *listeners < 1 || fs.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "receiver: -listeners must be at least 1, and no other argument is taken")
		return 2
	}
	var hello receiverHello
	var servers []*http.Server
	for range *listeners {
		ln, err := net.Listen("tcp", "127.0.0.1:0") // every webhook stays on loopback
		if err != nil {
			fmt.Fprintln(os.Stderr, "receiver:", err)
			return 1
		}
		srv := &http.Server{Handler: newRecorder()}
		servers = append(servers, srv)
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				fmt.Fprintln(os.Stderr, "receiver:", err)
				os.Exit(1)
			}
		}()
		hello.URLs = append(hello.URLs, "http://"+ln.Addr().String())
	}
	if err := json.NewEncoder(os.Stdout).Encode(hello); err != nil {
		fmt.Fprintln(os.Stderr, "receiver:", err)
		return 1
	}
	_, _ = io.Copy(io.Discard, os.Stdin) // until the benchmark closes it, or dies
	for _, srv := range servers {
		_ = srv.Close()
	}
	return 0
}

// recorder is one listener of the receiver process. It answers every
// webhook with 204 at once and records, per subscriber (the URL path), the
// first arrival of each webhook-id, every arrival, the request count and
// the longest gap between two consecutive arrivals. It keeps no body.
//
// Two query parameters of a webhook's URL make it misbehave, for the soak
// scenario: fail=P answers a share P of the requests (0 to 1, at random)
// 500, recorded as failed and not as an arrival; delay=D (a Go duration)
// answers every request after D.
type recorder struct {
	mu   sync.Mutex
	subs map[string]*tally
}

// tally is what a recorder knows of one subscriber.
type tally struct {
	requests int
	failed   int              // requests answered 500 (fail=P)
	first    map[string]int64 // webhook-id → first arrival, Unix ns
	all      []int64          // every arrival, Unix ns, in order: the rate scenario counts duplicates too
	start    time.Time        // first arrival, with its monotonic reading
	last     time.Time        // latest arrival
	gap      time.Duration    // longest time between two consecutive arrivals
	gapAt    time.Duration    // its start, after the first arrival
	gapAfter int              // distinct webhook-ids arrived before it
}

// newRecorder returns an empty recorder.
func newRecorder() *recorder { return &recorder{subs: map[string]*tally{}} }

// ServeHTTP records a webhook, or answers a control request.
func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if strings.HasPrefix(req.URL.Path, controlPrefix) {
		r.control(w, req)
		return
	}
	_, _ = io.Copy(io.Discard, req.Body)
	id := strings.TrimPrefix(req.URL.Path, "/")
	hook := req.Header.Get("webhook-id")
	q := req.URL.Query()
	if d, err := time.ParseDuration(q.Get("delay")); err == nil && d > 0 {
		select {
		case <-time.After(d):
		case <-req.Context().Done():
			return
		}
	}
	fail := false
	if p, err := strconv.ParseFloat(q.Get("fail"), 64); err == nil && p > 0 {
		fail = mrand.Float64() < p
	}
	r.mu.Lock()
	now := time.Now() // under the lock: arrivals are recorded in order
	ns := now.UnixNano()
	t := r.subs[id]
	if t == nil {
		t = &tally{first: map[string]int64{}, start: now}
		r.subs[id] = t
	}
	if fail {
		t.requests++
		t.failed++
		r.mu.Unlock()
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	if t.last.IsZero() {
		t.start = now
	} else if g := now.Sub(t.last); g > t.gap {
		t.gap, t.gapAt, t.gapAfter = g, t.last.Sub(t.start), len(t.first)
	}
	t.last = now
	t.requests++
	t.all = append(t.all, ns)
	if _, ok := t.first[hook]; !ok {
		t.first[hook] = ns
	}
	r.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// snapshotReply is a subscriber's tally without its per-arrival times:
// what the scenarios poll every 20 ms, so it stays a few dozen bytes.
// Times are Unix ns (0: nothing arrived), durations ns.
type snapshotReply struct {
	Requests int   `json:"requests"`
	Failed   int   `json:"failed"`
	Distinct int   `json:"distinct"`
	Start    int64 `json:"start"`
	Last     int64 `json:"last"`
	Gap      int64 `json:"gap"`
	GapAt    int64 `json:"gap_at"`
	GapAfter int   `json:"gap_after"`
}

// arrivalReply is when one webhook-id first reached a subscriber.
type arrivalReply struct {
	At int64 `json:"at"` // Unix ns
	OK bool  `json:"ok"`
}

// control answers the control API. Every answer is a copy taken under the
// lock and encoded after it, so that a large answer does not hold up the
// webhooks.
func (r *recorder) control(w http.ResponseWriter, req *http.Request) {
	q := req.URL.Query()
	id := q.Get("id")
	var reply any
	r.mu.Lock()
	t := r.subs[id]
	switch strings.TrimPrefix(req.URL.Path, controlPrefix) {
	case "snapshot":
		var s snapshotReply
		if t != nil {
			s = snapshotReply{Requests: t.requests, Failed: t.failed, Distinct: len(t.first), Start: unixNano(t.start),
				Last: unixNano(t.last), Gap: int64(t.gap), GapAt: int64(t.gapAt), GapAfter: t.gapAfter}
		}
		reply = s
	case "distinct":
		prefix, n := q.Get("prefix"), 0
		for id, t := range r.subs {
			if strings.HasPrefix(id, prefix) {
				n += len(t.first)
			}
		}
		reply = map[string]int{"distinct": n}
	case "arrival":
		var a arrivalReply
		if t != nil {
			a.At, a.OK = t.first[q.Get("hook")]
		}
		reply = a
	case "arrivals":
		prefix, first := q.Get("prefix"), map[string]int64{}
		if t != nil {
			for hook, at := range t.first {
				if strings.HasPrefix(hook, prefix) {
					first[hook] = at
				}
			}
		}
		reply = map[string]map[string]int64{"first": first}
	case "times":
		var all []int64
		if t != nil {
			all = slices.Clone(t.all)
		}
		reply = map[string][]int64{"at": all}
	case "forget":
		if req.Method != http.MethodPost {
			r.mu.Unlock()
			http.Error(w, "forget is a POST", http.StatusMethodNotAllowed)
			return
		}
		delete(r.subs, id)
		reply = struct{}{}
	default:
		r.mu.Unlock()
		http.NotFound(w, req)
		return
	}
	r.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(reply)
}

// receiverProc is the receiver process, seen from the benchmark.
type receiverProc struct {
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	client   *http.Client // for the control API, on connections of its own
	done     chan struct{}
	err      error       // how it exited; set before done is closed
	stopping atomic.Bool // stop was called: its exit is no failure
	fail     func(error) // called once, on the first failure
	failOnce sync.Once
}

// startReceivers starts the receiver process with n listeners and returns
// a client for each, in order. fail is called once if the process exits
// before stop or a control request fails: the run cannot go on without its
// receiver, and the methods of receiver return no error (the scenarios
// call them in their polling loops), so fail is how the run learns of it;
// run passes the cancel function of its context.
func startReceivers(n int, fail func(error)) (*receiverProc, []*receiver, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, nil, fmt.Errorf("the receiver process: %w", err)
	}
	cmd := exec.Command(exe, receiverModeArg, "-listeners", strconv.Itoa(n))
	cmd.Env = withoutUserEnv(os.Environ())
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	ownProcess(cmd)
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("starting the receiver process: %w", err)
	}
	transport := &http.Transport{
		Proxy:               nil, // loopback, never through a proxy
		MaxIdleConns:        16,
		MaxIdleConnsPerHost: 8, // a scenario may poll from a few goroutines at once
		IdleConnTimeout:     time.Minute,
		DisableCompression:  true,
	}
	p := &receiverProc{
		cmd: cmd, stdin: stdin, done: make(chan struct{}), fail: fail,
		client: &http.Client{Transport: transport, Timeout: time.Minute},
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
		if !p.stopping.Load() {
			p.failed(fmt.Errorf("the receiver process (pid %d) exited: %v", cmd.Process.Pid, p.err))
		}
	}()
	type line struct {
		b   []byte
		err error
	}
	hello := make(chan line, 1)
	go func() {
		b, err := bufio.NewReader(stdout).ReadBytes('\n')
		hello <- line{b, err}
	}()
	var h receiverHello
	select {
	case l := <-hello:
		err = l.err
		if err == nil {
			err = json.Unmarshal(l.b, &h)
		}
		if err == nil && len(h.URLs) != n {
			err = fmt.Errorf("%d listeners, not %d", len(h.URLs), n)
		}
	case <-time.After(10 * time.Second):
		err = errors.New("no listener within 10 s")
	}
	if err != nil {
		return nil, nil, errors.Join(fmt.Errorf("the receiver process: %w", err), p.stop())
	}
	rcvs := make([]*receiver, n)
	for i, u := range h.URLs {
		rcvs[i] = &receiver{URL: u, proc: p}
	}
	return p, rcvs, nil
}

// pid is the receiver process's.
func (p *receiverProc) pid() int { return p.cmd.Process.Pid }

// cpu is the receiver process's CPU time so far, user and system.
func (p *receiverProc) cpu() (time.Duration, error) { return cpuTime(p.pid()) }

// failed reports the first failure on stderr and to fail.
func (p *receiverProc) failed(err error) {
	p.failOnce.Do(func() {
		fmt.Fprintf(os.Stderr, "engine: receiver: %v; stopping the run\n", err)
		if p.fail != nil {
			p.fail(fmt.Errorf("receiver: %w", err))
		}
	})
}

// stop closes the process's stdin, which ends it, and waits for it; after
// 5 s it is killed, and that is reported.
func (p *receiverProc) stop() error {
	p.stopping.Store(true)
	_ = p.stdin.Close()
	select {
	case <-p.done:
		if p.err != nil {
			return fmt.Errorf("the receiver process (pid %d) exited with %v", p.pid(), p.err)
		}
		return nil
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("the receiver process (pid %d) did not stop within 5 s of its stdin closing and was killed", p.pid())
	}
}

// receiver is one listener of the receiver process: the relays' webhooks
// go to URL/<subscriber id>, and its methods ask the process what arrived.
// They return no error: a failed request is reported to the run (see
// startReceivers) and answered with the zero value.
type receiver struct {
	URL  string // the listener's base URL, http://127.0.0.1:<port>
	proc *receiverProc
}

// call sends a control request and decodes its JSON answer into out (when
// not nil); it reports whether it got one.
func (r *receiver) call(method, op string, q url.Values, out any) bool {
	req, err := http.NewRequest(method, r.URL+controlPrefix+op+"?"+q.Encode(), nil)
	if err != nil {
		r.proc.failed(err)
		return false
	}
	resp, err := r.proc.client.Do(req)
	if err != nil {
		r.proc.failed(fmt.Errorf("%s: %w", op, err))
		return false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		r.proc.failed(fmt.Errorf("%s: %s: %s", op, resp.Status, strings.TrimSpace(string(b))))
		return false
	}
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return true
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		r.proc.failed(fmt.Errorf("%s: %w", op, err))
		return false
	}
	return true
}

// unixNano is t as Unix ns, 0 for the zero time (nothing arrived: a
// subscriber whose every request so far was answered 500).
func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// fromNano is a wall-clock Unix ns time from the receiver process, the zero
// time for 0 (nothing arrived).
func fromNano(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// snapshot is a copy of a subscriber's tally, without the per-id times.
type snapshot struct {
	requests, distinct int
	failed             int       // requests answered 500 (a webhook URL with fail=P)
	start, last        time.Time // wall clock, from the receiver process; zero when nothing arrived
	gap, gapAt         time.Duration
	gapAfter           int
}

// snapshot is subscriber id's tally so far: counts, first and last arrival
// and the longest gap.
func (r *receiver) snapshot(id string) snapshot {
	var s snapshotReply
	if !r.call(http.MethodGet, "snapshot", url.Values{"id": {id}}, &s) {
		return snapshot{}
	}
	return snapshot{requests: s.Requests, failed: s.Failed, distinct: s.Distinct, start: fromNano(s.Start), last: fromNano(s.Last),
		gap: time.Duration(s.Gap), gapAt: time.Duration(s.GapAt), gapAfter: s.GapAfter}
}

// distinctWithPrefix sums the distinct webhook-ids of the subscribers whose
// id starts with prefix.
func (r *receiver) distinctWithPrefix(prefix string) int {
	var out struct {
		Distinct int `json:"distinct"`
	}
	r.call(http.MethodGet, "distinct", url.Values{"prefix": {prefix}}, &out)
	return out.Distinct
}

// arrivals is the first arrival of every webhook-id starting with prefix
// ("" for all) at subscriber id, in one request: for the scenarios that need
// every arrival time rather than counts.
func (r *receiver) arrivals(id, prefix string) map[string]time.Time {
	var out struct {
		First map[string]int64 `json:"first"`
	}
	r.call(http.MethodGet, "arrivals", url.Values{"id": {id}, "prefix": {prefix}}, &out)
	at := make(map[string]time.Time, len(out.First))
	for hook, ns := range out.First {
		at[hook] = fromNano(ns)
	}
	return at
}

// times is every arrival at subscriber id, duplicates included, in order,
// in one request.
func (r *receiver) times(id string) []time.Time {
	var out struct {
		At []int64 `json:"at"`
	}
	r.call(http.MethodGet, "times", url.Values{"id": {id}}, &out)
	at := make([]time.Time, len(out.At))
	for i, ns := range out.At {
		at[i] = fromNano(ns)
	}
	return at
}

// forget drops what was recorded for id.
func (r *receiver) forget(id string) {
	r.call(http.MethodPost, "forget", url.Values{"id": {id}}, nil)
}

// writeCounts classifies the messages published on the relay's streams, as
// a plain NATS subscriber on deliveries.> and retries.> sees them. Every
// publish is seen, also one that JetStream then drops as a duplicate; the
// figures of record are the streams' sequences, these say what they were.
type writeCounts struct {
	copies     int64 // deliveries.<lane>.<id> with the fan-out's Nats-Msg-Id <event id>.<id>
	puts       int64 // deliveries.overflow.<id>
	bringBacks int64 // deliveries.<lane>.<id> with Nats-Msg-Id refill-<seq>
	other      int64 // any other publish on deliveries.> (a retry moved back, a replay)
	parks      int64 // retries.wait.>
	due        int64 // retries.due.> (if the server's schedule firing is visible to subscribers)
	retries    int64 // any other publish on retries.>
	bodies     int64 // bodies.>: a body stored once for an event's copies
	// stored is the bytes of every publish on deliveries.> and bodies.>
	// (subject, headers and body, as JetStream stores them, less its own
	// few bytes of framing a message).
	stored  int64
	dropped int // messages this counter missed (slow consumer)
}

// minus is what was counted between b and a, b taken first.
func (a writeCounts) minus(b writeCounts) writeCounts {
	return writeCounts{
		copies: a.copies - b.copies, puts: a.puts - b.puts, bringBacks: a.bringBacks - b.bringBacks,
		other: a.other - b.other, parks: a.parks - b.parks, due: a.due - b.due, retries: a.retries - b.retries,
		bodies: a.bodies - b.bodies, stored: a.stored - b.stored, dropped: a.dropped - b.dropped,
	}
}

// writeCounter counts the publishes on deliveries.> and retries.> by
// kind, from the NATS subscriptions that countWrites makes; the counters are
// atomic because the subscriptions' handlers run on goroutines of their own.
type writeCounter struct {
	eventPrefix                                                     string
	copies, puts, bringBacks, other, parks, due, ret, bodies, bytes atomic.Int64
	subs                                                            []*nats.Subscription
}

// countWrites subscribes on nc to deliveries.> and retries.>; event ids
// published by this program start with eventPrefix.
func countWrites(nc *nats.Conn, eventPrefix string) (*writeCounter, error) {
	c := &writeCounter{eventPrefix: eventPrefix}
	d, err := nc.Subscribe(streams.DeliveriesFilter, c.delivery)
	if err != nil {
		return nil, err
	}
	r, err := nc.Subscribe("retries.>", c.retry)
	if err != nil {
		_ = d.Unsubscribe()
		return nil, err
	}
	b, err := nc.Subscribe("bodies.>", func(m *nats.Msg) {
		c.bodies.Add(1)
		c.bytes.Add(msgBytes(m))
	})
	if err != nil {
		_ = d.Unsubscribe()
		_ = r.Unsubscribe()
		return nil, err
	}
	c.subs = []*nats.Subscription{d, r, b}
	for _, s := range c.subs {
		_ = s.SetPendingLimits(-1, -1)
	}
	return c, nc.Flush()
}

// delivery classifies a publish on deliveries.>: a put to overflow, a
// bring-back, a fan-out copy of this program's events or anything else.
func (c *writeCounter) delivery(m *nats.Msg) {
	c.bytes.Add(msgBytes(m))
	if strings.HasPrefix(m.Subject, streams.OverflowPrefix) {
		c.puts.Add(1)
		return
	}
	id := m.Header.Get(nats.MsgIdHdr)
	switch {
	case strings.HasPrefix(id, "refill-"):
		c.bringBacks.Add(1)
	case strings.HasPrefix(id, c.eventPrefix):
		c.copies.Add(1)
	default:
		c.other.Add(1)
	}
}

// retry classifies a publish on retries.>: a park, a due message or
// anything else.
func (c *writeCounter) retry(m *nats.Msg) {
	switch {
	case strings.HasPrefix(m.Subject, streams.RetryWaitPrefix):
		c.parks.Add(1)
	case strings.HasPrefix(m.Subject, streams.RetryDuePrefix):
		c.due.Add(1)
	default:
		c.ret.Add(1)
	}
}

// counts is what was counted so far, with the messages the subscriptions
// dropped (a counter that fell behind undercounts, and says by how much).
func (c *writeCounter) counts() writeCounts {
	w := writeCounts{
		copies: c.copies.Load(), puts: c.puts.Load(), bringBacks: c.bringBacks.Load(), other: c.other.Load(),
		parks: c.parks.Load(), due: c.due.Load(), retries: c.ret.Load(), bodies: c.bodies.Load(), stored: c.bytes.Load(),
	}
	for _, s := range c.subs {
		n, _ := s.Dropped()
		w.dropped += n
	}
	return w
}

// msgBytes is what a message weighs in a stream: its subject, its headers
// as NATS encodes them, and its body.
func msgBytes(m *nats.Msg) int64 {
	n := len(m.Subject) + len(m.Data)
	if len(m.Header) > 0 {
		n += len("NATS/1.0\r\n\r\n")
		for k, vs := range m.Header {
			for _, v := range vs {
				n += len(k) + len(": \r\n") + len(v)
			}
		}
	}
	return int64(n)
}

// stop ends the subscriptions.
func (c *writeCounter) stop() {
	for _, s := range c.subs {
		_ = s.Unsubscribe()
	}
}
