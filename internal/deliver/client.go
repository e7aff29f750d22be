package deliver

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/oauth2"
)

const (
	// DefaultTimeout bounds an attempt whose [Request] has no Timeout and
	// whose context has no deadline, so that a hanging subscriber can never
	// hold a caller forever.
	DefaultTimeout = 10 * time.Second

	// DefaultMaxResponseBody is how much of a reply's body the client reads
	// by default. A webhook reply carries nothing relay needs beyond its
	// status; reading a little lets the connection be reused after small
	// replies, and the limit stops a hostile subscriber from making relay
	// download without end.
	DefaultMaxResponseBody = 64 << 10

	// DefaultUserAgent is the user-agent header of every request unless the
	// subscriber's own headers or [WithUserAgent] say otherwise, so that a
	// subscriber can tell relay's traffic apart in its logs.
	DefaultUserAgent = "relay-webhooks/1"

	// DefaultContentType is the content-type of a request whose event did
	// not carry one: webhooks are JSON unless told otherwise.
	DefaultContentType = "application/json"

	// maxOutcomeBody bounds Outcome.Body, which ends up in a dead-letter
	// header (Relay-Last-Error is at most 1 KiB).
	maxOutcomeBody = 1 << 10

	// DefaultIdleConns is how many idle connections a Client keeps open to
	// one host, and in all, unless [WithIdleConns] says otherwise. Go's
	// default of 2 a host would make a lane with many requests in flight
	// open and close connections all the time (a TLS handshake costs far
	// more than the POST), and so would any bound below what is in flight
	// to one host: many subscribers behind one SaaS host share its pool.
	DefaultIdleConns = 1024
)

// Doer sends one HTTP request and returns its response, as [*http.Client]
// does. A lane can put its own in front of the default (for tracing, or a
// transport of its own), and a test can replace it. A Doer given with
// [WithDoer] brings its own dialer, so the SSRF guard is then its business.
type Doer interface {
	Do(req *http.Request) (*http.Response, error)
}

// Option configures a [Client] built by [NewClient]. An option with a value
// the client cannot use makes NewClient return an error wrapping
// [ErrInvalidOption].
type Option func(*Client) error

// WithAllowPrivate lifts the SSRF guard of the default Doer, so that
// subscribers on loopback, private or link-local addresses can be reached.
// It is for local testing (`relay run --allow-private-targets`); a production
// relay should never need it.
func WithAllowPrivate(allow bool) Option {
	return func(c *Client) error {
		c.allowPrivate = allow
		return nil
	}
}

// WithDoer replaces the default HTTP client. The default guards against SSRF,
// keeps connections alive, ignores proxy settings from the environment and
// does not follow redirects; a replacement should do the same.
func WithDoer(d Doer) Option {
	return func(c *Client) error {
		if d == nil {
			return fmt.Errorf("%w: WithDoer needs a non-nil Doer", ErrInvalidOption)
		}
		c.doer = d
		return nil
	}
}

// WithMaxResponseBody sets how many bytes of a reply's body are read before
// the body is closed. Defaults to [DefaultMaxResponseBody]. Replies no larger
// than this leave their connection reusable; larger ones cost a connection
// but never more reading. 0 reads nothing.
func WithMaxResponseBody(n int64) Option {
	return func(c *Client) error {
		if n < 0 {
			return fmt.Errorf("%w: WithMaxResponseBody needs n >= 0, got %d", ErrInvalidOption, n)
		}
		c.maxBody = n
		return nil
	}
}

// WithClock sets the source of webhook-timestamp, of the "now" a Retry-After
// date is measured from, and of Outcome.Duration. Defaults to time.Now; tests
// use a fixed clock to know the exact signed content.
func WithClock(now func() time.Time) Option {
	return func(c *Client) error {
		if now == nil {
			return fmt.Errorf("%w: WithClock needs a non-nil clock", ErrInvalidOption)
		}
		c.now = now
		return nil
	}
}

// WithUserAgent sets the user-agent header sent with every request unless a
// subscriber's own headers set one. Defaults to [DefaultUserAgent].
func WithUserAgent(ua string) Option {
	return func(c *Client) error {
		if !validHeaderValue(ua) {
			return fmt.Errorf("%w: WithUserAgent needs a valid header value", ErrInvalidOption)
		}
		c.userAgent = ua
		return nil
	}
}

