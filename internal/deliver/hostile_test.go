package deliver

import (
	"bufio"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Hostile receivers: each test sends one attempt through the real Client to a
// subscriber that misbehaves on purpose, and checks that the attempt ends
// within its timeout (the test's own guard is ten times the timeout, to fail
// rather than hang), that its outcome has the class the delivery rules give
// it, and that no connection is left open once it is over. Goroutine leaks
// are caught by goleak.VerifyTestMain in main_test.go: these tests run in
// parallel, so a per-test goleak.VerifyNone would see its neighbours'.

const (
	// hostileTimeout is the attempt's timeout in these tests.
	hostileTimeout = 200 * time.Millisecond
	// hostileGuard is how long a test waits for anything before failing.
	hostileGuard = 10 * hostileTimeout
	// trickleEvery is the pace of a server that sends one byte at a time.
	trickleEvery = 100 * time.Millisecond
	// wireBound is more than a client that stops at its body limit can
	// make a server write: the limit plus what the kernel's socket buffers
	// on both sides take in before the writes block.
	wireBound = 64 << 20
)

// rawServer is a TCP listener on loopback whose connections are served by a
// function of the test's, for receivers that no well-behaved HTTP server
// would be. Everything it starts ends with the test.
type rawServer struct {
	ln      net.Listener
	quit    chan struct{}
	wg      sync.WaitGroup
	mu      sync.Mutex
	conns   []net.Conn
	written atomic.Int64
	// ended receives, for each connection, the error that ended its serve
	// function (nil when it returned by itself).
	ended chan error
}

func startRawServer(t *testing.T, serve func(s *rawServer, c net.Conn, br *bufio.Reader) error) *rawServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &rawServer{ln: ln, quit: make(chan struct{}), ended: make(chan error, 64)}
	s.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			s.wg.Go(func() {
				defer c.Close()
				err := serve(s, c, bufio.NewReader(c))
				select {
				case s.ended <- err:
				default:
				}
			})
		}
	})
	t.Cleanup(func() {
		close(s.quit)
		_ = ln.Close()
		s.mu.Lock()
		for _, c := range s.conns {
			_ = c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func (s *rawServer) url(scheme string) string { return scheme + "://" + s.ln.Addr().String() + "/hook" }

// write writes p and counts what went out.
func (s *rawServer) write(c net.Conn, p []byte) error {
	n, err := c.Write(p)
	s.written.Add(int64(n))
	return err
}

// trickle writes prefix and then filler for ever, one byte every
// trickleEvery, until a write fails or the test ends.
func (s *rawServer) trickle(c net.Conn, prefix string, filler byte) error {
	tick := time.NewTicker(trickleEvery)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-s.quit:
			return nil
		case <-tick.C:
		}
		b := filler
		if i < len(prefix) {
			b = prefix[i]
		}
		if err := s.write(c, []byte{b}); err != nil {
			return err
		}
	}
}

// answer reads one request off br and writes head, the start of its reply,
// to c.
func (s *rawServer) answer(c net.Conn, br *bufio.Reader, head string) error {
	if err := readRequest(br); err != nil {
		return err
	}
	return s.write(c, []byte(head))
}

// flood writes p again and again, as fast as the wire takes it, until a
// write fails or the test ends.
func (s *rawServer) flood(c net.Conn, p []byte) error {
	for {
		select {
		case <-s.quit:
			return nil
		default:
		}
		if err := s.write(c, p); err != nil {
			return err
		}
	}
}

// readRequest reads one HTTP request and its body off br.
func readRequest(br *bufio.Reader) error {
	req, err := http.ReadRequest(br)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, req.Body)
	_ = req.Body.Close()
	return err
}

// untilClosed reads and drops whatever comes until the peer closes (or the
// test ends): a server that never answers.
func untilClosed(br *bufio.Reader) error {
	_, err := io.Copy(io.Discard, br)
	return err
}

// zeros is an endless reader of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// sendWithin makes one attempt and fails the test if it has not returned
// within ten times its timeout.
func sendWithin(t *testing.T, c *Client, r Request) Outcome {
	t.Helper()
	if r.ID == "" {
		r.ID = "evt_hostile"
	}
	if r.Timeout == 0 {
		r.Timeout = hostileTimeout
	}
	guard := 10 * r.Timeout
	done := make(chan Outcome, 1)
	go func() { done <- c.Send(t.Context(), r) }()
	select {
	case o := <-done:
		return o
	case <-time.After(guard):
		t.Fatalf("the attempt with a timeout of %s has not returned after %s", r.Timeout, guard)
		return Outcome{}
	}
}

