package testutil

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// FreeAddr returns a loopback HOST:PORT free when asked, for a server a
// test starts (or starts again) on a port of its choosing. The port is
// taken below the kernel's ephemeral range where it can, so that a
// connection some parallel test opens meanwhile cannot take it, as it can a
// port the kernel handed out.
func FreeAddr(t testing.TB) string {
	t.Helper()
	const lowest = 10000
	if low := ephemeralPortsFrom(); low > lowest {
		for range 100 {
			addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(lowest+rand.IntN(low-lowest)))
			if ln, err := net.Listen("tcp", addr); err == nil {
				_ = ln.Close()
				return addr
			}
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// ephemeralPortsFrom is the first port of Linux's ephemeral range, or 0.
func ephemeralPortsFrom() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	fields := strings.Fields(string(b))
	if len(fields) != 2 {
		return 0
	}
	low, err := strconv.Atoi(fields[0])
	if err != nil {
		return 0
	}
	return low
}