// WithIdleConns sets how many idle connections the default Doer keeps open,
// to one host and in all (default [DefaultIdleConns]). Size it to the most
// requests in flight at once (`relay run --max-requests`): every request
// beyond the pool that finishes closes its connection, which the next
// request to that host must open again, and a host shared by many
// subscribers then sees a storm of new connections and its peer thousands
// of sockets in TIME_WAIT.
func WithIdleConns(n int) Option {
	return func(c *Client) error {
		if n < 1 {
			return fmt.Errorf("%w: WithIdleConns needs at least 1, got %d", ErrInvalidOption, n)
		}
		c.idleConns = n
		return nil
	}
}

// Client sends signed webhook attempts. It is safe for concurrent use, and one
// Client should be shared by everything that delivers so that connections to
// a subscriber are reused.
type Client struct {
	doer Doer
	// proxy is the egress proxy of the default Doers (see [WithProxy]).
	proxy Proxy
	// tlsDoers serve the receivers with a TLS setting of their own; nil
	// with a Doer given by [WithDoer], which cannot apply one.
	tlsDoers     *tlsDoers
	tokens       *tokens
	allowPrivate bool
	idleConns    int
	maxBody      int64
	now          func() time.Time
	userAgent    string
}

// NewClient returns a Client configured by opts over the defaults described on
// each option.
func NewClient(opts ...Option) (*Client, error) {
	c := &Client{
		idleConns: DefaultIdleConns,
		maxBody:   DefaultMaxResponseBody,
		now:       time.Now,
		userAgent: DefaultUserAgent,
	}
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(c); err != nil {
			return nil, err
		}
	}
	if c.doer == nil {
		eg := newEgress(c.proxy, c.allowPrivate)
		c.doer = newHTTPClient(c.allowPrivate, c.idleConns, nil, eg)
		c.tlsDoers = newTLSDoers(func(base *tls.Config) roundTripper {
			return newHTTPClient(c.allowPrivate, c.idleConns, base, eg)
		})
	} else if c.proxy.Enabled() {
		return nil, fmt.Errorf("%w: WithProxy applies to the default Doer, not to one given with WithDoer", ErrInvalidOption)
	}
	c.tokens = newTokens(c.doer, c.now)
	return c, nil
}

// newHTTPClient builds the default Doer: an SSRF-guarded dialer unless
// allowPrivate, keep-alive with room for many idle connections per
// subscriber, a proxy only as eg says (see [WithProxy]: the guard then
// judges each target before the proxy is asked), redirects returned rather than
// followed, and no compressed replies asked for (relay reads a few KB of a
// reply at most; the Accept-Encoding header would cost every request a map
// of its own). Plain http goes over relay's own HTTP/1.1 connections
// (http1.go), https through net/http's Transport; each keeps up to idleConns
// idle connections. base, when not nil, is the receiver's own TLS setting
// (see [TLS]) that every TLS connection starts from.
func newHTTPClient(allowPrivate bool, idleConns int, base *tls.Config, eg *egress) roundTripper {
	dialer := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	if !allowPrivate {
		dialer.Control = guardControl
	}
	// A proxy is dialled as the operator named it, private or not.
	toProxy := &net.Dialer{Timeout: dialer.Timeout, KeepAlive: dialer.KeepAlive}
	tlsConfig := &tls.Config{}
	if base != nil {
		tlsConfig = base.Clone()
	}
	transport := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			ctx, cancel := boundToAttempt(ctx)
			defer cancel()
			if eg.isProxy(addr) {
				return toProxy.DialContext(ctx, network, addr)
			}
			return dialer.DialContext(ctx, network, addr)
		},
		DialTLSContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if eg.isProxy(addr) {
				return dialTLS(ctx, toProxy, network, addr, proxyTLS(addr))
			}
			return dialTLS(ctx, dialer, network, addr, base)
		},
		// Through a proxy's tunnel, the Transport makes the TLS handshake
		// with the receiver itself, from this.
		TLSClientConfig:        tlsConfig,
		TLSHandshakeTimeout:    tlsHandshakeTimeout,
		OnProxyConnectResponse: refuseTunnel,
		ForceAttemptHTTP2:      true,
		DisableCompression:     true,
		MaxIdleConns:           idleConns,
		MaxIdleConnsPerHost:    idleConns,
		IdleConnTimeout:        idleConnTimeout,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: maxResponseHeader,
	}
	// Its dial is the request's own, on the attempt's context: it ends
	// with the attempt.
	if eg != nil {
		transport.Proxy = eg.proxyOf
	}
	return roundTripper{t: transport, h1: newHTTP1(dialer.DialContext, idleConns, idleConnTimeout), eg: eg}
}

