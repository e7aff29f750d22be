package deliver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http/httpproxy"
)

// Proxy is the egress proxy every webhook request (and every OAuth2 grant)
// goes through: an HTTP proxy, spoken to in absolute form for an http
// target and with CONNECT for an https one, as HTTPS_PROXY, HTTP_PROXY and
// NO_PROXY say for curl and Go. A receiver that allows one egress address
// sees the proxy's.
type Proxy struct {
	// HTTP and HTTPS are the proxies of http and https targets, "" for
	// none: an http:// or https:// URL, or a host:port taken as http://,
	// with a user and password for a proxy that asks for them.
	HTTP, HTTPS string
	// NoProxy lists the targets reached directly, in NO_PROXY's syntax:
	// comma-separated host names (a leading "." or "*." for their
	// subdomains), IP addresses, CIDR ranges, each with an optional port;
	// "*" for all.
	NoProxy string
}

// ErrProxy means the egress proxy failed an attempt before the receiver
// answered: it could not be reached, or it refused to open the tunnel
// (CONNECT answered other than 200). The attempt is [Local]: relay's own
// path failed, not the receiver.
var ErrProxy = errors.New("egress proxy failed")

// ProxyFromEnvironment is the proxy HTTPS_PROXY, HTTP_PROXY and NO_PROXY
// (or their lower-case spellings) name; the zero Proxy when they name none.
func ProxyFromEnvironment() Proxy {
	c := httpproxy.FromEnvironment()
	return Proxy{HTTP: c.HTTPProxy, HTTPS: c.HTTPSProxy, NoProxy: c.NoProxy}
}

// Enabled reports whether p sends anything through a proxy.
func (p Proxy) Enabled() bool { return p.HTTP != "" || p.HTTPS != "" }

// Redacted is p safe to print: without a proxy's password.
func (p Proxy) Redacted() Proxy {
	hide := func(raw string) string {
		u, err := parseProxy(raw)
		if err != nil || u == nil {
			return raw
		}
		return u.Redacted()
	}
	return Proxy{HTTP: hide(p.HTTP), HTTPS: hide(p.HTTPS), NoProxy: p.NoProxy}
}

// Check reports whether p's proxy URLs can be used, wrapping
// [ErrInvalidOption]; it never quotes a password.
func (p Proxy) Check() error {
	for _, raw := range []string{p.HTTP, p.HTTPS} {
		if _, err := parseProxy(raw); err != nil {
			return err
		}
	}
	return nil
}

// parseProxy parses a proxy URL as httpproxy does (a bare host:port is
// http://host:port); nil for "".
func parseProxy(raw string) (*url.URL, error) {
	if raw == "" {
		return nil, nil
	}
	s := raw
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		shown := raw
		if err == nil {
			shown = u.Redacted()
		} else {
			shown = "one that does not parse"
		}
		return nil, fmt.Errorf("%w: a proxy is an http:// or https:// URL with a host (socks5 is not supported), got %s", ErrInvalidOption, shown)
	}
	return u, nil
}

