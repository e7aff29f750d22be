package deliver

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// testNow is the fixed clock of the tests, so that the signed timestamp is
// known exactly.
var testNow = time.Unix(1_700_000_000, 0)

func fixedClock() time.Time { return testNow }

// received is what a test server saw of one request.
type received struct {
	method string
	path   string
	header http.Header
	body   []byte
}

// recordingServer starts a loopback server that reads each request in full,
// hands it to the test and answers status.
func recordingServer(t *testing.T, status int) (*httptest.Server, <-chan received) {
	t.Helper()
	got := make(chan received, 32)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		got <- received{method: r.Method, path: r.URL.Path, header: r.Header.Clone(), body: body}
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	return srv, got
}

// newTestClient returns a client allowed to reach loopback, with the fixed
// clock, whose idle connections are closed when the test ends.
func newTestClient(t *testing.T, opts ...Option) *Client {
	t.Helper()
	c, err := NewClient(append([]Option{WithAllowPrivate(true), WithClock(fixedClock)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(c.CloseIdleConnections)
	return c
}

func testKey(t *testing.T) []byte {
	t.Helper()
	key, err := ParseSecret(refSecret)
	require.NoError(t, err)
	return key
}

func TestSendBodyAndHeaders(t *testing.T) {
	t.Parallel()

	allBytes := make([]byte, 256)
	for i := range allBytes {
		allBytes[i] = byte(i)
	}
	large := make([]byte, 1<<20)
	for i := range large {
		large[i] = byte(i*7 + i>>8)
	}

	tests := []struct {
		name        string
		body        []byte
		contentType string
		wantType    string
	}{
		{name: "json", body: []byte(`{"id":"evt_01","video_id":"vv_9f31c2"}`), wantType: "application/json"},
		{name: "empty", body: nil, wantType: "application/json"},
		{name: "all byte values", body: allBytes, contentType: "application/octet-stream", wantType: "application/octet-stream"},
		{name: "1 MiB", body: large, contentType: "application/cbor", wantType: "application/cbor"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv, got := recordingServer(t, http.StatusNoContent)
			c := newTestClient(t)
			key := testKey(t)

			o := c.Send(t.Context(), Request{
				URL:         srv.URL + "/hooks/in",
				ID:          "evt_01",
				Body:        tt.body,
				ContentType: tt.contentType,
				Keys:        [][]byte{key},
			})
			require.Equal(t, Delivered, o.Class, "err: %v", o.Err)
			require.NoError(t, o.Err)
			require.Equal(t, http.StatusNoContent, o.Status)

			r := <-got
			require.Equal(t, http.MethodPost, r.method)
			require.Equal(t, "/hooks/in", r.path)
			require.True(t, bytes.Equal(tt.body, r.body), "the body arrives byte for byte")
			require.Equal(t, "evt_01", r.header.Get("webhook-id"))
			require.Equal(t, strconv.FormatInt(testNow.Unix(), 10), r.header.Get("webhook-timestamp"))
			require.Equal(t, tt.wantType, r.header.Get("content-type"))
			require.Equal(t, DefaultUserAgent, r.header.Get("user-agent"))
			require.Equal(t, strconv.Itoa(len(tt.body)), r.header.Get("content-length"))
			require.Empty(t, r.header.Get("accept-encoding"), "no compressed reply is asked for")
			require.NoError(t, Verify([][]byte{key}, r.header.Get("webhook-id"), r.header.Get("webhook-timestamp"),
				r.header.Get("webhook-signature"), r.body, testNow, 0))
		})
	}
}

func TestSendSignsWithEveryKey(t *testing.T) {
	t.Parallel()

	srv, got := recordingServer(t, http.StatusOK)
	c := newTestClient(t)
	oldKey, newKey := testKey(t), []byte(strings.Repeat("n", 32))
	body := []byte(`{"id":"evt_02"}`)

	o := c.Send(t.Context(), Request{URL: srv.URL, ID: "evt_02", Body: body, Keys: [][]byte{oldKey, newKey}})
	require.Equal(t, Delivered, o.Class)

	r := <-got
	sig := r.header.Get("webhook-signature")
	require.Len(t, strings.Fields(sig), 2)
	for _, key := range [][]byte{oldKey, newKey} {
		require.NoError(t, Verify([][]byte{key}, "evt_02", r.header.Get("webhook-timestamp"), sig, r.body, testNow, 0))
	}
}

func TestSendWithoutKeysIsUnsigned(t *testing.T) {
	t.Parallel()

	srv, got := recordingServer(t, http.StatusOK)
	o := newTestClient(t).Send(t.Context(), Request{URL: srv.URL, ID: "evt_03"})
	require.Equal(t, Delivered, o.Class)
	r := <-got
	require.Empty(t, r.header.Values("webhook-signature"))
	require.Equal(t, "evt_03", r.header.Get("webhook-id"))
}

func TestSendSubscriberHeaders(t *testing.T) {
	t.Parallel()

	srv, got := recordingServer(t, http.StatusOK)
	c := newTestClient(t)
	key := testKey(t)
	body := []byte(`{"id":"evt_04"}`)

	o := c.Send(t.Context(), Request{
		URL:  srv.URL,
		ID:   "evt_04",
		Body: body,
		Keys: [][]byte{key},
		Header: http.Header{
			"Authorization":     {"Bearer s3cr3t"},
			"X-Multi":           {"a", "b"},
			"webhook-id":        {"evt_forged"},
			"Webhook-Signature": {"v1,Zm9yZ2Vk"},
			"WEBHOOK-TIMESTAMP": {"1"},
			"Webhook-Extra":     {"x"},
			"Content-Type":      {"text/plain"},
			"Connection":        {"close"},
		},
	})
	require.Equal(t, Delivered, o.Class, "err: %v", o.Err)

	r := <-got
	require.Equal(t, "Bearer s3cr3t", r.header.Get("Authorization"))
	require.Equal(t, []string{"a", "b"}, r.header.Values("X-Multi"))
	require.Equal(t, []string{"evt_04"}, r.header.Values("webhook-id"))
	require.Equal(t, []string{strconv.FormatInt(testNow.Unix(), 10)}, r.header.Values("webhook-timestamp"))
	require.Empty(t, r.header.Values("webhook-extra"))
	require.Equal(t, []string{"application/json"}, r.header.Values("content-type"))
	sig := r.header.Values("webhook-signature")
	require.Len(t, sig, 1)
	require.NotContains(t, sig[0], "Zm9yZ2Vk")
	require.NoError(t, Verify([][]byte{key}, "evt_04", r.header.Get("webhook-timestamp"), sig[0], r.body, testNow, 0))
}

func TestSendUserAgent(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name   string
		opts   []Option
		header http.Header
		want   string
	}{
		{name: "default", want: DefaultUserAgent},
		{name: "option", opts: []Option{WithUserAgent("acme-relay/2")}, want: "acme-relay/2"},
		{name: "subscriber header wins", opts: []Option{WithUserAgent("acme-relay/2")},
			header: http.Header{"user-agent": {"their-gateway"}}, want: "their-gateway"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv, got := recordingServer(t, http.StatusOK)
			o := newTestClient(t, tt.opts...).Send(t.Context(), Request{URL: srv.URL, ID: "evt_ua", Header: tt.header})
			require.Equal(t, Delivered, o.Class)
			require.Equal(t, []string{tt.want}, (<-got).header.Values("user-agent"))
		})
	}
}