// idleConnTimeout is how long an idle connection to a subscriber is kept.
const idleConnTimeout = 90 * time.Second

// tlsHandshakeTimeout bounds a TLS handshake, whatever the attempt's own
// timeout.
const tlsHandshakeTimeout = 10 * time.Second

// attemptKey is the context key under which send stores the attempt's own
// context, for the dial it may start.
type attemptKey struct{}

// boundToAttempt returns the dial context ctx, ended as well when the
// attempt that started the dial ends. net/http detaches a dial from its
// request's cancellation (keeping its values), so that a dial a request gave
// up on may serve a later one; but then a subscriber that accepts and never
// completes a TLS handshake, or an address that drops SYNs, holds a socket
// and goroutines for the handshake's 10 s or the dialer's 30 s after each
// attempt ended, out of --max-requests' count. Found by
// TestHostileTLSHandshakeNeverFinishes.
func boundToAttempt(ctx context.Context) (context.Context, context.CancelFunc) {
	attempt, ok := ctx.Value(attemptKey{}).(context.Context)
	if !ok {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(attempt, cancel)
	return ctx, func() { stop(); cancel() }
}

// dialTLS dials addr and completes the TLS handshake within the attempt
// that asked for it (see boundToAttempt) and tlsHandshakeTimeout, offering
// HTTP/2 as the transport's own handshake would, from base when not nil.
func dialTLS(ctx context.Context, dialer *net.Dialer, network, addr string, base *tls.Config) (net.Conn, error) {
	ctx, cancel := boundToAttempt(ctx)
	defer cancel()
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	raw, err := dialer.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{}
	if base != nil {
		cfg = base.Clone()
	}
	cfg.ServerName, cfg.NextProtos = host, []string{"h2", "http/1.1"}
	conn := tls.Client(raw, cfg)
	hctx, hcancel := context.WithTimeout(ctx, tlsHandshakeTimeout)
	defer hcancel()
	if err := conn.HandshakeContext(hctx); err != nil {
		_ = raw.Close()
		return nil, err
	}
	return conn, nil
}

// roundTripper is the default Doer: each request goes straight to the
// transport or to relay's own HTTP/1.1 connections (plain http, see
// useHTTP1). http.Client adds what relay does not use (it follows
// redirects, which relay never does, keeps a cookie jar and a timeout of
// its own, where the attempt's context bounds the request) at the price of
// a copy of the headers and half a dozen allocations per request. A 3xx
// comes back as it is, as with a client whose CheckRedirect returns
// http.ErrUseLastResponse.
type roundTripper struct {
	t  *http.Transport
	h1 *http1
	// eg, when not nil, sends requests through an egress proxy.
	eg *egress
}

// Do sends req as http.Client would: credentials in the URL become Basic
// authentication unless req has its own, and a transport error comes
// wrapped in a *url.Error.
func (rt roundTripper) Do(req *http.Request) (*http.Response, error) {
	if u := req.URL.User; u != nil && req.Header.Get("Authorization") == "" {
		password, _ := u.Password()
		req.SetBasicAuth(u.Username(), password)
	}
	var resp *http.Response
	var err error
	proxied := false
	if rt.eg != nil {
		proxied, err = rt.eg.check(req)
	}
	switch {
	case err != nil:
	case useHTTP1(req) && !proxied:
		resp, err = rt.h1.roundTrip(req)
	default:
		resp, err = rt.t.RoundTrip(req)
	}
	if err != nil {
		op := req.Method[:1] + strings.ToLower(req.Method[1:])
		return nil, &url.Error{Op: op, URL: req.URL.String(), Err: err}
	}
	return resp, nil
}

// CloseIdleConnections closes the idle connections of both.
func (rt roundTripper) CloseIdleConnections() {
	rt.t.CloseIdleConnections()
	rt.h1.closeIdle()
}

// CloseIdleConnections closes the connections the Client keeps open for
// reuse, if its Doer keeps any. Call it on shutdown, or when a subscriber is
// removed, so idle connections do not linger until they time out.
func (c *Client) CloseIdleConnections() {
	if closer, ok := c.doer.(interface{ CloseIdleConnections() }); ok {
		closer.CloseIdleConnections()
	}
	if c.tlsDoers != nil {
		c.tlsDoers.closeIdle()
	}
}

// Request is one attempt to deliver one event to one subscriber.
type Request struct {
	// URL is the subscriber's endpoint, absolute http or https.
	URL string
	// ID is the event id. It is sent as webhook-id by [WebhookID] (the same
	// on every attempt, so that the subscriber can deduplicate), and as it
	// is in Relay-Event-Id when that differs and a header can hold it.
	ID string
	// Body is sent byte for byte as published.
	Body []byte
	// ContentType is the event's own Content-Type. Defaults to
	// [DefaultContentType].
	ContentType string
	// Header holds the subscriber's own configured headers (Authorization,
	// say). They cannot replace webhook-*, content-type, content-length,
	// transfer-encoding, connection or host, which belong to the delivery.
	Header http.Header
	// Keys are the subscriber's HMAC keys from [ParseSecret]; one v1
	// signature per key is sent.
	Keys [][]byte
	// SigningKeys are the subscriber's ed25519 keys from [ParseSigningKey];
	// one v1a signature per key is sent, after the v1 ones. With neither
	// kind of key the request is unsigned.
	SigningKeys []ed25519.PrivateKey
	// Timeout bounds the whole attempt, reading the reply included. Defaults
	// to [DefaultTimeout], or to the context's own deadline if it has one.
	Timeout time.Duration
	// TLS, when set, is the receiver's own TLS setting: a client
	// certificate, a private CA. Its requests go over connections of
	// their own.
	TLS *TLS
	// OAuth2, when set, is the grant whose access token the request
	// carries as its Authorization header. The Client caches the token
	// until shortly before it expires, and fetches it within the attempt
	// (its timeout included) when it has none; a 401 drops it, so that the
	// next attempt fetches another.
	OAuth2 *OAuth2
	// Inspect keeps what a person reading the reply wants and a delivery
	// does not: the reply's headers in [Outcome.Header], and whether its
	// body went on past [Outcome.Body] in [Outcome.BodyCut]. `relay sub
	// test` shows them; the lanes leave it off, so that a delivery keeps
	// nothing of a reply but what decides its fate.
	Inspect bool
}

// Send makes one attempt: it signs r with the client's clock, POSTs it, reads
// at most the configured part of the reply and classifies the result. It
// never returns without an Outcome, and it returns by the attempt's timeout
// even when the subscriber hangs. When ctx is cancelled before a reply (the
// relay stopping) the outcome is [Local] and its Err wraps [ErrLocal] and
// ctx's error, so that a caller shutting down hands the message back without
// counting an attempt; the attempt's own timeout, or a deadline on ctx, stays
// [Retryable] with [ErrTimeout].
func (c *Client) Send(ctx context.Context, r Request) Outcome {
	start := c.now()
	o := c.send(ctx, r)
	o.Duration = c.now().Sub(start)
	return o
}

func (c *Client) send(parent context.Context, r Request) Outcome {
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = 0
		if _, ok := parent.Deadline(); !ok {
			timeout = DefaultTimeout
		}
	}
	ctx := parent
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(parent, timeout)
		defer cancel()
	}
	// The dial this attempt may start ends with it (boundToAttempt).
	dialCtx := context.WithValue(ctx, attemptKey{}, ctx)
	var token *oauth2.Token
	if r.OAuth2 != nil {
		var err error
		if token, err = c.tokens.token(dialCtx, r.OAuth2); err != nil {
			return tokenOutcome(parent, err)
		}
	}
	req, err := c.newRequest(dialCtx, r)
	if err != nil {
		return Outcome{Class: Rejected, Err: err}
	}
	if token != nil {
		req.Header["Authorization"] = []string{token.Type() + " " + token.AccessToken}
	}
	doer := c.doer
	if r.TLS != nil && req.URL.Scheme == "https" {
		if doer, err = c.tlsDoer(r.TLS); err != nil {
			return Outcome{Class: Rejected, Err: err}
		}
	}

	resp, err := doer.Do(req)
	if err != nil {
		return transportOutcome(parent, ctx, req, timeout, err)
	}
	o := Outcome{Class: classify(resp.StatusCode), Status: resp.StatusCode}
	if token != nil && resp.StatusCode == http.StatusUnauthorized {
		// The token was revoked or expired early: the next attempt fetches
		// another, so the 401 is a failure to retry, not a refusal.
		c.tokens.drop(ctx, r.OAuth2, token)
		o.Class = Retryable
	}
	var cut bool
	o.Body, cut = c.drain(resp.Body)
	if r.Inspect {
		o.Header, o.BodyCut = resp.Header, cut
	}
	if o.Class != Delivered {
		o.Err = fmt.Errorf("%w: %s", ErrStatus, statusString(resp.StatusCode))
	}
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		o.RetryAfter, o.RetryAfterSet = ParseRetryAfter(resp.Header.Get("Retry-After"), c.now())
	}
	o.QuotaReset, o.QuotaExhausted = ParseRateLimitReset(resp.Header, c.now())
	return o
}