// proxyAddr is a proxy URL's host:port, with the scheme's port when it has
// none: the address the transport dials for it.
func proxyAddr(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// WithProxy sends every request through the egress proxy p (the zero
// Proxy: none). The SSRF guard then judges each target itself, resolving
// its name before the request goes to the proxy (the proxy's own address
// is the operator's choice, and is not judged); a target the guard refuses
// never reaches the proxy. A name that resolves to another address by the
// time the proxy resolves it (DNS rebinding) is the proxy's to refuse.
func WithProxy(p Proxy) Option {
	return func(c *Client) error {
		if err := p.Check(); err != nil {
			return err
		}
		c.proxy = p
		return nil
	}
}

// egress is the proxying of one Client's default Doers: which proxy a
// request goes through, which dials are to a proxy, and the SSRF verdicts
// on the targets it sends there.
type egress struct {
	// via returns the proxy of a request's URL, nil for a direct request.
	via func(*url.URL) (*url.URL, error)
	// proxies are the proxies' host:port addresses.
	proxies map[string]bool
	// targets caches the SSRF verdicts on proxied targets; nil when the
	// guard is off.
	targets *targetVerdicts
}

func newEgress(p Proxy, allowPrivate bool) *egress {
	if !p.Enabled() {
		return nil
	}
	e := &egress{proxies: map[string]bool{}}
	for _, raw := range []string{p.HTTP, p.HTTPS} {
		if u, _ := parseProxy(raw); u != nil {
			e.proxies[proxyAddr(u)] = true
		}
	}
	e.via = (&httpproxy.Config{HTTPProxy: p.HTTP, HTTPSProxy: p.HTTPS, NoProxy: p.NoProxy}).ProxyFunc()
	if !allowPrivate {
		e.targets = newTargetVerdicts()
	}
	return e
}

// proxyOf is the Transport's Proxy hook.
func (e *egress) proxyOf(req *http.Request) (*url.URL, error) { return e.via(req.URL) }

// isProxy reports whether a dial to addr is one to a proxy, not a target.
func (e *egress) isProxy(addr string) bool { return e != nil && e.proxies[addr] }

// check refuses, before a request goes to the proxy, a target the SSRF
// guard would refuse to dial: a private address, or a name that resolves
// to one. It reports whether the request goes through the proxy.
func (e *egress) check(req *http.Request) (bool, error) {
	p, err := e.via(req.URL)
	if err != nil {
		return false, fmt.Errorf("%w: %w", ErrProxy, err)
	}
	if p == nil {
		return false, nil
	}
	if e.targets != nil {
		if err := e.targets.check(req.Context(), req.URL.Hostname()); err != nil {
			return true, err
		}
	}
	return true, nil
}

// proxyFailure says whether err, from a proxied request, is the proxy's:
// its dial failed (net/http's "proxyconnect"), or it refused the tunnel.
func proxyFailure(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "proxyconnect" {
		return true
	}
	return errors.Is(err, ErrProxy)
}

// refuseTunnel is the Transport's OnProxyConnectResponse: a CONNECT the
// proxy did not accept is the proxy's failure, named for what it said.
func refuseTunnel(_ context.Context, proxy *url.URL, _ *http.Request, resp *http.Response) error {
	if resp.StatusCode == http.StatusOK {
		return nil
	}
	return fmt.Errorf("%w: %s answered CONNECT with %s", ErrProxy, proxy.Redacted(), statusString(resp.StatusCode))
}

// proxyTLS is the TLS configuration of a connection to an https proxy:
// the system's roots, not a receiver's setting.
func proxyTLS(addr string) *tls.Config {
	host, _, _ := net.SplitHostPort(addr)
	return &tls.Config{ServerName: host, NextProtos: []string{"http/1.1"}}
}

// targetVerdicts are the SSRF guard's verdicts on the hosts of proxied targets,
// each kept for verdictFor: a proxied request costs no DNS lookup of its
// own, as a direct one reusing its connection costs none.
type targetVerdicts struct {
	mu   sync.Mutex
	byIt map[string]targetVerdict
	// swept is the number of verdicts after the last sweep.
	swept int
}

// targetVerdict is one host's verdict and when it was made.
type targetVerdict struct {
	err error
	at  time.Time
}

// verdictFor is how long a verdict on a host stands: a DNS answer's usual
// life.
const verdictFor = time.Minute

func newTargetVerdicts() *targetVerdicts { return &targetVerdicts{byIt: map[string]targetVerdict{}} }

// check is the verdict on host: refused when it is, or resolves to, an
// address [CheckAddr] refuses; an error wrapping [ErrConnection] when it
// does not resolve.
func (v *targetVerdicts) check(ctx context.Context, host string) error {
	now := time.Now()
	v.mu.Lock()
	if got, ok := v.byIt[host]; ok && now.Sub(got.at) < verdictFor {
		v.mu.Unlock()
		return got.err
	}
	v.mu.Unlock()
	err := judge(ctx, host)
	if ctx.Err() != nil {
		return err // this attempt's end, not a verdict
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.byIt) >= 2*v.swept+64 {
		for h, got := range v.byIt {
			if now.Sub(got.at) >= verdictFor {
				delete(v.byIt, h)
			}
		}
		v.swept = len(v.byIt)
	}
	v.byIt[host] = targetVerdict{err: err, at: now}
	return err
}

// judge resolves host (an address is itself) and refuses it when any of its
// addresses is one the guard refuses: the proxy may dial any of them.
func judge(ctx context.Context, host string) error {
	if strings.EqualFold(strings.TrimSuffix(host, "."), "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return fmt.Errorf("%w: %s is loopback", ErrRefused, host)
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return CheckAddr(ip)
	}
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return fmt.Errorf("%w: resolving %s before asking the proxy: %w", ErrConnection, host, err)
	}
	for _, ip := range addrs {
		if err := CheckAddr(ip); err != nil {
			return fmt.Errorf("%w (%s resolves to it)", err, host)
		}
	}
	return nil
}