func TestSendStatusClasses(t *testing.T) {
	t.Parallel()

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		status, err := strconv.Atoi(r.URL.Query().Get("status"))
		if err != nil {
			status = http.StatusTeapot
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, "reply "+strconv.Itoa(status))
	}))
	t.Cleanup(srv.Close)
	c := newTestClient(t)

	tests := []struct {
		status int
		want   Class
	}{
		{status: 200, want: Delivered},
		{status: 201, want: Delivered},
		{status: 202, want: Delivered},
		{status: 299, want: Delivered},
		{status: 300, want: Rejected},
		{status: 302, want: Rejected},
		{status: 400, want: Rejected},
		{status: 401, want: Rejected},
		{status: 403, want: Rejected},
		{status: 404, want: Rejected},
		{status: 408, want: Retryable},
		{status: 409, want: Rejected},
		{status: 410, want: Gone},
		{status: 413, want: Rejected},
		{status: 422, want: Rejected},
		{status: 425, want: Retryable},
		{status: 429, want: Retryable},
		{status: 499, want: Rejected},
		{status: 500, want: Retryable},
		{status: 501, want: Retryable},
		{status: 502, want: Retryable},
		{status: 503, want: Retryable},
		{status: 504, want: Retryable},
		{status: 599, want: Retryable},
	}
	for _, tt := range tests {
		t.Run(strconv.Itoa(tt.status), func(t *testing.T) {
			t.Parallel()
			o := c.Send(t.Context(), Request{URL: srv.URL + "/?status=" + strconv.Itoa(tt.status), ID: "evt_status"})
			require.Equal(t, tt.want, o.Class, "err: %v", o.Err)
			require.Equal(t, tt.status, o.Status)
			require.Equal(t, "reply "+strconv.Itoa(tt.status), o.Body)
			if tt.want == Delivered {
				require.NoError(t, o.Err)
				return
			}
			require.ErrorIs(t, o.Err, ErrStatus)
			require.ErrorContains(t, o.Err, strconv.Itoa(tt.status))
		})
	}
}

