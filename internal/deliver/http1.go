package deliver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"sync"
	"syscall"
	"time"
)

// http1 sends plain-http requests over HTTP/1.1 connections of its own, on
// the caller's goroutine: it writes the request, reads the reply's head,
// and takes the connection back into its pool once the body has been read
// to its end.
//
// net/http's Transport gives every connection a reader and a writer
// goroutine and hands each request and reply between them and the caller.
// On loopback that costs about as much CPU as the request itself: a POST
// measured 39–49 µs of the client's CPU through the Transport against
// 22–26 µs written and read in place (64 in flight, a server in another
// process). The Transport keeps what this path cannot do as well (see
// [useHTTP1]): https, where TLS and HTTP/2 (many subscribers of one host on
// a few connections) are worth its price; bodies large enough that a
// server may answer before it has read them all; and host names it must
// first turn into ASCII.
type http1 struct {
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// maxIdle bounds the idle connections kept, in all (and so to one
	// host): when it is reached, the one idle longest is closed.
	maxIdle int
	// idleFor is how long an idle connection is kept.
	idleFor time.Duration
	// now is time.Now, but in tests.
	now func() time.Time

	mu sync.Mutex
	// idle holds each host's idle connections, the oldest first, and lru
	// all of them: both in the order they were put.
	idle map[string][]*conn1
	lru  lru1
	// sweep closes the connections idle for longer than idleFor, at the
	// time the oldest would pass it; armed while any is idle.
	sweep *time.Timer
}

// maxHTTP1Body is the largest body sent by http1. A server may answer a
// request before it has read the body (a 413 for a body it will not take)
// and read no more: http1 writes the whole request before it reads, and a
// write larger than the socket buffers would then wait for the attempt's
// deadline, where the Transport, reading as it writes, returns the reply.
// Webhook bodies are far smaller.
const maxHTTP1Body = 64 << 10

// maxResponseHeader bounds the head of a reply (status line and headers,
// informational replies before it included), as the Transport's
// MaxResponseHeaderBytes does: a subscriber sending headers without end
// gets an error, not relay's memory.
const maxResponseHeader = 64 << 10

// maxInformational bounds the 1xx replies read before the final one.
const maxInformational = 5

// errResponseHeaderTooLong is the error of a reply whose head passes
// maxResponseHeader.
var errResponseHeaderTooLong = errors.New("reply headers longer than 64 KiB")

// readers and writers hold the buffers of connections in use. An idle
// connection has nothing buffered (it is kept only then), so it gives its
// reader back, and a request's writer is needed only until it is flushed:
// the buffers in use follow the requests in flight, not the connections
// open, which with many subscribers behind one host run to thousands
// (8 KB each, and as much garbage for every connection opened).
var (
	readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, bufferSize) }}
	writers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, bufferSize) }}
)

// bufferSize is the size of a connection's reader and of a request's
// writer: bufio's default, as the Transport's.
const bufferSize = 4 << 10

// aLongTimeAgo is a deadline that has passed: set on a connection, it ends
// the read or write in progress.
var aLongTimeAgo = time.Unix(1, 0)

func newHTTP1(dial func(ctx context.Context, network, addr string) (net.Conn, error), maxIdle int, idleFor time.Duration) *http1 {
	return &http1{dial: dial, maxIdle: max(1, maxIdle), idleFor: idleFor, now: time.Now, idle: make(map[string][]*conn1)}
}

// useHTTP1 says whether req goes by http1 rather than the Transport: plain
// http, a body of at most maxHTTP1Body, and an ASCII host (the Transport
// turns an internationalised one into punycode).
func useHTTP1(req *http.Request) bool {
	if req.URL.Scheme != "http" || req.ContentLength > maxHTTP1Body || req.ContentLength < 0 {
		return false
	}
	for i := range len(req.URL.Host) {
		if req.URL.Host[i] >= 0x80 {
			return false
		}
	}
	return true
}

// conn1 is one HTTP/1.1 connection. Its reader reads through it, so that
// the head of a reply can be bounded.
type conn1 struct {
	nc   net.Conn
	addr string
	// br is the reader while the connection is in use, nil while it is
	// idle (see readers).
	br *bufio.Reader
	// limit is how many bytes the reader may still take from nc.
	limit int64
	// since is when it went idle; newer and older are its neighbours in
	// the pool's lru.
	since        time.Time
	newer, older *conn1
	// peek and what it found, for alive (made once per connection).
	raw     syscall.RawConn
	peek    func(fd uintptr) bool
	peekOK  bool
	peekBuf [1]byte
}

func (c *conn1) Read(p []byte) (int, error) {
	if c.limit <= 0 {
		return 0, errResponseHeaderTooLong
	}
	if int64(len(p)) > c.limit {
		p = p[:c.limit]
	}
	n, err := c.nc.Read(p)
	c.limit -= int64(n)
	return n, err
}

