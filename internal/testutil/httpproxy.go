package testutil

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// HTTPProxy is an HTTP proxy for tests, as an egress proxy is: it forwards
// absolute-form requests (http targets) and tunnels CONNECT (https
// targets), and counts what passes, by target host:port.
type HTTPProxy struct {
	*httptest.Server
	mu       sync.Mutex
	requests map[string]int
	connects map[string]int
	// answer, when set, answers requests for these hosts itself (200),
	// without forwarding: a target the test cannot reach.
	answer map[string]bool
	// refuse answers every CONNECT with this status (0: tunnel).
	refuse int
	// routes send what is asked of a name (host:port) to a real address:
	// a receiver under a name the proxy alone resolves (relay never proxies
	// a loopback target, as curl does not).
	routes map[string]string
	// transport forwards; it never takes a proxy from the environment.
	transport *http.Transport
	// tunnels are the open tunnels' connections, closed with the proxy,
	// and their goroutines.
	tunnels []net.Conn
	wg      sync.WaitGroup
}

// StartHTTPProxy starts a proxy on a loopback port, closed when the test
// ends.
func StartHTTPProxy(t testing.TB) *HTTPProxy {
	t.Helper()
	p := &HTTPProxy{requests: map[string]int{}, connects: map[string]int{}, answer: map[string]bool{}, routes: map[string]string{},
		transport: &http.Transport{}}
	p.Server = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(func() {
		p.Close()
		p.transport.CloseIdleConnections()
		p.mu.Lock()
		for _, c := range p.tunnels {
			_ = c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

// AnswerFor makes the proxy answer requests for host:port itself.
func (p *HTTPProxy) AnswerFor(hostport string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.answer[hostport] = true
}

// Route makes the proxy reach name (host:port) at addr (host:port).
func (p *HTTPProxy) Route(name, addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.routes[name] = addr
}

// withPort is hostport with the scheme's default port when it has none.
func withPort(hostport, port string) string {
	if _, _, err := net.SplitHostPort(hostport); err == nil {
		return hostport
	}
	return net.JoinHostPort(hostport, port)
}

// RefuseConnect makes the proxy answer every CONNECT with status.
func (p *HTTPProxy) RefuseConnect(status int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refuse = status
}

// Requests is how many absolute-form requests for host:port passed.
func (p *HTTPProxy) Requests(hostport string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.requests[hostport]
}

// Connects is how many tunnels to host:port were asked for.
func (p *HTTPProxy) Connects(hostport string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.connects[hostport]
}

// Total is every request and tunnel asked of the proxy.
func (p *HTTPProxy) Total() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, c := range p.requests {
		n += c
	}
	for _, c := range p.connects {
		n += c
	}
	return n
}

func (p *HTTPProxy) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect {
		p.tunnel(w, r)
		return
	}
	target := withPort(r.URL.Host, "80")
	p.mu.Lock()
	p.requests[target]++
	answer, route := p.answer[target], p.routes[target]
	p.mu.Unlock()
	if answer || !r.URL.IsAbs() {
		w.WriteHeader(http.StatusOK)
		return
	}
	out := r.Clone(r.Context())
	out.RequestURI = ""
	if route != "" {
		out.URL.Host = route
	}
	out.Header.Del("Proxy-Authorization")
	resp, err := p.transport.RoundTrip(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

func (p *HTTPProxy) tunnel(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	p.connects[r.Host]++
	refuse, addr := p.refuse, p.routes[r.Host]
	p.mu.Unlock()
	if refuse != 0 {
		w.WriteHeader(refuse)
		return
	}
	if addr == "" {
		addr = r.Host
	}
	upstream, err := net.Dial("tcp", addr)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		_ = upstream.Close()
		http.Error(w, "no hijacking", http.StatusInternalServerError)
		return
	}
	client, buf, err := hj.Hijack()
	if err != nil {
		_ = upstream.Close()
		return
	}
	if _, err := client.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
		_ = upstream.Close()
		_ = client.Close()
		return
	}
	p.mu.Lock()
	p.tunnels = append(p.tunnels, client, upstream)
	p.mu.Unlock()
	p.wg.Go(func() {
		_, _ = io.Copy(upstream, buf)
		_ = upstream.Close()
	})
	p.wg.Go(func() {
		_, _ = io.Copy(client, upstream)
		_ = client.Close()
	})
}