func TestClassify(t *testing.T) {
	t.Parallel()

	// Statuses a Go test server cannot easily produce as a final reply.
	tests := []struct {
		status int
		want   Class
	}{
		{status: 100, want: Rejected},
		{status: 101, want: Rejected},
		{status: 199, want: Rejected},
		{status: 0, want: Rejected},
		{status: 600, want: Rejected},
		{status: 999, want: Rejected},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, classify(tt.status), "status %d", tt.status)
	}
}

func TestClassString(t *testing.T) {
	t.Parallel()

	require.Equal(t, "delivered", Delivered.String())
	require.Equal(t, "retryable", Retryable.String())
	require.Equal(t, "rejected", Rejected.String())
	require.Equal(t, "gone", Gone.String())
	require.Equal(t, "refused", Refused.String())
	require.Equal(t, "local", Local.String())
	require.Equal(t, "Class(0)", Class(0).String())
}

func TestSendDoesNotFollowRedirects(t *testing.T) {
	t.Parallel()

	var targetHits atomic.Int32
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		targetHits.Add(1)
	}))
	t.Cleanup(target.Close)
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL, http.StatusMovedPermanently)
	}))
	t.Cleanup(redirect.Close)

	o := newTestClient(t).Send(t.Context(), Request{URL: redirect.URL, ID: "evt_redirect"})
	require.Equal(t, Rejected, o.Class)
	require.Equal(t, http.StatusMovedPermanently, o.Status)
	require.ErrorIs(t, o.Err, ErrStatus)
	require.Zero(t, targetHits.Load(), "the redirect target is never requested")
}

// TestSendTurnsURLCredentialsIntoBasicAuth: a subscriber URL with
// user:password@ sends them as Basic authentication, as http.Client does,
// unless the subscriber's own headers carry an Authorization; the
// credentials never appear in an error.
func TestSendTurnsURLCredentialsIntoBasicAuth(t *testing.T) {
	t.Parallel()

	got := make(chan string, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("Authorization")
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL)
	require.NoError(t, err)
	u.User = url.UserPassword("hooks", "s3cret")

	c := newTestClient(t)
	o := c.Send(t.Context(), Request{URL: u.String(), ID: "evt_basic"})
	require.Equal(t, Delivered, o.Class)
	require.Equal(t, "Basic aG9va3M6czNjcmV0", <-got)

	o = c.Send(t.Context(), Request{URL: u.String(), ID: "evt_bearer", Header: http.Header{"Authorization": {"Bearer tok"}}})
	require.Equal(t, Delivered, o.Class)
	require.Equal(t, "Bearer tok", <-got)

	srv.Close()
	o = c.Send(t.Context(), Request{URL: u.String(), ID: "evt_closed"})
	require.Equal(t, Retryable, o.Class)
	require.NotContains(t, o.Err.Error(), "s3cret")
}

// hangingServer answers nothing until the request is cancelled or the test
// ends; arrived receives one value per request that reached the handler.
func hangingServer(t *testing.T) (srv *httptest.Server, arrived <-chan struct{}) {
	t.Helper()
	release := make(chan struct{})
	arrivals := make(chan struct{}, 8)
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrivals <- struct{}{}
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	// Cleanups run last-in first-out: release the handlers, then close.
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	return srv, arrivals
}

func TestSendTimeout(t *testing.T) {
	t.Parallel()

	srv, _ := hangingServer(t)
	o := newTestClient(t).Send(t.Context(), Request{URL: srv.URL, ID: "evt_hang", Timeout: 50 * time.Millisecond})
	require.Equal(t, Retryable, o.Class, "the attempt's own timeout is the subscriber being slow, not a local failure")
	require.ErrorIs(t, o.Err, ErrTimeout)
	require.NotErrorIs(t, o.Err, ErrLocal)
	require.Zero(t, o.Status)
}

