package deliver

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The plain-http path (http1.go): relay's own HTTP/1.1 connections, with the
// care net/http's Transport takes of them: a connection is reused only when
// its reply was read to the end and nothing else came on it, and one the
// server closed while it was idle costs no attempt.

// countingServer starts a test server of h that counts the connections it
// accepts.
func countingServer(t *testing.T, h http.HandlerFunc) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			n.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &n
}

func sendOK(t *testing.T, c *Client, url string) Outcome {
	t.Helper()
	o := sendWithin(t, c, Request{URL: url, Body: []byte(`{"n":1}`), Timeout: 5 * time.Second})
	require.Equal(t, Delivered, o.Class, "err: %v", o.Err)
	return o
}

// A connection the server closed while idle (its keep-alive timeout) is
// replaced by a new one: the request is delivered, not failed.
func TestHTTP1ReplacesAConnectionTheServerClosed(t *testing.T) {
	t.Parallel()
	if !peeks {
		t.Skip("an idle connection cannot be peeked at on " + runtime.GOOS)
	}
	srv, opened := countingServer(t, func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})
	c := newTestClient(t)
	sendOK(t, c, srv.URL)
	srv.CloseClientConnections()
	sendOK(t, c, srv.URL)
	require.EqualValues(t, 2, opened.Load())
}

// A POST that fails once sent is not sent again within the attempt, as
// with the Transport: a server that closes a reused connection on the
// request it read gets it once, and the attempt fails.
func TestHTTP1NeverSendsAPOSTTwice(t *testing.T) {
	t.Parallel()
	var requests, conns atomic.Int64
	srv := startRawServer(t, func(s *rawServer, c net.Conn, br *bufio.Reader) error {
		conns.Add(1)
		for i := 0; ; i++ {
			if err := readRequest(br); err != nil {
				return nil
			}
			requests.Add(1)
			if i > 0 {
				return nil // closed without a word
			}
			if err := s.write(c, []byte("HTTP/1.1 204 No Content\r\n\r\n")); err != nil {
				return err
			}
		}
	})
	c := newTestClient(t)
	sendOK(t, c, srv.url("http"))
	o := sendWithin(t, c, Request{URL: srv.url("http"), Body: []byte("{}"), Timeout: 5 * time.Second})
	require.Equal(t, Retryable, o.Class, "err: %v", o.Err)
	require.ErrorIs(t, o.Err, ErrConnection)
	require.EqualValues(t, 2, requests.Load())
	require.EqualValues(t, 1, conns.Load())
}

// A server may answer before it has read the body (a 413 for a body it
// will not take, as net/http's server does) and close: the reply is what
// counts, whichever way the request went (bodies over maxHTTP1Body go
// through the Transport).
func TestHTTP1TakesAReplySentBeforeTheBodyWasRead(t *testing.T) {
	t.Parallel()
	for _, size := range []int{maxHTTP1Body, 8 << 20} {
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			t.Parallel()
			srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
				if r.ContentLength > 1000 {
					w.WriteHeader(http.StatusRequestEntityTooLarge)
					return
				}
				w.WriteHeader(http.StatusNoContent)
			})
			c := newTestClient(t)
			sendOK(t, c, srv.URL) // a connection to reuse
			for range 3 {
				o := sendWithin(t, c, Request{URL: srv.URL, Body: make([]byte, size), Timeout: 5 * time.Second})
				require.Equal(t, Rejected, o.Class, "err: %v", o.Err)
				require.Equal(t, http.StatusRequestEntityTooLarge, o.Status)
			}
			sendOK(t, c, srv.URL)
		})
	}
}

// A request whose attempt has already ended is not sent, however warm
// the pool.
func TestHTTP1SendsNothingForAnEndedAttempt(t *testing.T) {
	t.Parallel()
	var got atomic.Int64
	srv, _ := countingServer(t, func(w http.ResponseWriter, _ *http.Request) {
		got.Add(1)
		w.WriteHeader(http.StatusNoContent)
	})
	c := newTestClient(t)
	sendOK(t, c, srv.URL)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	for range 50 {
		o := c.Send(ctx, Request{URL: srv.URL, ID: "evt", Body: []byte("{}"), Timeout: 5 * time.Second})
		require.Equal(t, Local, o.Class, "err: %v", o.Err)
		require.ErrorIs(t, o.Err, context.Canceled)
	}
	sendOK(t, c, srv.URL)
	require.EqualValues(t, 2, got.Load())
}