// newRequest builds the signed POST for r, or says why it cannot be built.
func (c *Client) newRequest(ctx context.Context, r Request) (*http.Request, error) {
	if r.ID == "" {
		return nil, fmt.Errorf("%w: empty ID (webhook-id is required)", ErrInvalidRequest)
	}
	if r.ContentType != "" && !validHeaderValue(r.ContentType) {
		return nil, fmt.Errorf("%w: content type %q is not a valid header value", ErrInvalidRequest, r.ContentType)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.URL, bytes.NewReader(r.Body))
	if err != nil {
		// url.Error repeats the URL, which may hold credentials; keep only
		// the reason.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return nil, fmt.Errorf("%w: URL does not parse: %w", ErrInvalidRequest, err)
	}
	if u := req.URL; (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%w: URL must be absolute http or https, got %s", ErrInvalidRequest, redactURL(u))
	}

	h := make(http.Header, len(r.Header)+6)
	for name, values := range r.Header {
		if !validHeaderName(name) {
			return nil, fmt.Errorf("%w: header name %q is not valid", ErrInvalidRequest, name)
		}
		key := textproto.CanonicalMIMEHeaderKey(name)
		if reservedHeader(key) {
			continue
		}
		for _, v := range values {
			if !validHeaderValue(v) {
				return nil, fmt.Errorf("%w: header %s has a value that is not valid", ErrInvalidRequest, key)
			}
			h.Add(key, v)
		}
	}
	// The delivery's own headers share one backing array (canonical keys,
	// set directly): one allocation instead of one per header.
	own := make([]string, 0, 5)
	set := func(key, value string) {
		own = append(own, value)
		h[key] = own[len(own)-1 : len(own) : len(own)]
	}
	if h.Get("User-Agent") == "" {
		set("User-Agent", c.userAgent)
	}
	ts := c.now().Unix()
	id := WebhookID(r.ID)
	set("Webhook-Id", id)
	set("Webhook-Timestamp", strconv.FormatInt(ts, 10))
	if len(r.Keys) > 0 || len(r.SigningKeys) > 0 {
		set("Webhook-Signature", SignatureHeader(r.Keys, r.SigningKeys, id, ts, r.Body))
	}
	if id != r.ID && validHeaderValue(r.ID) {
		h["Relay-Event-Id"] = []string{r.ID}
	}
	ct := r.ContentType
	if ct == "" {
		ct = DefaultContentType
	}
	set("Content-Type", ct)
	req.Header = h
	return req, nil
}