func TestSendContextDeadlineIsTheTimeout(t *testing.T) {
	t.Parallel()

	srv, _ := hangingServer(t)
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	o := newTestClient(t).Send(ctx, Request{URL: srv.URL, ID: "evt_hang"})
	require.Equal(t, Retryable, o.Class)
	require.ErrorIs(t, o.Err, ErrTimeout)
	require.NotErrorIs(t, o.Err, ErrLocal)
}

func TestSendCancelled(t *testing.T) {
	t.Parallel()

	srv, arrived := hangingServer(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() {
		<-arrived
		cancel()
	}()
	o := newTestClient(t).Send(ctx, Request{URL: srv.URL, ID: "evt_cancel", Timeout: time.Hour})
	require.Equal(t, Local, o.Class, "the relay stopping is not an attempt: err %v", o.Err)
	require.ErrorIs(t, o.Err, ErrLocal)
	require.ErrorIs(t, o.Err, context.Canceled)
	require.NotErrorIs(t, o.Err, ErrTimeout)
	require.NotErrorIs(t, o.Err, ErrConnection)
	require.Zero(t, o.Status)
}

func TestSendAlreadyCancelled(t *testing.T) {
	t.Parallel()

	srv, got := recordingServer(t, http.StatusOK)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	o := newTestClient(t).Send(ctx, Request{URL: srv.URL, ID: "evt_stopped"})
	require.Equal(t, Local, o.Class, "err: %v", o.Err)
	require.ErrorIs(t, o.Err, ErrLocal)
	require.ErrorIs(t, o.Err, context.Canceled)
	require.Empty(t, got, "nothing reaches the subscriber")
}

// hijackingServer takes over each connection and does act to it.
func hijackingServer(t *testing.T, act func(net.Conn)) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		defer conn.Close()
		act(conn)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestSendBrokenReplies(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name string
		act  func(net.Conn)
	}{
		{name: "garbage instead of HTTP", act: func(c net.Conn) {
			_, _ = io.WriteString(c, "this is not HTTP at all\r\n\r\n")
		}},
		{name: "binary garbage", act: func(c net.Conn) { _, _ = c.Write([]byte{0, 1, 2, 0xff, 0xfe, '\n', '\n'}) }},
		{name: "connection closed without a reply", act: func(net.Conn) {}},
		{name: "headers cut short", act: func(c net.Conn) {
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Len")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := hijackingServer(t, tt.act)
			o := newTestClient(t).Send(t.Context(), Request{URL: srv.URL, ID: "evt_broken", Body: []byte("{}")})
			require.Equal(t, Retryable, o.Class)
			require.ErrorIs(t, o.Err, ErrConnection)
			require.Zero(t, o.Status)
		})
	}
}

func TestSendConnectionRefused(t *testing.T) {
	t.Parallel()

	// A port that was just free: nothing listens on it any more.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())

	o := newTestClient(t).Send(t.Context(), Request{URL: "http://" + addr + "/", ID: "evt_noone"})
	require.Equal(t, Retryable, o.Class)
	require.ErrorIs(t, o.Err, ErrConnection)
	require.NotErrorIs(t, o.Err, ErrLocal, "a refused connection is the subscriber's side")
}

// endlessBody is a response body that never ends and counts what was read.
type endlessBody struct {
	read   atomic.Int64
	closed atomic.Bool
}

func (b *endlessBody) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'x'
	}
	b.read.Add(int64(len(p)))
	return len(p), nil
}

func (b *endlessBody) Close() error {
	b.closed.Store(true)
	return nil
}

// doerFunc lets a function be a Doer.
type doerFunc func(*http.Request) (*http.Response, error)

func (f doerFunc) Do(r *http.Request) (*http.Response, error) { return f(r) }

func TestSendReadsAtMostTheLimit(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name     string
		opts     []Option
		wantRead int64
		wantBody int
	}{
		{name: "default", wantRead: DefaultMaxResponseBody, wantBody: 1024},
		{name: "small limit", opts: []Option{WithMaxResponseBody(100)}, wantRead: 100, wantBody: 100},
		{name: "nothing", opts: []Option{WithMaxResponseBody(0)}, wantRead: 0, wantBody: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			body := &endlessBody{}
			doer := doerFunc(func(r *http.Request) (*http.Response, error) {
				return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: body, Request: r}, nil
			})
			c := newTestClient(t, append(tt.opts, WithDoer(doer))...)
			o := c.Send(t.Context(), Request{URL: "https://example.com/hook", ID: "evt_big"})
			require.Equal(t, Delivered, o.Class)
			require.Equal(t, tt.wantRead, body.read.Load())
			require.Len(t, o.Body, tt.wantBody)
			require.True(t, body.closed.Load(), "the body is closed")
		})
	}
}

