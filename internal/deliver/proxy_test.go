package deliver

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/testutil"
)

func hostOf(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	require.NoError(t, err)
	return u.Host
}

// TestProxyCarriesHTTPAndHTTPS: through an egress proxy, an http target is
// asked in absolute form and an https one through a CONNECT tunnel (with
// the subscriber's TLS setting, a client certificate included, spoken end
// to end with the receiver); a target NO_PROXY names goes direct. The
// receivers have names only the proxy resolves: relay never proxies a
// loopback target.
func TestProxyCarriesHTTPAndHTTPS(t *testing.T) {
	t.Parallel()
	proxy := testutil.StartHTTPProxy(t)
	var plainHits atomic.Int32
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		plainHits.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(plain.Close)
	serverCA, clientCA := testutil.NewCA(t, "receiver CA"), testutil.NewCA(t, "client CA")
	secure := testutil.StartMTLSServer(t, serverCA, clientCA, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}), "secure.receiver.test")
	proxy.Route("plain.receiver.test:80", hostOf(t, plain.URL))
	proxy.Route("secure.receiver.test:443", hostOf(t, secure.URL))
	cert := clientCA.Client(t, "relay")
	setting := &TLS{ClientCert: cert.CertPEM, ClientKey: cert.KeyPEM, CACert: serverCA.CertPEM}

	c, err := NewClient(WithAllowPrivate(true), WithProxy(Proxy{HTTP: proxy.URL, HTTPS: proxy.URL}))
	require.NoError(t, err)
	t.Cleanup(c.CloseIdleConnections)
	for range 3 {
		out := c.Send(t.Context(), Request{URL: "http://plain.receiver.test/hook", ID: "ev-1", Body: []byte(`{}`)})
		require.Equal(t, Delivered, out.Class, "%v", out.Err)
		out = c.Send(t.Context(), Request{URL: "https://secure.receiver.test/hook", ID: "ev-1", Body: []byte(`{}`), TLS: setting})
		require.Equal(t, Delivered, out.Class, "%v", out.Err)
	}
	require.Equal(t, 3, proxy.Requests("plain.receiver.test:80"), "each http request in absolute form")
	require.Equal(t, 1, proxy.Connects("secure.receiver.test:443"), "one tunnel, kept alive")
	require.EqualValues(t, 3, plainHits.Load())

	// Without the client certificate, the receiver refuses the handshake
	// through the tunnel: the receiver's failure, not the proxy's.
	out := c.Send(t.Context(), Request{URL: "https://secure.receiver.test/hook", ID: "ev-1", Body: []byte(`{}`), TLS: &TLS{CACert: serverCA.CertPEM}})
	require.Equal(t, Retryable, out.Class, "%v", out.Err)

	direct, err := NewClient(WithAllowPrivate(true), WithProxy(Proxy{HTTP: proxy.URL, NoProxy: ".receiver.test"}))
	require.NoError(t, err)
	before := proxy.Total()
	out = direct.Send(t.Context(), Request{URL: "http://plain.receiver.test/hook", ID: "ev-2", Body: []byte(`{}`)})
	require.NotEqual(t, Delivered, out.Class, "NO_PROXY: dialled directly, where the name does not resolve")
	require.Equal(t, before, proxy.Total(), "NO_PROXY: the proxy is not asked")
}

// TestProxyAfterTheSSRFGuard: with the guard on, a private target is
// refused before the proxy is asked (the proxy itself, on loopback, is the
// operator's and is dialled), and a public one goes through it.
func TestProxyAfterTheSSRFGuard(t *testing.T) {
	t.Parallel()
	proxy := testutil.StartHTTPProxy(t)
	proxy.AnswerFor("93.184.215.14:80")
	c, err := NewClient(WithProxy(Proxy{HTTP: proxy.URL, HTTPS: proxy.URL}))
	require.NoError(t, err)
	t.Cleanup(c.CloseIdleConnections)
	for _, target := range []string{"http://127.0.0.1:9/hook", "http://10.1.2.3/hook", "https://[::1]/hook", "http://localhost:8080/", "http://169.254.169.254/latest/meta-data"} {
		out := c.Send(t.Context(), Request{URL: target, ID: "ev-1", Body: []byte(`{}`)})
		require.Equal(t, Refused, out.Class, "%s: %v", target, out.Err)
		require.ErrorIs(t, out.Err, ErrRefused)
	}
	require.Zero(t, proxy.Total(), "a refused target never reaches the proxy")
	out := c.Send(t.Context(), Request{URL: "http://93.184.215.14/hook", ID: "ev-1", Body: []byte(`{}`)})
	require.Equal(t, Delivered, out.Class, "%v", out.Err)
	require.Equal(t, 1, proxy.Requests("93.184.215.14:80"))
}

// TestProxyFailureIsLocal: a proxy that is down, or refuses the tunnel, is
// relay's own path failing: the attempt is Local, not the receiver's.
func TestProxyFailureIsLocal(t *testing.T) {
	t.Parallel()
	down := httptest.NewServer(http.NotFoundHandler())
	downURL := down.URL
	down.Close()
	c, err := NewClient(WithAllowPrivate(true), WithProxy(Proxy{HTTP: downURL, HTTPS: downURL}))
	require.NoError(t, err)
	for _, target := range []string{"http://receiver.test/hook", "https://receiver.test/hook"} {
		out := c.Send(t.Context(), Request{URL: target, ID: "ev-1", Body: []byte(`{}`)})
		require.Equal(t, Local, out.Class, "%s: %v", target, out.Err)
		require.ErrorIs(t, out.Err, ErrProxy)
		require.ErrorIs(t, out.Err, ErrLocal)
	}

	refusing := testutil.StartHTTPProxy(t)
	refusing.RefuseConnect(http.StatusForbidden)
	c, err = NewClient(WithAllowPrivate(true), WithProxy(Proxy{HTTPS: refusing.URL}))
	require.NoError(t, err)
	out := c.Send(t.Context(), Request{URL: "https://receiver.test/hook", ID: "ev-1", Body: []byte(`{}`)})
	require.Equal(t, Local, out.Class, "%v", out.Err)
	require.ErrorIs(t, out.Err, ErrProxy)
	require.Contains(t, out.Err.Error(), "403")
	require.Equal(t, 1, refusing.Connects("receiver.test:443"))
}

// TestProxyOptionRefusesWhatItCannotUse: a proxy URL of another scheme, or
// one that does not parse, is refused without quoting a password.
func TestProxyOptionRefusesWhatItCannotUse(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{"socks5://user:hunter2@proxy:1080", "http://user:hunter2@", "ftp://proxy"} {
		_, err := NewClient(WithProxy(Proxy{HTTPS: raw}))
		require.ErrorIs(t, err, ErrInvalidOption, raw)
		require.NotContains(t, err.Error(), "hunter2")
	}
	require.Equal(t, "http://user:xxxxx@proxy:3128", Proxy{HTTP: "http://user:hunter2@proxy:3128"}.Redacted().HTTP)
}