// roundTrip sends req and returns its reply. As with the Transport, a POST
// that fails once sent is not sent again within the attempt.
func (h *http1) roundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	if err := ended(ctx); err != nil {
		// Checked here, and again once the connection is watched: a
		// request whose attempt has ended is never sent.
		return nil, err
	}
	c, err := h.get(ctx, hostPort(req.URL))
	if err != nil {
		return nil, err
	}
	resp, err := h.exchange(c, req)
	if err != nil {
		c.close()
		if cerr := ended(ctx); cerr != nil {
			// Ended by the caller or the attempt's deadline, whatever the
			// read made of a reply cut short: said as the Transport says it.
			return nil, cerr
		}
		return nil, err
	}
	return resp, nil
}

// ended returns ctx's error, or DeadlineExceeded once its deadline has
// passed: the connection's deadline, the same, may end a read before the
// context's own timer fires.
func ended(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}

// exchange writes req on c and reads the head of its reply.
func (h *http1) exchange(c *conn1, req *http.Request) (resp *http.Response, err error) {
	ctx := req.Context()
	deadline, _ := ctx.Deadline()
	if err := c.nc.SetDeadline(deadline); err != nil {
		return nil, err
	}
	// The caller's cancellation ends the exchange as the deadline would.
	stop := context.AfterFunc(ctx, func() { _ = c.nc.SetDeadline(aLongTimeAgo) })
	defer func() {
		if err != nil {
			stop()
		}
	}()
	if err := ctx.Err(); err != nil {
		// Ended before the watch began: AfterFunc runs its function on a
		// goroutine of its own, which the write could outrun.
		return nil, err
	}
	bw := writers.Get().(*bufio.Writer)
	bw.Reset(c.nc)
	werr := req.Write(bw)
	if werr == nil {
		werr = bw.Flush()
	}
	bw.Reset(nil)
	writers.Put(bw)
	if werr != nil && !errors.As(werr, new(*net.OpError)) {
		// Refused before it reached the socket (an invalid header, say):
		// the server still waits for the request.
		return nil, werr
	}
	c.limit = maxResponseHeader
	for range maxInformational + 1 {
		resp, err = http.ReadResponse(c.br, req)
		if err != nil {
			if werr != nil {
				// No reply to say more than the write's own failure.
				return nil, werr
			}
			return nil, err
		}
		if resp.StatusCode < 100 || resp.StatusCode > 199 || resp.StatusCode == http.StatusSwitchingProtocols {
			c.limit = math.MaxInt64
			resp.Body = &body1{
				rc: resp.Body, c: c, h: h, stop: stop,
				eof: resp.ContentLength == 0 || resp.Body == http.NoBody,
				// A reply to a request not written to its end (a 413
				// before the body was read, say) leaves the connection in
				// no state to reuse.
				reuse: werr == nil && !resp.Close && !req.Close && resp.StatusCode != http.StatusSwitchingProtocols,
			}
			return resp, nil
		}
		// An informational reply (100 Continue, 103 Early Hints): the
		// final one follows.
	}
	return nil, fmt.Errorf("more than %d informational replies", maxInformational)
}

// body1 is a reply's body. Read to its end, it gives its connection back to
// the pool when closed; otherwise closing it closes the connection, which
// never reads the rest (a body without end would hold the attempt until its
// deadline).
type body1 struct {
	rc    io.ReadCloser
	c     *conn1
	h     *http1
	stop  func() bool
	eof   bool
	reuse bool
	done  bool
}