// requireNoConnLeft checks that the client holds no connection to addr.
// One that may be reused (a complete reply) can wait in the idle pool, so
// the pool is emptied first; one that failed must be closed without that,
// since nothing else would ever close it.
func requireNoConnLeft(t *testing.T, c *Client, addr string, reusable bool) {
	t.Helper()
	if runtime.GOOS != "linux" {
		return
	}
	if reusable {
		c.CloseIdleConnections()
	}
	eventually(t, func() error { return noSocketsTo(addr) })
	if !reusable {
		// And nothing appears once the pool is emptied either.
		c.CloseIdleConnections()
		n, err := socketsTo(addr)
		require.NoError(t, err)
		require.Zero(t, n)
	}
}

// noSocketsTo says how many sockets to addr are open, if any.
func noSocketsTo(addr string) error {
	n, err := socketsTo(addr)
	if err != nil || n == 0 {
		return err
	}
	return fmt.Errorf("%d sockets to %s still open", n, addr)
}

// eventually polls cond until it returns nil, and fails the test with its
// last error if that takes longer than hostileGuard.
func eventually(t *testing.T, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(hostileGuard)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %v", hostileGuard, err)
		}
		time.Sleep(5 * time.Millisecond) // polling a condition, not waiting for one
	}
}

// socketsTo counts this process's file descriptors that are TCP sockets
// connected to addr, an IPv4 "ip:port" (Linux only: /proc/self/net/tcp
// names each socket's peer and inode, /proc/self/fd its descriptors). The
// tests run in parallel, each with its own servers, so counting every
// descriptor of the process before and after would count the neighbours';
// counting the sockets whose peer is the test's own server is exact.
func socketsTo(addr string) (int, error) {
	ap, err := net.ResolveTCPAddr("tcp4", addr)
	if err != nil {
		return 0, err
	}
	ip4 := ap.IP.To4()
	if ip4 == nil {
		return 0, fmt.Errorf("%s is not IPv4", addr)
	}
	// /proc prints the address as the 32-bit word in host byte order.
	want := fmt.Sprintf("%08X:%04X", binary.NativeEndian.Uint32(ip4), ap.Port)
	table, err := os.ReadFile("/proc/self/net/tcp")
	if err != nil {
		return 0, err
	}
	inodes := map[string]bool{}
	for _, line := range strings.Split(string(table), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 10 || f[2] != want || f[9] == "0" {
			continue
		}
		inodes["socket:["+f[9]+"]"] = true
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0, err
	}
	n := 0
	for _, fd := range fds {
		if target, err := os.Readlink("/proc/self/fd/" + fd.Name()); err == nil && inodes[target] {
			n++
		}
	}
	return n, nil
}

// 1. The status line comes one byte every 100 ms, for ever: the attempt's
// timeout ends it, a timeout is the subscriber being slow (retryable).
func TestHostileSlowHeaders(t *testing.T) {
	t.Parallel()
	srv := startRawServer(t, func(s *rawServer, c net.Conn, br *bufio.Reader) error {
		if err := readRequest(br); err != nil {
			return err
		}
		return s.trickle(c, "HTTP/1.1 200 OK", 'K')
	})
	c := newTestClient(t)
	o := sendWithin(t, c, Request{URL: srv.url("http"), Body: []byte("{}")})
	require.Equal(t, Retryable, o.Class, "err: %v", o.Err)
	require.ErrorIs(t, o.Err, ErrTimeout)
	require.Zero(t, o.Status, "no status line ever ended")
	requireNoConnLeft(t, c, srv.ln.Addr().String(), false)
}

// 2. The headers come at once, then the body one byte every 100 ms, never
// ending. The status has decided the outcome before the body is read
// (client.go's drain: read errors do not matter), so a 2xx is delivered and
// a 503 retryable; either way the timeout, which covers reading the reply,
// ends the attempt, and the connection, its body unfinished, is closed.
func TestHostileSlowBody(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		status int
		want   Class
	}{
		{http.StatusOK, Delivered},
		{http.StatusServiceUnavailable, Retryable},
	} {
		t.Run(strconv.Itoa(tt.status), func(t *testing.T) {
			t.Parallel()
			srv := startRawServer(t, func(s *rawServer, c net.Conn, br *bufio.Reader) error {
				head := fmt.Sprintf("HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: 1000000\r\n\r\n",
					tt.status, http.StatusText(tt.status))
				if err := s.answer(c, br, head); err != nil {
					return err
				}
				return s.trickle(c, "", '.')
			})
			c := newTestClient(t)
			o := sendWithin(t, c, Request{URL: srv.url("http"), Body: []byte("{}")})
			require.Equal(t, tt.want, o.Class, "err: %v", o.Err)
			require.Equal(t, tt.status, o.Status)
			if tt.want != Delivered {
				require.ErrorIs(t, o.Err, ErrStatus)
			}
			requireNoConnLeft(t, c, srv.ln.Addr().String(), false)
		})
	}
}

