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
// process). https keeps the Transport, where TLS and HTTP/2 (many
// subscribers of one host on a few connections) are worth its price.
type http1 struct {
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// maxIdle bounds the idle connections kept, in all (and so to one host).
	maxIdle int
	// idleFor is how long an idle connection is kept.
	idleFor time.Duration
	// now is time.Now, but in tests.
	now func() time.Time

	mu sync.Mutex
	// idle holds each host's idle connections, the oldest first.
	idle  map[string][]*conn1
	nidle int
	// swept is when the idle connections were last checked for age.
	swept time.Time
}

// maxResponseHeader bounds the head of a reply (status line and headers), as
// the Transport's MaxResponseHeaderBytes does: a subscriber sending headers
// without end gets an error, not relay's memory.
const maxResponseHeader = 64 << 10

// maxInformational bounds the 1xx replies read before the final one.
const maxInformational = 5

// errResponseHeaderTooLong is the error of a reply whose head passes
// maxResponseHeader.
var errResponseHeaderTooLong = errors.New("reply headers longer than 64 KiB")

// aLongTimeAgo is a deadline that has passed: set on a connection, it ends
// the read or write in progress.
var aLongTimeAgo = time.Unix(1, 0)

func newHTTP1(dial func(ctx context.Context, network, addr string) (net.Conn, error), maxIdle int, idleFor time.Duration) *http1 {
	return &http1{dial: dial, maxIdle: maxIdle, idleFor: idleFor, now: time.Now, idle: make(map[string][]*conn1)}
}

// conn1 is one HTTP/1.1 connection. Its reader reads through it, so that
// the head of a reply can be bounded.
type conn1 struct {
	nc net.Conn
	br *bufio.Reader
	bw *bufio.Writer
	// limit is how many bytes the reader may still take from nc.
	limit int64
	// since is when it went idle.
	since time.Time
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

// roundTrip sends req and returns its reply. A reused connection that
// fails before a byte of the reply came (the server closed it as it went
// idle) is given up for a new one, once: the request may have reached the
// subscriber, but the caller would otherwise send it again later, and the
// subscriber deduplicates by webhook-id.
func (h *http1) roundTrip(req *http.Request) (*http.Response, error) {
	addr := hostPort(req.URL)
	for retried := false; ; retried = true {
		c, reused, err := h.get(req.Context(), addr)
		if err != nil {
			return nil, err
		}
		resp, early, err := h.exchange(c, addr, req)
		if err == nil {
			return resp, nil
		}
		_ = c.nc.Close()
		if cerr := ended(req.Context()); cerr != nil {
			// Ended by the caller or the attempt's deadline, whatever the
			// read made of a reply cut short: said as the Transport says it.
			return nil, cerr
		}
		if !early || !reused || retried || isTimeout(err) || req.GetBody == nil {
			return nil, err
		}
		body, berr := req.GetBody()
		if berr != nil {
			return nil, err
		}
		req.Body = body
	}
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

// exchange writes req on c, a connection to addr, and reads the head of its
// reply. early reports an error met before any byte of the reply arrived.
func (h *http1) exchange(c *conn1, addr string, req *http.Request) (resp *http.Response, early bool, err error) {
	ctx := req.Context()
	deadline, _ := ctx.Deadline()
	if err := c.nc.SetDeadline(deadline); err != nil {
		return nil, true, err
	}
	// The caller's cancellation ends the exchange as the deadline would.
	stop := context.AfterFunc(ctx, func() { _ = c.nc.SetDeadline(aLongTimeAgo) })
	defer func() {
		if err != nil {
			stop()
		}
	}()
	if err := req.Write(c.bw); err != nil {
		return nil, true, err
	}
	if err := c.bw.Flush(); err != nil {
		return nil, true, err
	}
	for range maxInformational + 1 {
		c.limit = maxResponseHeader
		if _, err := c.br.Peek(1); err != nil {
			return nil, resp == nil, err
		}
		resp, err = http.ReadResponse(c.br, req)
		if err != nil {
			return nil, false, err
		}
		c.limit = math.MaxInt64
		if resp.StatusCode < 100 || resp.StatusCode > 199 || resp.StatusCode == http.StatusSwitchingProtocols {
			resp.Body = &body1{
				rc: resp.Body, c: c, h: h, stop: stop, addr: addr,
				eof:   resp.ContentLength == 0 || resp.Body == http.NoBody,
				reuse: !resp.Close && !req.Close && resp.StatusCode != http.StatusSwitchingProtocols,
			}
			return resp, false, nil
		}
		// An informational reply (100 Continue, 103 Early Hints): the
		// final one follows.
	}
	return nil, false, fmt.Errorf("more than %d informational replies", maxInformational)
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
	addr  string
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
		b.h.put(b.addr, b.c)
		return nil
	}
	return b.c.nc.Close()
}

// get returns an idle connection to addr, the most recent first, or dials
// one. An idle connection the server closed, or sent bytes on unasked, is
// closed instead.
func (h *http1) get(ctx context.Context, addr string) (c *conn1, reused bool, err error) {
	for {
		now := h.now()
		h.mu.Lock()
		stale := h.sweepLocked(now)
		c = nil
		if list := h.idle[addr]; len(list) > 0 {
			c = list[len(list)-1]
			list[len(list)-1] = nil
			h.nidle--
			if len(list) == 1 {
				delete(h.idle, addr)
			} else {
				h.idle[addr] = list[:len(list)-1]
			}
		}
		h.mu.Unlock()
		for _, s := range stale {
			_ = s.nc.Close()
		}
		if c == nil {
			break
		}
		if now.Sub(c.since) <= h.idleFor && alive(c.nc) {
			return c, true, nil
		}
		_ = c.nc.Close()
	}
	nc, err := h.dial(ctx, "tcp", addr)
	if err != nil {
		return nil, false, err
	}
	c = &conn1{nc: nc}
	c.br = bufio.NewReader(c)
	c.bw = bufio.NewWriter(nc)
	return c, false, nil
}

// put keeps c for the next request to addr, or closes it when the pool is
// full.
func (h *http1) put(addr string, c *conn1) {
	c.since = h.now()
	h.mu.Lock()
	if h.nidle >= h.maxIdle {
		h.mu.Unlock()
		_ = c.nc.Close()
		return
	}
	h.idle[addr] = append(h.idle[addr], c)
	h.nidle++
	h.mu.Unlock()
}

// sweepLocked takes out, at most every idleFor/4, the connections idle for
// longer than idleFor, for the caller to close: a host no longer sent to
// would otherwise keep them (the server has closed its end long ago). The
// sweep walks every idle connection, but only a few times per idleFor.
func (h *http1) sweepLocked(now time.Time) (stale []*conn1) {
	if now.Sub(h.swept) < h.idleFor/4 {
		return nil
	}
	h.swept = now
	for addr, list := range h.idle {
		n := 0
		for n < len(list) && now.Sub(list[n].since) > h.idleFor {
			n++
		}
		if n == 0 {
			continue
		}
		stale = append(stale, list[:n]...)
		h.nidle -= n
		if n == len(list) {
			delete(h.idle, addr)
			continue
		}
		h.idle[addr] = append(list[:0:0], list[n:]...)
	}
	return stale
}

// closeIdle closes every idle connection.
func (h *http1) closeIdle() {
	h.mu.Lock()
	idle := h.idle
	h.idle = make(map[string][]*conn1)
	h.nidle = 0
	h.mu.Unlock()
	for _, list := range idle {
		for _, c := range list {
			_ = c.nc.Close()
		}
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
