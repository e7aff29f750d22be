package deliver

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// failedPost wraps err the way (*http.Client).Do returns a transport error.
func failedPost(err error) error {
	return &url.Error{Op: "Post", URL: "https://hooks.example.com/in", Err: err}
}

// opError is a *net.OpError as net.Dialer or a net.Conn returns it.
func opError(op string, err error) error {
	return &net.OpError{Op: op, Net: "tcp", Addr: net.TCPAddrFromAddrPort(netip.MustParseAddrPort("203.0.113.7:443")), Err: err}
}

// dnsFailure is a failed dial whose name lookup failed with text, as
// net.Dialer wraps a *net.DNSError from the pure Go resolver.
func dnsFailure(text string, temporary bool) error {
	return &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{
		Err: text, Name: "hooks.example.com", Server: "127.0.0.53:53", IsTemporary: temporary,
	}}
}

func TestTransportOutcome(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name      string
		err       error
		want      Class
		sentinel  error
		alsoWraps error
	}{
		// No descriptor, buffer, memory or port on this host: local.
		{name: "EMFILE on socket", err: failedPost(opError("dial", os.NewSyscallError("socket", syscall.EMFILE))),
			want: Local, sentinel: ErrLocal, alsoWraps: syscall.EMFILE},
		{name: "ENFILE on socket", err: failedPost(opError("dial", os.NewSyscallError("socket", syscall.ENFILE))),
			want: Local, sentinel: ErrLocal, alsoWraps: syscall.ENFILE},
		{name: "ENOBUFS on connect", err: failedPost(opError("dial", os.NewSyscallError("connect", syscall.ENOBUFS))),
			want: Local, sentinel: ErrLocal, alsoWraps: syscall.ENOBUFS},
		{name: "ENOMEM on socket", err: failedPost(opError("dial", os.NewSyscallError("socket", syscall.ENOMEM))),
			want: Local, sentinel: ErrLocal, alsoWraps: syscall.ENOMEM},
		{name: "EADDRNOTAVAIL on connect", err: failedPost(opError("dial", os.NewSyscallError("connect", syscall.EADDRNOTAVAIL))),
			want: Local, sentinel: ErrLocal, alsoWraps: syscall.EADDRNOTAVAIL},
		{name: "EADDRNOTAVAIL on bind", err: failedPost(opError("dial", os.NewSyscallError("bind", syscall.EADDRNOTAVAIL))),
			want: Local, sentinel: ErrLocal, alsoWraps: syscall.EADDRNOTAVAIL},
		{name: "EMFILE without url.Error", err: opError("dial", os.NewSyscallError("socket", syscall.EMFILE)),
			want: Local, sentinel: ErrLocal, alsoWraps: syscall.EMFILE},
		{name: "EMFILE in the resolver's socket",
			err:  failedPost(dnsFailure("dial udp 127.0.0.53:53: socket: too many open files", true)),
			want: Local, sentinel: ErrLocal},
		{name: "EADDRNOTAVAIL in the resolver's connect",
			err:  failedPost(dnsFailure("dial udp [::1]:53: connect: cannot assign requested address", true)),
			want: Local, sentinel: ErrLocal},
		{name: "EMFILE from the cgo resolver", err: failedPost(dnsFailure("too many open files", false)),
			want: Local, sentinel: ErrLocal},

		// The subscriber's side, or the network's: an attempt.
		{name: "ECONNREFUSED", err: failedPost(opError("dial", os.NewSyscallError("connect", syscall.ECONNREFUSED))),
			want: Retryable, sentinel: ErrConnection, alsoWraps: syscall.ECONNREFUSED},
		{name: "ENETUNREACH", err: failedPost(opError("dial", os.NewSyscallError("connect", syscall.ENETUNREACH))),
			want: Retryable, sentinel: ErrConnection},
		{name: "ECONNRESET on read", err: failedPost(opError("read", os.NewSyscallError("read", syscall.ECONNRESET))),
			want: Retryable, sentinel: ErrConnection},
		{name: "no such host", err: failedPost(dnsFailure("no such host", false)),
			want: Retryable, sentinel: ErrConnection},
		{name: "resolver text that only mentions an errno",
			err:  failedPost(dnsFailure("server said: too many open files, try later", true)),
			want: Retryable, sentinel: ErrConnection},
		{name: "dial timeout", err: failedPost(opError("dial", os.NewSyscallError("connect", syscall.ETIMEDOUT))),
			want: Retryable, sentinel: ErrTimeout},
		{name: "attempt timeout", err: failedPost(context.DeadlineExceeded),
			want: Retryable, sentinel: ErrTimeout},

		// Once connected, the request may have reached the subscriber:
		// whatever fails next is an attempt, local errno or not.
		{name: "ENOBUFS on write", err: failedPost(opError("write", os.NewSyscallError("write", syscall.ENOBUFS))),
			want: Retryable, sentinel: ErrConnection, alsoWraps: syscall.ENOBUFS},
		{name: "ENOMEM on read", err: failedPost(opError("read", os.NewSyscallError("read", syscall.ENOMEM))),
			want: Retryable, sentinel: ErrConnection},

		// The SSRF guard decides before any errno can.
		{name: "refused by the guard", err: failedPost(opError("dial", CheckAddr(netip.MustParseAddr("127.0.0.1")))),
			want: Refused, sentinel: ErrRefused},
	}
	req, err := http.NewRequest(http.MethodPost, "https://hooks.example.com/in", nil)
	require.NoError(t, err)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o := transportOutcome(t.Context(), t.Context(), req, 10*time.Second, tt.err)
			require.Equal(t, tt.want, o.Class, "err: %v", o.Err)
			require.ErrorIs(t, o.Err, tt.sentinel)
			if tt.alsoWraps != nil {
				require.ErrorIs(t, o.Err, tt.alsoWraps, "the cause stays in the chain")
			}
			for _, other := range []error{ErrLocal, ErrConnection, ErrTimeout, ErrRefused} {
				if other != tt.sentinel {
					require.NotErrorIs(t, o.Err, other)
				}
			}
			require.Zero(t, o.Status)
		})
	}
}

