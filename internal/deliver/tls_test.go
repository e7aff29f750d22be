package deliver

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/testutil"
)

// startMTLSReceiver is an https receiver whose certificate the server CA
// signed and that requires a client certificate the client CA signed; it
// counts the requests it accepted.
func startMTLSReceiver(t *testing.T, serverCA, clientCA *testutil.CA) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var accepted atomic.Int32
	srv := testutil.StartMTLSServer(t, serverCA, clientCA, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		accepted.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	return srv, &accepted
}

// TestMutualTLS: a receiver that requires a client certificate from its CA
// and serves a certificate of a private CA accepts a request made with the
// subscriber's certificate and that CA; without the certificate the
// handshake fails, and without the CA the receiver is not trusted. Each
// setting has connections of its own: a connection made with one
// certificate never carries a request of a setting without it.
func TestMutualTLS(t *testing.T) {
	t.Parallel()
	serverCA, clientCA := testutil.NewCA(t, "receiver CA"), testutil.NewCA(t, "client CA")
	srv, accepted := startMTLSReceiver(t, serverCA, clientCA)
	client := clientCA.Client(t, "relay-client")
	c, err := NewClient(WithAllowPrivate(true))
	require.NoError(t, err)
	full := &TLS{ClientCert: client.CertPEM, ClientKey: client.KeyPEM, CACert: serverCA.CertPEM}
	require.NoError(t, full.Check())
	send := func(setting *TLS) Outcome {
		return c.Send(t.Context(), Request{URL: srv.URL, ID: "ev-1", Body: []byte(`{}`), TLS: setting})
	}
	for range 3 {
		out := send(full)
		require.Equal(t, Delivered, out.Class, "%v", out.Err)
	}
	require.EqualValues(t, 3, accepted.Load())

	out := send(&TLS{CACert: serverCA.CertPEM}) // trusted, but no client certificate
	require.Equal(t, Retryable, out.Class)
	require.ErrorIs(t, out.Err, ErrConnection)
	out = send(nil) // neither
	require.Equal(t, Retryable, out.Class)
	require.Contains(t, out.Err.Error(), "certificate")
	out = send(&TLS{ClientCert: client.CertPEM, ClientKey: client.KeyPEM}) // the receiver's CA not trusted
	require.Equal(t, Retryable, out.Class)
	require.Contains(t, out.Err.Error(), "unknown authority")
	require.EqualValues(t, 3, accepted.Load())

	// A plain http URL with a TLS setting goes as any request.
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) }))
	t.Cleanup(plain.Close)
	out = c.Send(t.Context(), Request{URL: plain.URL, ID: "ev-1", TLS: full})
	require.Equal(t, Delivered, out.Class, "%v", out.Err)
}

// TestTLSCheck: every wrong setting says what is wrong in one line that
// quotes nothing of the key.
func TestTLSCheck(t *testing.T) {
	t.Parallel()
	ca := testutil.NewCA(t, "ca")
	a, b := ca.Client(t, "a"), ca.Client(t, "b")
	for _, c := range []struct {
		setting TLS
		want    string
	}{
		{TLS{ClientCert: a.CertPEM}, "needs its private key"},
		{TLS{ClientKey: a.KeyPEM}, "needs its client certificate"},
		{TLS{ClientCert: a.CertPEM, ClientKey: b.KeyPEM}, "does not match"},
		{TLS{ClientCert: a.KeyPEM, ClientKey: a.KeyPEM}, "holds a PRIVATE KEY block"},
		{TLS{ClientCert: "not pem", ClientKey: a.KeyPEM}, "is not PEM"},
		{TLS{ClientCert: a.CertPEM + "trailing", ClientKey: a.KeyPEM}, "text after"},
		{TLS{CACert: "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"}, "CA certificate"},
	} {
		err := c.setting.Check()
		require.ErrorIs(t, err, ErrTLS)
		require.Contains(t, err.Error(), c.want)
		require.NotContains(t, err.Error(), strings.Split(a.KeyPEM, "\n")[1][:20])
		require.NotContains(t, err.Error(), "\n")
	}
}
