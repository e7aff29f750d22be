package testutil

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/sourcegraph/conc"
)

// LatencyProxy is a loopback TCP proxy that delays every chunk of bytes, in
// both directions, by a fixed time, keeping their order: a NATS server as a
// relay sees it across a slow network (a round trip of twice the delay),
// without the loss or reordering a real network adds. The bandwidth is
// loopback's: only the latency is made up.
type LatencyProxy struct {
	ln     net.Listener
	target string
	delay  time.Duration
	// drop, when set, is asked about every message the server sends (its
	// payload, headers included); true drops it (see [StartDropProxy]).
	drop func(payload []byte) bool
	// late, when set, is asked about every message the server sends; true
	// writes it lateBy after it was read (see [StartLateProxy]).
	late   func(payload []byte) bool
	lateBy time.Duration
	// gates, when not nil, holds back the server's messages of the classes
	// a test holds (see [StartGateProxy]); gateMu orders its writes with
	// the pumps'.
	gates  map[string]*gate
	gateMu sync.Mutex

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	// work owns the accept loop and each connection's pumps.
	work conc.WaitGroup
}

// proxyChunk is what one read brought, and when it may be written on.
type proxyChunk struct {
	data []byte
	due  time.Time
}

// proxyQueue is how many chunks may wait out their delay in one direction
// of one connection; past it the reader waits, and TCP pushes back on the
// sender as a slow network would.
const proxyQueue = 4096

// StartLatencyProxy listens on a loopback port and forwards every
// connection to target (HOST:PORT), delaying each direction by delay. It
// stops, closing every connection, when the test ends.
func StartLatencyProxy(t testing.TB, target string, delay time.Duration) *LatencyProxy {
	t.Helper()
	return startProxy(t, &LatencyProxy{target: target, delay: delay})
}

// startProxy listens on a loopback port for p and stops it when the test
// ends.
func startProxy(t testing.TB, p *LatencyProxy) *LatencyProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testutil: proxy: %v", err)
	}
	p.ln, p.conns = ln, make(map[net.Conn]struct{})
	p.work.Go(p.accept)
	t.Cleanup(p.Close)
	return p
}

// URL is the nats:// URL that reaches the target through the proxy.
func (p *LatencyProxy) URL() string { return "nats://" + p.ln.Addr().String() }

// Close stops accepting, closes every connection and waits for the
// proxy's goroutines to end.
func (p *LatencyProxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	_ = p.ln.Close()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.work.Wait()
}

// track records c, so that Close closes it; false when the proxy is closed.
func (p *LatencyProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *LatencyProxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		if !p.track(client) {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil || !p.track(server) {
			if err == nil {
				_ = server.Close()
			}
			_ = client.Close()
			continue
		}
		p.work.Go(func() { p.pipe(client, server) })
		if p.drop != nil || p.gates != nil || p.late != nil {
			p.work.Go(func() { p.filter(server, client) })
			continue
		}
		p.work.Go(func() { p.pipe(server, client) })
	}
}

// pipe copies from src to dst, each chunk delay after it was read, until
// either side closes; then it closes both, which ends the other direction.
func (p *LatencyProxy) pipe(src, dst net.Conn) {
	chunks := make(chan proxyChunk, proxyQueue)
	var writer conc.WaitGroup
	writer.Go(func() {
		defer func() {
			_ = dst.Close()
			_ = src.Close()
		}()
		for c := range chunks {
			if wait := time.Until(c.due); wait > 0 {
				time.Sleep(wait)
			}
			if _, err := dst.Write(c.data); err != nil {
				// Closed, the source ends its reader; drained, the
				// reader is never left blocked on a full queue.
				_ = dst.Close()
				_ = src.Close()
				for range chunks {
				}
				return
			}
		}
	})
	defer writer.Wait()
	defer close(chunks)
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			chunks <- proxyChunk{data: append([]byte(nil), buf[:n]...), due: time.Now().Add(p.delay)}
		}
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				_ = src.Close()
			}
			return
		}
	}
}

// StartDropProxy is [StartLatencyProxy] without the delay, that drops the
// messages (MSG and HMSG frames) from the server for which drop returns
// true: a PubAck lost on the way back, as after a server's failover or on
// a link that fails between the store and the reply. drop is called from
// the proxy's goroutines, one per connection.
func StartDropProxy(t testing.TB, target string, drop func(payload []byte) bool) *LatencyProxy {
	t.Helper()
	return startProxy(t, &LatencyProxy{target: target, drop: drop})
}

// StartLateProxy is [StartLatencyProxy] without the delay, that delays by
// delay the messages (MSG and HMSG frames) from the server for which late
// returns true, keeping their order, and passes the rest at once: a PubAck
// that comes late from a busy server or across a slow link, while the rest
// of the traffic goes on. late is called from the proxy's goroutines, one
// per connection.
func StartLateProxy(t testing.TB, target string, delay time.Duration, late func(payload []byte) bool) *LatencyProxy {
	t.Helper()
	return startProxy(t, &LatencyProxy{target: target, late: late, lateBy: delay})
}