// 3. A 2xx whose chunked body never ends, sent as fast as the wire takes
// it. The client reads its body limit (DefaultMaxResponseBody) and closes;
// the status was a 2xx, and client.go classifies by the status alone (the
// body is "read up to 64 KiB and dropped", docs/design.md), so it is delivered.
func TestHostileEndlessBody(t *testing.T) {
	t.Parallel()
	srv := startRawServer(t, func(s *rawServer, c net.Conn, br *bufio.Reader) error {
		if err := s.answer(c, br, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"); err != nil {
			return err
		}
		return s.flood(c, append([]byte(fmt.Sprintf("%x\r\n", 32<<10)), append(make([]byte, 32<<10), "\r\n"...)...))
	})
	c := newTestClient(t)
	o := sendWithin(t, c, Request{URL: srv.url("http"), Body: []byte("{}")})
	require.Equal(t, Delivered, o.Class, "err: %v", o.Err)
	require.Len(t, o.Body, maxOutcomeBody)
	requireServerStopped(t, srv)
	require.Less(t, srv.written.Load(), int64(wireBound), "the client stops reading at its limit")
	requireNoConnLeft(t, c, srv.ln.Addr().String(), false)
}

// requireServerStopped waits until the server's writes failed: the client
// closed the connection rather than leaving it to fill.
func requireServerStopped(t *testing.T, srv *rawServer) {
	t.Helper()
	select {
	case err := <-srv.ended:
		require.Error(t, err, "the server's writes fail once the client closes")
	case <-time.After(hostileGuard):
		t.Fatalf("the server is still writing after %s: %d bytes so far", hostileGuard, srv.written.Load())
	}
}

// 4. The reply is not HTTP at all, and the server then keeps the
// connection open: a reply that is not HTTP is a connection failure,
// retryable, found at once rather than at the timeout.
func TestHostileInvalidHTTP(t *testing.T) {
	t.Parallel()
	srv := startRawServer(t, func(s *rawServer, c net.Conn, br *bufio.Reader) error {
		if err := s.answer(c, br, "garbage\r\n\r\n"); err != nil {
			return err
		}
		return untilClosed(br)
	})
	c := newTestClient(t)
	o := sendWithin(t, c, Request{URL: srv.url("http"), Body: []byte("{}")})
	require.Equal(t, Retryable, o.Class, "err: %v", o.Err)
	require.ErrorIs(t, o.Err, ErrConnection)
	require.NotErrorIs(t, o.Err, ErrTimeout, "the garbage is refused when it arrives")
	require.Zero(t, o.Status)
	requireNoConnLeft(t, c, srv.ln.Addr().String(), false)
}

// 5. An https URL whose server accepts the connection and never says a
// word: the TLS handshake never finishes. The attempt's timeout ends it
// (retryable), and the half-open connection must go with the attempt, not
// linger until the transport's own handshake timeout.
func TestHostileTLSHandshakeNeverFinishes(t *testing.T) {
	t.Parallel()
	srv := startRawServer(t, func(_ *rawServer, _ net.Conn, br *bufio.Reader) error {
		return untilClosed(br)
	})
	c := newTestClient(t)
	o := sendWithin(t, c, Request{URL: srv.url("https"), Body: []byte("{}")})
	require.Equal(t, Retryable, o.Class, "err: %v", o.Err)
	require.ErrorIs(t, o.Err, ErrTimeout)
	require.Zero(t, o.Status)
	requireNoConnLeft(t, c, srv.ln.Addr().String(), false)
}