// With the pool full, the connection idle longest makes room: after a
// burst to one host, another host's connection is still kept.
func TestHTTP1FullPoolLetsTheOldestGo(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	arrived, release := 0, make(chan struct{})
	a, _ := countingServer(t, func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		if arrived++; arrived == 2 {
			close(release)
		}
		mu.Unlock()
		select {
		case <-release:
		case <-time.After(hostileGuard):
		}
		w.WriteHeader(http.StatusNoContent)
	})
	b, openedB := countingServer(t, func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})
	c := newTestClient(t, WithIdleConns(2))
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() { sendOK(t, c, a.URL) })
	}
	wg.Wait()
	for range 10 {
		sendOK(t, c, b.URL)
	}
	require.EqualValues(t, 1, openedB.Load())
}

// Idle connections are closed once idle for idleFor, with no request to
// notice: a host no longer sent to keeps none.
func TestHTTP1ClosesIdleConnectionsWithoutTraffic(t *testing.T) {
	t.Parallel()
	srv, _ := countingServer(t, func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})
	var d net.Dialer
	h := newHTTP1(d.DialContext, 16, 50*time.Millisecond)
	t.Cleanup(h.closeIdle)
	for range 3 {
		post(t, h, srv.URL)
	}
	require.Equal(t, 1, idleCount(h))
	eventually(t, func() error {
		if n := idleCount(h); n > 0 {
			return fmt.Errorf("%d connections idle for more than %s are kept", n, h.idleFor)
		}
		if runtime.GOOS != "linux" {
			return nil
		}
		return noSocketsTo(srv.Listener.Addr().String())
	})
}

func TestUseHTTP1(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		url  string
		body int
		want bool
	}{
		{"http://a.example/x", 200, true},
		{"http://a.example/x", 0, true},
		{"http://a.example/x", maxHTTP1Body, true},
		{"http://a.example/x", maxHTTP1Body + 1, false},
		{"https://a.example/x", 200, false},
		{"http://bücher.example/x", 200, false},
		{"http://b%C3%BCcher.example/x", 200, false},
		{"http://[::1]:8080/x", 200, true},
	} {
		req, err := http.NewRequest(http.MethodPost, tt.url, bytes.NewReader(make([]byte, tt.body)))
		require.NoError(t, err)
		require.Equal(t, tt.want, useHTTP1(req), "%s, %d bytes", tt.url, tt.body)
	}
}

// Bytes that come after a reply, unasked, would be read as the reply to
// the next request on that connection: the connection is dropped instead.
func TestHTTP1DropsAConnectionWithBytesNobodyAskedFor(t *testing.T) {
	t.Parallel()
	var conns atomic.Int64
	srv := startRawServer(t, func(s *rawServer, c net.Conn, br *bufio.Reader) error {
		conns.Add(1)
		for {
			if err := readRequest(br); err != nil {
				return nil
			}
			if err := s.write(c, []byte("HTTP/1.1 204 No Content\r\n\r\nHTTP/1.1 500 Surprise\r\n\r\n")); err != nil {
				return err
			}
		}
	})
	c := newTestClient(t)
	sendOK(t, c, srv.url("http"))
	sendOK(t, c, srv.url("http"))
	require.EqualValues(t, 2, conns.Load())
}

// A reply whose head never ends is refused at 64 KiB, at once and as a
// connection failure, and the connection closed: the subscriber does not
// get to fill relay's memory until the timeout.
func TestHTTP1BoundsTheHeadOfAReply(t *testing.T) {
	t.Parallel()
	srv := startRawServer(t, func(s *rawServer, c net.Conn, br *bufio.Reader) error {
		if err := s.answer(c, br, "HTTP/1.1 200 OK\r\n"); err != nil {
			return err
		}
		return s.flood(c, []byte("X-Filler: "+strings.Repeat("a", 1000)+"\r\n"))
	})
	c := newTestClient(t)
	o := sendWithin(t, c, Request{URL: srv.url("http"), Body: []byte("{}"), Timeout: 5 * time.Second})
	require.Equal(t, Retryable, o.Class, "err: %v", o.Err)
	require.ErrorIs(t, o.Err, ErrConnection)
	require.NotErrorIs(t, o.Err, ErrTimeout)
	requireServerStopped(t, srv)
	require.Less(t, srv.written.Load(), int64(wireBound))
	requireNoConnLeft(t, c, srv.ln.Addr().String(), false)
}