func TestTransportOutcomeCancelledParentIsLocal(t *testing.T) {
	t.Parallel()

	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	req, err := http.NewRequest(http.MethodPost, "https://hooks.example.com/in", nil)
	require.NoError(t, err)

	// Whatever the transport made of the cancellation, the caller's
	// cancelled context says it was the relay stopping.
	for _, cause := range []error{
		failedPost(context.Canceled),
		failedPost(opError("read", errors.New("use of closed network connection"))),
		failedPost(context.DeadlineExceeded),
	} {
		o := transportOutcome(cancelled, cancelled, req, time.Hour, cause)
		require.Equal(t, Local, o.Class, "cause %v", cause)
		require.ErrorIs(t, o.Err, ErrLocal)
		require.ErrorIs(t, o.Err, cause)
		require.NotErrorIs(t, o.Err, ErrTimeout)
	}
}

// A dial that the attempt's timeout ended fails with context.Canceled (see
// boundToAttempt), and the transport may report that error rather than the
// request's DeadlineExceeded: the attempt's own context says it timed out.
func TestTransportOutcomeTimedOutAttemptIsATimeout(t *testing.T) {
	t.Parallel()
	attempt, cancel := context.WithTimeout(t.Context(), -time.Second)
	defer cancel()
	req, err := http.NewRequest(http.MethodPost, "https://hooks.example.com/in", nil)
	require.NoError(t, err)
	o := transportOutcome(t.Context(), attempt, req, time.Second, failedPost(context.Canceled))
	require.Equal(t, Retryable, o.Class, "err: %v", o.Err)
	require.ErrorIs(t, o.Err, ErrTimeout)
}

// TestSendLocalAddressUnavailable makes the kernel refuse a dial with
// EADDRNOTAVAIL, as it does when the ephemeral ports run out, by binding the
// connection to an address this host does not have (TEST-NET-1). It goes
// through the real transport, so it shows how net/http really wraps a local
// dial failure.
func TestSendLocalAddressUnavailable(t *testing.T) {
	t.Parallel()

	srv, got := recordingServer(t, http.StatusOK)
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1)}}
	if conn, err := dialer.DialContext(t.Context(), "tcp", srv.Listener.Addr().String()); !errors.Is(err, syscall.EADDRNOTAVAIL) {
		if conn != nil {
			_ = conn.Close()
		}
		t.Skipf("this host lets a socket bind to 192.0.2.1 (net.ipv4.ip_nonlocal_bind?): dial gave %v", err)
	}
	transport := &http.Transport{Proxy: nil, DialContext: dialer.DialContext}
	t.Cleanup(transport.CloseIdleConnections)

	o := newTestClient(t, WithDoer(&http.Client{Transport: transport})).
		Send(t.Context(), Request{URL: srv.URL, ID: "evt_noport"})
	t.Logf("outcome: %s: %v", o.Class, o.Err)
	require.Equal(t, Local, o.Class, "err: %v", o.Err)
	require.ErrorIs(t, o.Err, ErrLocal)
	require.ErrorIs(t, o.Err, syscall.EADDRNOTAVAIL)
	require.NotErrorIs(t, o.Err, ErrConnection)
	require.Zero(t, o.Status)
	require.Empty(t, got, "nothing reaches the subscriber")
}