func TestSendHugeReplyOverTheWire(t *testing.T) {
	t.Parallel()

	const offered = 256 << 20
	type result struct {
		written int64
		err     error
	}
	done := make(chan result, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		chunk := bytes.Repeat([]byte("y"), 32<<10)
		var res result
		for res.written < offered {
			n, err := w.Write(chunk)
			res.written += int64(n)
			if err != nil {
				res.err = err
				break
			}
		}
		done <- res
	}))
	t.Cleanup(srv.Close)

	o := newTestClient(t).Send(t.Context(), Request{URL: srv.URL, ID: "evt_huge"})
	require.Equal(t, Delivered, o.Class)
	require.Len(t, o.Body, 1024)

	res := <-done
	require.Error(t, res.err, "the server's writes fail once the client stops reading and closes")
	require.Less(t, res.written, int64(offered))
}

func TestSendRetryAfter(t *testing.T) {
	t.Parallel()

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if v := r.URL.Query().Get("retry_after"); v != "" {
			w.Header().Set("Retry-After", v)
		}
		status, _ := strconv.Atoi(r.URL.Query().Get("status"))
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	c := newTestClient(t)

	tests := []struct {
		name       string
		status     int
		retryAfter string
		want       time.Duration
		wantSet    bool
	}{
		{name: "429 seconds", status: 429, retryAfter: "30", want: 30 * time.Second, wantSet: true},
		{name: "503 seconds", status: 503, retryAfter: "120", want: 2 * time.Minute, wantSet: true},
		{name: "503 HTTP date", status: 503, retryAfter: testNow.Add(90 * time.Second).UTC().Format(http.TimeFormat),
			want: 90 * time.Second, wantSet: true},
		{name: "429 date in the past", status: 429, retryAfter: testNow.Add(-time.Hour).UTC().Format(http.TimeFormat),
			want: 0, wantSet: true},
		{name: "429 negative", status: 429, retryAfter: "-3", want: 0, wantSet: true},
		{name: "429 without header", status: 429},
		{name: "429 garbage", status: 429, retryAfter: "later"},
		{name: "500 ignores it", status: 500, retryAfter: "30"},
		{name: "502 ignores it", status: 502, retryAfter: "30"},
		{name: "200 ignores it", status: 200, retryAfter: "30"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			q := url.Values{"status": {strconv.Itoa(tt.status)}, "retry_after": {tt.retryAfter}}
			o := c.Send(t.Context(), Request{URL: srv.URL + "/?" + q.Encode(), ID: "evt_ra"})
			require.Equal(t, tt.status, o.Status)
			require.Equal(t, tt.wantSet, o.RetryAfterSet)
			require.Equal(t, tt.want, o.RetryAfter)
		})
	}
}

func TestDefaultClientRefusesPrivateTargets(t *testing.T) {
	t.Parallel()

	var hits, conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
	}))
	srv.Config.ConnState = func(_ net.Conn, state http.ConnState) {
		if state == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	_, port, err := net.SplitHostPort(srv.Listener.Addr().String())
	require.NoError(t, err)

	c, err := NewClient()
	require.NoError(t, err)
	t.Cleanup(c.CloseIdleConnections)

	for _, target := range []string{
		srv.URL,                             // 127.0.0.1
		"http://localhost:" + port,          // a name that resolves to loopback
		"http://[::ffff:127.0.0.1]:" + port, // the mapped form
	} {
		o := c.Send(t.Context(), Request{URL: target, ID: "evt_ssrf", Body: []byte("{}")})
		require.Equal(t, Refused, o.Class, "target %s: %v", target, o.Err)
		require.ErrorIs(t, o.Err, ErrRefused)
		require.ErrorContains(t, o.Err, "loopback")
		require.Zero(t, o.Status)
	}
	require.Zero(t, hits.Load(), "the server is never hit")
	require.Zero(t, conns.Load(), "no connection is ever made")
}