// 6. A certificate the client does not trust (httptest's self-signed one):
// a connection failure, so retryable (docs/design.md: "connection failure" is
// retried; a certificate gets fixed or renewed, and dead-lettering at once
// would lose every event of the hours that takes), with an error that
// names the certificate problem for the dead letter and the log.
func TestHostileCertificateError(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	// The server logs every refused handshake; the refusal is the point.
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)

	c := newTestClient(t)
	// A longer timeout than the others': the first verification loads the
	// system's roots, which under the race detector can take a while, and
	// the point here is the verdict, not the clock.
	o := sendWithin(t, c, Request{URL: srv.URL + "/hook", Body: []byte("{}"), Timeout: 10 * hostileTimeout})
	require.Equal(t, Retryable, o.Class, "err: %v", o.Err)
	require.ErrorIs(t, o.Err, ErrConnection)
	require.NotErrorIs(t, o.Err, ErrTimeout)
	var certErr *tls.CertificateVerificationError
	require.ErrorAs(t, o.Err, &certErr)
	require.Contains(t, o.Err.Error(), "certificate")
	require.Zero(t, hits.Load(), "nothing is sent over a connection that failed verification")
	requireNoConnLeft(t, c, srv.Listener.Addr().String(), false)
}

// 7. Redirects are never followed: each is dead-lettered at once, reason
// rejected (docs/design.md, "any other 4xx, or a redirect"), and the target never
// sees the request. A redirect is a complete reply, so its connection may
// wait in the pool.
func TestHostileRedirects(t *testing.T) {
	t.Parallel()
	for _, status := range []int{http.StatusMovedPermanently, http.StatusFound, http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			t.Parallel()
			var targetHits atomic.Int32
			target := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { targetHits.Add(1) }))
			t.Cleanup(target.Close)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, target.URL+"/elsewhere", status)
			}))
			t.Cleanup(srv.Close)

			c := newTestClient(t)
			o := sendWithin(t, c, Request{URL: srv.URL + "/hook", Body: []byte("{}")})
			require.Equal(t, Rejected, o.Class, "err: %v", o.Err)
			require.Equal(t, status, o.Status)
			require.ErrorIs(t, o.Err, ErrStatus)
			require.Zero(t, targetHits.Load(), "the redirect is not followed")
			requireNoConnLeft(t, c, srv.Listener.Addr().String(), true)
			requireNoConnLeft(t, c, target.Listener.Addr().String(), true)
		})
	}
}

// 8. The server reads the request and then says nothing, keeping the
// connection open: the timeout ends the attempt, retryable.
func TestHostileNeverAnswers(t *testing.T) {
	t.Parallel()
	srv := startRawServer(t, func(_ *rawServer, _ net.Conn, br *bufio.Reader) error {
		if err := readRequest(br); err != nil {
			return err
		}
		return untilClosed(br)
	})
	c := newTestClient(t)
	o := sendWithin(t, c, Request{URL: srv.url("http"), Body: []byte("{}")})
	require.Equal(t, Retryable, o.Class, "err: %v", o.Err)
	require.ErrorIs(t, o.Err, ErrTimeout)
	require.Zero(t, o.Status)
	select {
	case err := <-srv.ended:
		require.True(t, err == nil || errors.Is(err, net.ErrClosed) || isConnReset(err), "the server sees the connection closed: %v", err)
	case <-time.After(hostileGuard):
		t.Fatal("the client has not closed the connection of the attempt that timed out")
	}
	requireNoConnLeft(t, c, srv.ln.Addr().String(), false)
}

func isConnReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op)
}

// 9. A 200 announcing a gigabyte (Content-Length: 1073741824) and sending
// it as fast as it can: the client reads its limit and closes, and the
// server gets nowhere near a gigabyte out. The status was a 2xx, so it is
// delivered, as in case 3.
func TestHostileGigabyteReply(t *testing.T) {
	t.Parallel()
	const gigabyte = 1 << 30
	srv := startRawServer(t, func(s *rawServer, c net.Conn, br *bufio.Reader) error {
		if err := s.answer(c, br, "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: "+strconv.Itoa(gigabyte)+"\r\n\r\n"); err != nil {
			return err
		}
		n, err := io.Copy(c, io.LimitReader(zeros{}, gigabyte))
		s.written.Add(n)
		if err == nil {
			return errors.New("the whole gigabyte went out")
		}
		return err
	})
	c := newTestClient(t)
	o := sendWithin(t, c, Request{URL: srv.url("http"), Body: []byte("{}")})
	require.Equal(t, Delivered, o.Class, "err: %v", o.Err)
	require.Len(t, o.Body, maxOutcomeBody)
	requireServerStopped(t, srv)
	require.Less(t, srv.written.Load(), int64(wireBound), "the client stops reading at its limit")
	requireNoConnLeft(t, c, srv.ln.Addr().String(), false)
}