// drain reads at most c.maxBody bytes of body, keeping the first
// maxOutcomeBody of them, and closes it; cut says that it read more than it
// kept. Reading a small body to its end is what lets the transport reuse the
// connection; stopping at the limit is what keeps a subscriber from making
// relay download without end. Read errors do not matter: the status has
// already decided the outcome.
func (c *Client) drain(body io.ReadCloser) (kept string, cut bool) {
	defer body.Close()
	limited := io.LimitReader(body, c.maxBody)
	bp := outcomeBufs.Get().(*[maxOutcomeBody]byte)
	defer outcomeBufs.Put(bp)
	n, _ := io.ReadFull(limited, bp[:min(c.maxBody, maxOutcomeBody)])
	rest, _ := io.Copy(io.Discard, limited)
	return string(bp[:n]), rest > 0
}

// outcomeBufs holds the buffers drain reads into: most replies have an
// empty or short body, and a kilobyte allocated per request was the
// largest allocation of a delivery.
var outcomeBufs = sync.Pool{New: func() any { return new([maxOutcomeBody]byte) }}

// transportOutcome classifies an attempt that got no reply. attempt is the
// attempt's own context: once its timeout has passed, the attempt timed
// out, whatever error the transport reports (a dial the timeout ended, see
// boundToAttempt, fails with context.Canceled, and the transport may report
// that rather than the request's DeadlineExceeded).
func transportOutcome(parent, attempt context.Context, req *http.Request, timeout time.Duration, err error) Outcome {
	var uerr *url.Error
	if errors.As(err, &uerr) {
		uerr.URL = redactURL(req.URL)
	}
	if o, ok := notTheReceivers(parent, err); ok {
		return o
	}
	if isTimeout(err) || errors.Is(attempt.Err(), context.DeadlineExceeded) {
		if timeout > 0 {
			return Outcome{Class: Retryable, Err: fmt.Errorf("%w after %s: %w", ErrTimeout, timeout, err)}
		}
		return Outcome{Class: Retryable, Err: fmt.Errorf("%w: %w", ErrTimeout, err)}
	}
	return Outcome{Class: Retryable, Err: fmt.Errorf("%w: %w", ErrConnection, err)}
}