func TestSendReusesConnections(t *testing.T) {
	t.Parallel()

	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	srv.Config.ConnState = func(_ net.Conn, state http.ConnState) {
		if state == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)

	c := newTestClient(t)
	for i := range 20 {
		o := c.Send(t.Context(), Request{URL: srv.URL, ID: "evt_" + strconv.Itoa(i), Body: []byte(`{"n":1}`)})
		require.Equal(t, Delivered, o.Class, "send %d: %v", i, o.Err)
	}
	require.Equal(t, int32(1), conns.Load(), "20 sequential sends share one connection")
}

func TestSendInvalidRequests(t *testing.T) {
	t.Parallel()

	var calls atomic.Int32
	doer := doerFunc(func(*http.Request) (*http.Response, error) {
		calls.Add(1)
		return nil, errors.New("must not be called")
	})
	c := newTestClient(t, WithDoer(doer))

	tests := []struct {
		name string
		req  Request
	}{
		{name: "empty URL", req: Request{ID: "evt"}},
		{name: "relative URL", req: Request{URL: "/hooks", ID: "evt"}},
		{name: "other scheme", req: Request{URL: "ftp://example.com/", ID: "evt"}},
		{name: "no host", req: Request{URL: "http:///path", ID: "evt"}},
		{name: "unparsable URL", req: Request{URL: "http://user:hunter2@exa mple.com/", ID: "evt"}},
		{name: "control character in URL", req: Request{URL: "http://example.com/\x7f", ID: "evt"}},
		{name: "no ID", req: Request{URL: "https://example.com/"}},
		{name: "content type with newline", req: Request{URL: "https://example.com/", ID: "evt", ContentType: "a\nb"}},
		{name: "bad header name", req: Request{URL: "https://example.com/", ID: "evt",
			Header: http.Header{"Bad Name": {"v"}}}},
		{name: "bad header value", req: Request{URL: "https://example.com/", ID: "evt",
			Header: http.Header{"X-Ok": {"line\nbreak"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o := c.Send(t.Context(), tt.req)
			require.Equal(t, Rejected, o.Class)
			require.ErrorIs(t, o.Err, ErrInvalidRequest)
			require.NotContains(t, o.Err.Error(), "hunter2", "errors never repeat credentials")
		})
	}
	require.Zero(t, calls.Load())
}

func TestSendRedactsURLInErrors(t *testing.T) {
	t.Parallel()

	doer := doerFunc(func(r *http.Request) (*http.Response, error) {
		return nil, &url.Error{Op: "Post", URL: r.URL.String(), Err: errors.New("boom")}
	})
	c := newTestClient(t, WithDoer(doer))
	o := c.Send(t.Context(), Request{URL: "https://user:hunter2@example.com/hook?token=t0ps3cret#frag", ID: "evt"})
	require.Equal(t, Retryable, o.Class)
	require.ErrorIs(t, o.Err, ErrConnection)
	require.ErrorContains(t, o.Err, "https://example.com/hook")
	require.NotContains(t, o.Err.Error(), "t0ps3cret")
	require.NotContains(t, o.Err.Error(), "hunter2")
}

func TestNewClientRejectsBadOptions(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name string
		opt  Option
	}{
		{name: "nil doer", opt: WithDoer(nil)},
		{name: "negative body limit", opt: WithMaxResponseBody(-1)},
		{name: "nil clock", opt: WithClock(nil)},
		{name: "user agent with newline", opt: WithUserAgent("relay\r\nX-Injected: 1")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := NewClient(tt.opt)
			require.ErrorIs(t, err, ErrInvalidOption)
			require.Nil(t, c)
		})
	}
}

func TestSendMeasuresDuration(t *testing.T) {
	t.Parallel()

	// A clock that moves one second per reading shows that Duration is
	// measured with the client's clock, from before the request to after it.
	var ticks atomic.Int64
	clock := func() time.Time { return testNow.Add(time.Duration(ticks.Add(1)) * time.Second) }
	srv, got := recordingServer(t, http.StatusOK)
	o := newTestClient(t, WithClock(clock)).Send(t.Context(), Request{URL: srv.URL, ID: "evt_time"})
	require.Equal(t, Delivered, o.Class)
	require.Positive(t, o.Duration)
	require.Equal(t, strconv.FormatInt(testNow.Add(2*time.Second).Unix(), 10), (<-got).header.Get("webhook-timestamp"))
}