// Informational replies (100 Continue, 103 Early Hints) are skipped for the
// final one, up to a bound.
func TestHTTP1SkipsInformationalReplies(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		before int
		want   Class
	}{
		{"two, then 204", 2, Delivered},
		{"as many as allowed", maxInformational, Delivered},
		{"one too many", maxInformational + 1, Retryable},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := startRawServer(t, func(s *rawServer, c net.Conn, br *bufio.Reader) error {
				reply := strings.Repeat("HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n", tt.before) +
					"HTTP/1.1 204 No Content\r\n\r\n"
				if err := s.answer(c, br, reply); err != nil {
					return err
				}
				return untilClosed(br)
			})
			c := newTestClient(t)
			o := sendWithin(t, c, Request{URL: srv.url("http"), Body: []byte("{}"), Timeout: 5 * time.Second})
			require.Equal(t, tt.want, o.Class, "err: %v", o.Err)
			if tt.want == Delivered {
				require.Equal(t, http.StatusNoContent, o.Status)
			} else {
				require.ErrorIs(t, o.Err, ErrConnection)
			}
		})
	}
}

// A connection is reused only after a reply read to its end on a
// connection the server keeps open.
func TestHTTP1ReusesOnlyWhatCanBeReused(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		handler http.HandlerFunc
		opts    []Option
		want    int64 // connections for two requests
	}{
		{"a short reply", func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, "ok")
		}, nil, 1},
		{"a chunked reply", func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, "ok")
			w.(http.Flusher).Flush()
			_, _ = io.WriteString(w, "and more")
		}, nil, 1},
		{"Connection: close", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Connection", "close")
			w.WriteHeader(http.StatusNoContent)
		}, nil, 2},
		{"a reply longer than what is read of it", func(w http.ResponseWriter, _ *http.Request) {
			_, _ = w.Write(make([]byte, 4096))
		}, []Option{WithMaxResponseBody(1024)}, 2},
		{"an empty reply with nothing read of it", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusNoContent)
		}, []Option{WithMaxResponseBody(0)}, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv, opened := countingServer(t, tt.handler)
			c := newTestClient(t, tt.opts...)
			sendOK(t, c, srv.URL)
			sendOK(t, c, srv.URL)
			require.Equal(t, tt.want, opened.Load())
		})
	}
}

// An idle connection holds no buffer: it gives its reader back when it goes
// idle and takes one when it is used again, and a request's writer is
// given back once flushed. Replies read through buffers that went from one
// connection to another are still each their own.
func TestHTTP1IdleConnectionsHoldNoBuffers(t *testing.T) {
	t.Parallel()
	echo := func(name string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			_, _ = fmt.Fprintf(w, "%s:%s", name, body)
		}
	}
	a, _ := countingServer(t, echo("a"))
	b, _ := countingServer(t, echo("b"))
	var d net.Dialer
	h := newHTTP1(d.DialContext, 64, time.Minute)
	t.Cleanup(h.closeIdle)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				name, srv := "a", a
				if (g+i)%2 == 1 {
					name, srv = "b", b
				}
				sent := fmt.Sprintf("%d-%d", g, i)
				req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL, strings.NewReader(sent))
				if !assert.NoError(t, err) {
					return
				}
				resp, err := h.roundTrip(req)
				if !assert.NoError(t, err) {
					return
				}
				got, err := io.ReadAll(resp.Body)
				assert.NoError(t, err)
				assert.NoError(t, resp.Body.Close())
				assert.Equal(t, name+":"+sent, string(got))
			}
		})
	}
	wg.Wait()
	h.mu.Lock()
	defer h.mu.Unlock()
	require.Positive(t, h.lru.n)
	for c := h.lru.newest; c != nil; c = c.older {
		require.Nil(t, c.br, "an idle connection to %s holds a reader", c.addr)
	}
}