// tlsDoer is the Doer of a receiver with a TLS setting of its own.
func (c *Client) tlsDoer(t *TLS) (Doer, error) {
	if c.tlsDoers == nil {
		return nil, fmt.Errorf("%w: a Client with a Doer of its own cannot apply a receiver's TLS setting", ErrTLS)
	}
	return c.tlsDoers.get(t, c.now())
}

// tokenOutcome classifies an attempt whose access token could not be had:
// as a request without a reply when it failed on relay's side, else a
// failure of the receiver's side to retry.
func tokenOutcome(parent context.Context, err error) Outcome {
	if o, ok := notTheReceivers(parent, err); ok {
		return o
	}
	return Outcome{Class: Retryable, Err: err}
}

// notTheReceivers classifies a failure that is not the receiver's: a
// target the SSRF guard refused, the caller's cancellation, or a dial that
// failed for want of a local resource. ok is false for any other.
func notTheReceivers(parent context.Context, err error) (Outcome, bool) {
	switch {
	case errors.Is(err, ErrRefused):
		return Outcome{Class: Refused, Err: fmt.Errorf("%w (relay run --allow-private-targets allows it)", err)}, true
	case errors.Is(parent.Err(), context.Canceled):
		// The caller's cancellation, not the attempt's timeout (which ends
		// only the derived context, with DeadlineExceeded). The transport's
		// own error may be context.Canceled or a closed connection, so the
		// parent says what happened.
		return Outcome{Class: Local, Err: fmt.Errorf("%w: attempt cancelled: %w", ErrLocal, err)}, true
	case localDialFailure(err):
		return Outcome{Class: Local, Err: fmt.Errorf("%w: %w", ErrLocal, err)}, true
	case proxyFailure(err):
		// The egress proxy down, or refusing the tunnel: relay's own path.
		return Outcome{Class: Local, Err: fmt.Errorf("%w: %w: %w", ErrLocal, ErrProxy, err)}, true
	}
	return Outcome{}, false
}

// isTimeout says whether err is a deadline: the attempt's own, or one inside
// the transport (dial, TLS handshake).
func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var nerr net.Error
	return errors.As(err, &nerr) && nerr.Timeout()
}

// redactURL prints u without credentials, query or fragment, where tokens
// tend to hide, for errors that end up in logs and dead-letter records.
func redactURL(u *url.URL) string {
	v := *u
	v.User = nil
	v.RawQuery = ""
	v.ForceQuery = false
	v.Fragment = ""
	v.RawFragment = ""
	return v.String()
}

// statusString is "503 Service Unavailable", or the bare number for a status
// without a standard name.
func statusString(code int) string {
	if text := http.StatusText(code); text != "" {
		return strconv.Itoa(code) + " " + text
	}
	return strconv.Itoa(code)
}

// reservedHeader says whether a canonical header name belongs to the delivery
// itself, so a subscriber's configured headers may not set it.
func reservedHeader(key string) bool {
	if strings.HasPrefix(key, "Webhook-") {
		return true
	}
	switch key {
	case "Content-Type", "Content-Length", "Transfer-Encoding", "Connection", "Host", "Relay-Event-Id":
		return true
	}
	return false
}

// validHeaderName says whether name is an RFC 9110 token. The transport would
// refuse the request anyway, but as a connection failure that looks
// retryable; checking here makes it the permanent error it is.
func validHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for i := range len(name) {
		if !isTokenChar(name[i]) {
			return false
		}
	}
	return true
}

func isTokenChar(b byte) bool {
	switch {
	case b >= 'a' && b <= 'z', b >= 'A' && b <= 'Z', b >= '0' && b <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", b) >= 0
}

// validHeaderValue says whether v can be sent as a header value: no control
// characters other than tab, so no CR or LF to split the header.
func validHeaderValue(v string) bool {
	for i := range len(v) {
		if b := v[i]; (b < ' ' && b != '\t') || b == 0x7f {
			return false
		}
	}
	return true
}