func (b *body1) Read(p []byte) (int, error) {
	if b.done {
		return 0, http.ErrBodyReadAfterClose
	}
	n, err := b.rc.Read(p)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

func (b *body1) Close() error {
	if b.done {
		return nil
	}
	b.done = true
	// stop fails once the caller's context has ended: the deadline may
	// then have been moved to the past, and the connection is done.
	stopped := b.stop()
	if b.eof && b.reuse && stopped && b.c.br.Buffered() == 0 && b.c.nc.SetDeadline(time.Time{}) == nil {
		b.h.put(b.c)
		return nil
	}
	return b.c.close()
}

// get returns an idle connection to addr, the most recent first, or dials
// one. An idle connection the server closed, or sent bytes on unasked, is
// closed instead.
func (h *http1) get(ctx context.Context, addr string) (*conn1, error) {
	for {
		h.mu.Lock()
		stale := h.expireLocked(h.now())
		var c *conn1
		if conns := h.idle[addr]; len(conns) > 0 {
			c = conns[len(conns)-1]
			conns[len(conns)-1] = nil
			h.setLocked(addr, conns[:len(conns)-1])
			h.lru.remove(c)
		}
		h.mu.Unlock()
		closeAll(stale)
		if c == nil {
			break
		}
		if c.alive() {
			c.takeReader()
			return c, nil
		}
		_ = c.nc.Close()
	}
	nc, err := h.dial(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	c := &conn1{nc: nc, addr: addr}
	c.takeReader()
	return c, nil
}

// takeReader gives c a reader for its next reply.
func (c *conn1) takeReader() {
	c.br = readers.Get().(*bufio.Reader)
	c.br.Reset(c)
}

// giveReader gives c's reader back: c is going idle with nothing buffered,
// or being closed, its reply read no further.
func (c *conn1) giveReader() {
	c.br.Reset(nil)
	readers.Put(c.br)
	c.br = nil
}

// close closes a connection in use, and gives its reader back: a
// subscriber that answers every request with Connection: close costs no
// buffer per request.
func (c *conn1) close() error {
	err := c.nc.Close()
	c.giveReader()
	return err
}

// put keeps c for the next request to its host. With the pool full, the
// connection idle longest makes room, as in the Transport: after a burst to
// one host, another host's connections are still kept.
func (h *http1) put(c *conn1) {
	c.giveReader()
	h.mu.Lock()
	now := h.now()
	stale := h.expireLocked(now)
	if h.lru.n >= h.maxIdle {
		stale = append(stale, h.removeOldestLocked())
	}
	c.since = now
	h.lru.push(c)
	h.idle[c.addr] = append(h.idle[c.addr], c)
	if h.sweep == nil {
		h.sweep = time.AfterFunc(h.idleFor, h.sweepIdle)
	} else if h.lru.n == 1 {
		h.sweep.Reset(h.idleFor)
	}
	h.mu.Unlock()
	closeAll(stale)
}

// sweepIdle closes the connections idle too long, and is armed again for
// the next one to be, if any: a host no longer sent to would otherwise keep
// them (the server closed its end long ago).
func (h *http1) sweepIdle() {
	h.mu.Lock()
	now := h.now()
	stale := h.expireLocked(now)
	if oldest := h.lru.oldest; oldest != nil {
		h.sweep.Reset(oldest.since.Add(h.idleFor).Sub(now) + time.Millisecond)
	}
	h.mu.Unlock()
	closeAll(stale)
}

// expireLocked takes out the connections idle for longer than idleFor, for
// the caller to close. The oldest are at the back of the lru: it stops at
// the first that is young enough.
func (h *http1) expireLocked(now time.Time) (stale []*conn1) {
	for h.lru.oldest != nil && now.Sub(h.lru.oldest.since) > h.idleFor {
		stale = append(stale, h.removeOldestLocked())
	}
	return stale
}

// removeOldestLocked takes the connection idle longest out of the pool. It
// was put before any other, so it is also the first of its host's.
func (h *http1) removeOldestLocked() *conn1 {
	c := h.lru.oldest
	h.lru.remove(c)
	conns := h.idle[c.addr]
	conns[0] = nil
	h.setLocked(c.addr, conns[1:])
	return c
}

// setLocked replaces addr's idle connections with conns.
func (h *http1) setLocked(addr string, conns []*conn1) {
	if len(conns) == 0 {
		delete(h.idle, addr)
		return
	}
	h.idle[addr] = conns
}

// lru1 lists the idle connections in the order they were put, through
// their own links: a list element allocated per put would be one more
// allocation per delivery.
type lru1 struct {
	newest, oldest *conn1
	n              int
}

func (l *lru1) push(c *conn1) {
	c.older, c.newer = l.newest, nil
	if l.newest != nil {
		l.newest.newer = c
	} else {
		l.oldest = c
	}
	l.newest = c
	l.n++
}

func (l *lru1) remove(c *conn1) {
	if c.newer != nil {
		c.newer.older = c.older
	} else {
		l.newest = c.older
	}
	if c.older != nil {
		c.older.newer = c.newer
	} else {
		l.oldest = c.newer
	}
	c.newer, c.older = nil, nil
	l.n--
}

// closeIdle closes every idle connection.
func (h *http1) closeIdle() {
	h.mu.Lock()
	var idle []*conn1
	for h.lru.n > 0 {
		idle = append(idle, h.removeOldestLocked())
	}
	if h.sweep != nil {
		h.sweep.Stop()
	}
	h.mu.Unlock()
	closeAll(idle)
}

func closeAll(cs []*conn1) {
	for _, c := range cs {
		_ = c.nc.Close()
	}
}

// hostPort is the address to dial for u, an http URL: its host, with port
// 80 unless it names one.
func hostPort(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	return net.JoinHostPort(u.Hostname(), "80")
}