// Idle connections older than idleFor are closed: the one asked for when it
// is taken, the others of every host by the sweep that the next request
// makes.
func TestHTTP1ClosesConnectionsIdleTooLong(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}
	advance := func(d time.Duration) {
		mu.Lock()
		now = now.Add(d)
		mu.Unlock()
	}
	var opened [2]*atomic.Int64
	var urls [2]string
	for i := range opened {
		srv, n := countingServer(t, func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusNoContent)
		})
		opened[i] = n
		urls[i] = srv.URL
	}
	var d net.Dialer
	h := newHTTP1(d.DialContext, 16, time.Minute)
	h.now = clock
	t.Cleanup(h.closeIdle)
	do := func(u string) { post(t, h, u) }
	idle := func() int { return idleCount(h) }

	do(urls[0])
	do(urls[1])
	require.Equal(t, 2, idle())
	advance(30 * time.Second)
	do(urls[0]) // within idleFor: reused
	require.EqualValues(t, 1, opened[0].Load())
	advance(31 * time.Second)
	// The first host's connection is 31 s idle, the second's 61 s: the
	// sweep closes the second's, and the first's is reused.
	do(urls[0])
	require.EqualValues(t, 1, opened[0].Load())
	require.Equal(t, 1, idle())
	advance(2 * time.Minute)
	do(urls[1])
	require.EqualValues(t, 2, opened[1].Load(), "a new connection for the second host")
	require.Equal(t, 1, idle(), "only the second host's new one is left")
}

// post sends one request through h directly and reads its reply to the end.
func post(t *testing.T, h *http1, u string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, strings.NewReader("{}"))
	require.NoError(t, err)
	resp, err := h.roundTrip(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	require.NoError(t, resp.Body.Close())
}

func idleCount(h *http1) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lru.n
}

func TestHostPort(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"http://a.example":           "a.example:80",
		"http://a.example/x":         "a.example:80",
		"http://a.example:8080/x":    "a.example:8080",
		"http://user:pw@a.example/x": "a.example:80",
		"http://[::1]/x":             "[::1]:80",
		"http://[::1]:9/x":           "[::1]:9",
		"http://10.0.0.1":            "10.0.0.1:80",
	} {
		u, err := url.Parse(in)
		require.NoError(t, err)
		require.Equal(t, want, hostPort(u), in)
	}
}

// A cancelled attempt on a connection in the middle of a reply closes it:
// the next request gets a new one.
func TestHTTP1CancelledMidReplyClosesTheConnection(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{}, 1)
	srv, opened := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			// Read to the end, so that the server notices the client
			// closing (its context ends).
			_, _ = io.Copy(io.Discard, r.Body)
			arrived <- struct{}{}
			select {
			case <-r.Context().Done():
			case <-time.After(hostileGuard):
			}
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	c := newTestClient(t)
	sendOK(t, c, srv.URL)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan Outcome, 1)
	go func() {
		done <- c.Send(ctx, Request{URL: srv.URL + "/slow", ID: "evt", Body: []byte("{}"), Timeout: 5 * time.Second})
	}()
	<-arrived
	cancel()
	o := <-done
	require.Equal(t, Local, o.Class, "err: %v", o.Err)
	require.ErrorIs(t, o.Err, context.Canceled)
	sendOK(t, c, srv.URL)
	require.EqualValues(t, 2, opened.Load())
}

// BenchmarkSend compares, in one run, an attempt over relay's own HTTP/1.1
// connections with the same attempt through net/http's Transport (a Doer
// that is an http.Client over it), 64 in flight to a receiver in this
// process:
//
//	go test -run '^$' -bench Send -benchtime 50000x ./internal/deliver/
func BenchmarkSend(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	b.Cleanup(srv.Close)
	key, err := ParseSecret(refSecret)
	if err != nil {
		b.Fatal(err)
	}
	body := bytes.Repeat([]byte("x"), 200)
	for _, bb := range []struct {
		name string
		opts []Option
	}{
		{"http1", nil},
		{"transport", []Option{WithDoer(&http.Client{Transport: &http.Transport{
			MaxIdleConnsPerHost: DefaultIdleConns, DisableCompression: true,
		}})}},
	} {
		b.Run(bb.name, func(b *testing.B) {
			c, err := NewClient(append([]Option{WithAllowPrivate(true)}, bb.opts...)...)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(c.CloseIdleConnections)
			b.SetParallelism(32) // 64 goroutines on 2 cores
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					o := c.Send(context.Background(), Request{URL: srv.URL + "/hook", ID: "evt_bench", Body: body, Keys: [][]byte{key}})
					if o.Class != Delivered {
						b.Errorf("outcome %v", o)
						return
					}
				}
			})
		})
	}
}