// filter copies the server's protocol from src to dst frame by frame,
// leaving out the messages p.drop refuses and delaying those p.late
// accepts, until either side closes.
func (p *LatencyProxy) filter(src, dst net.Conn) {
	var later *lateWriter
	if p.late != nil {
		later = &lateWriter{dst: dst, frames: make(chan proxyChunk, proxyQueue)}
		p.work.Go(later.run)
		defer close(later.frames)
		dst = later
	}
	defer func() {
		_ = dst.Close()
		_ = src.Close()
	}()
	r := bufio.NewReaderSize(src, 64<<10)
	for {
		frame, payload, err := readFrame(r)
		if err != nil {
			return
		}
		if payload != nil && p.drop != nil && p.drop(payload) {
			continue
		}
		if payload != nil && later != nil && p.late(payload) {
			later.frames <- proxyChunk{data: frame, due: time.Now().Add(p.lateBy)}
			continue
		}
		if p.gates != nil && payload != nil {
			if err := p.pass(dst, frame); err != nil {
				return
			}
			continue
		}
		if _, err := dst.Write(frame); err != nil {
			return
		}
	}
}

// gate is one class of the server's messages a [StartGateProxy] holds
// back: those match accepts, until it is released.
type gate struct {
	match func(frame []byte) bool
	held  []heldFrame
}

// heldFrame is a message held back, and the connection it goes to.
type heldFrame struct {
	dst   net.Conn
	frame []byte
}

// StartGateProxy is [StartLatencyProxy] without the delay, that can hold
// back classes of the server's messages (MSG and HMSG frames, control line
// included) and let them go later in their order: a reply or a watch
// update that a slow link or a starved host hands over late, while the
// rest goes on. Start holding a class with [LatencyProxy.Hold], end it
// with [LatencyProxy.Release].
func StartGateProxy(t testing.TB, target string) *LatencyProxy {
	t.Helper()
	return startProxy(t, &LatencyProxy{target: target, gates: make(map[string]*gate)})
}

// Hold holds back, from now on, the server's messages match accepts,
// under the class name, until Release(name).
func (p *LatencyProxy) Hold(name string, match func(frame []byte) bool) {
	p.gateMu.Lock()
	defer p.gateMu.Unlock()
	p.gates[name] = &gate{match: match}
}

// Release writes the messages class name held back, in their order, and
// lets its later ones through.
func (p *LatencyProxy) Release(name string) {
	p.gateMu.Lock()
	defer p.gateMu.Unlock()
	g := p.gates[name]
	if g == nil {
		return
	}
	for _, h := range g.held {
		_, _ = h.dst.Write(h.frame)
	}
	delete(p.gates, name)
}

// pass writes a message to dst, or holds it back when a class accepts it.
func (p *LatencyProxy) pass(dst net.Conn, frame []byte) error {
	p.gateMu.Lock()
	defer p.gateMu.Unlock()
	for _, g := range p.gates {
		if g.match(frame) {
			g.held = append(g.held, heldFrame{dst: dst, frame: frame})
			return nil
		}
	}
	_, err := dst.Write(frame)
	return err
}

// readFrame reads one operation of the NATS protocol a server sends: a
// control line, or a MSG or HMSG line with its payload. payload is nil for
// a control line.
func readFrame(r *bufio.Reader) (frame, payload []byte, err error) {
	line, err := r.ReadBytes('\n')
	if err != nil {
		return nil, nil, err
	}
	fields := bytes.Fields(line)
	if len(fields) == 0 {
		return line, nil, nil
	}
	op := string(bytes.ToUpper(fields[0]))
	if op != "MSG" && op != "HMSG" {
		return line, nil, nil
	}
	var size int
	if _, err := fmt.Sscan(string(fields[len(fields)-1]), &size); err != nil || size < 0 {
		return nil, nil, fmt.Errorf("testutil: bad %s line %q", op, line)
	}
	frame = make([]byte, len(line)+size+2)
	copy(frame, line)
	if _, err := io.ReadFull(r, frame[len(line):]); err != nil {
		return nil, nil, err
	}
	return frame, frame[len(line) : len(line)+size], nil
}

// lateWriter is a connection's way to the client for a [StartLateProxy]:
// the frames delayed are written by run at their time, the others at once,
// one write at a time.
type lateWriter struct {
	net.Conn
	dst    net.Conn
	mu     sync.Mutex
	frames chan proxyChunk
}

func (w *lateWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.dst.Write(b)
}

func (w *lateWriter) Close() error { return w.dst.Close() }

// run writes the delayed frames, each at its time, until frames is closed.
func (w *lateWriter) run() {
	for c := range w.frames {
		if wait := time.Until(c.due); wait > 0 {
			time.Sleep(wait)
		}
		if _, err := w.Write(c.data); err != nil {
			for range w.frames {
			}
			return
		}
	}
}
