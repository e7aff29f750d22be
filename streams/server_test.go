package streams_test

import (
	"net"
	"net/url"
	"testing"

	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

// TestLocalURLReachesTheServerWhereverItListens: relay run dials its
// embedded server at LocalURL, so it must be dialable whatever --listen
// says, an address on every interface included.
func TestLocalURLReachesTheServerWhereverItListens(t *testing.T) {
	t.Parallel()
	for _, listen := range []string{"127.0.0.1:0", "0.0.0.0:0", "[::]:0"} {
		t.Run(listen, func(t *testing.T) {
			t.Parallel()
			srv, err := streams.StartServer(streams.ServerConfig{Listen: listen, DataDir: t.TempDir()})
			if err != nil {
				t.Skipf("no server on %s here: %v", listen, err)
			}
			t.Cleanup(func() {
				srv.Shutdown()
				srv.WaitForShutdown()
			})
			got, err := streams.LocalURL(srv)
			if err != nil {
				t.Fatal(err)
			}
			u, err := url.Parse(got)
			if err != nil {
				t.Fatalf("LocalURL = %q: %v", got, err)
			}
			if ip := net.ParseIP(u.Hostname()); ip == nil || !ip.IsLoopback() || u.Port() == "0" || u.Port() == "" {
				t.Fatalf("LocalURL = %q, want a loopback address and the port the server took", got)
			}
			testutil.Connect(t, got)
		})
	}
}
