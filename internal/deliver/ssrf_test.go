package deliver

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCheckAddr(t *testing.T) {
	t.Parallel()

	tests := []struct {
		addr    string
		allowed bool
		reason  string
	}{
		{addr: "127.0.0.1", reason: "loopback"},
		{addr: "127.255.0.9", reason: "loopback"},
		{addr: "::1", reason: "loopback"},
		{addr: "::ffff:127.0.0.1", reason: "loopback"},
		{addr: "10.0.0.1", reason: "private"},
		{addr: "::ffff:10.0.0.1", reason: "private"},
		{addr: "172.16.0.1", reason: "private"},
		{addr: "172.31.255.254", reason: "private"},
		{addr: "192.168.1.1", reason: "private"},
		{addr: "fc00::1", reason: "private"},
		{addr: "fd12:3456::1", reason: "private"},
		{addr: "169.254.169.254", reason: "link-local"},
		{addr: "fe80::1", reason: "link-local"},
		{addr: "fe80::1%eth0", reason: "link-local"},
		{addr: "100.64.1.1", reason: "CGNAT"},
		{addr: "100.127.255.255", reason: "CGNAT"},
		{addr: "224.0.0.1", reason: "multicast"},
		{addr: "239.255.255.250", reason: "multicast"},
		{addr: "ff02::1", reason: "multicast"},
		{addr: "0.0.0.0", reason: "unspecified"},
		{addr: "::", reason: "unspecified"},
		{addr: "0.1.2.3", reason: "0.0.0.0/8"},
		{addr: "255.255.255.255", reason: "broadcast"},
		{addr: "64:ff9b::a00:1", reason: "private"}, // NAT64 of 10.0.0.1
		{addr: "64:ff9b::808:808", allowed: true},   // NAT64 of 8.8.8.8
		{addr: "8.8.8.8", allowed: true},
		{addr: "1.1.1.1", allowed: true},
		{addr: "100.63.255.255", allowed: true},
		{addr: "100.128.0.0", allowed: true},
		{addr: "172.32.0.1", allowed: true},
		{addr: "::ffff:8.8.8.8", allowed: true},
		{addr: "2001:4860::1", allowed: true},
		{addr: "2606:4700:4700::1111", allowed: true},
	}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			t.Parallel()
			err := CheckAddr(netip.MustParseAddr(tt.addr))
			if tt.allowed {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrRefused)
			require.ErrorContains(t, err, tt.addr, "the error names the address")
			require.ErrorContains(t, err, tt.reason)
		})
	}

	t.Run("zero value", func(t *testing.T) {
		t.Parallel()
		require.ErrorIs(t, CheckAddr(netip.Addr{}), ErrRefused)
	})
}

// TestCheckAddrRangeEdges puts each range the guard refuses beyond
// netip's own predicates between its first and last address and the
// addresses just outside it, so that a prefix one bit too short or too
// long fails here. Where the neighbour of a range is refused for another
// reason, the reason says which rule refused it.
func TestCheckAddrRangeEdges(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		addr    string
		allowed bool
		reason  string
	}{
		// 100.64.0.0/10, CGNAT.
		{name: "CGNAT first", addr: "100.64.0.0", reason: "CGNAT"},
		{name: "CGNAT last", addr: "100.127.255.255", reason: "CGNAT"},
		{name: "CGNAT below", addr: "100.63.255.255", allowed: true},
		{name: "CGNAT above", addr: "100.128.0.0", allowed: true},
		{name: "CGNAT mapped", addr: "::ffff:100.64.0.1", reason: "CGNAT"},

		// 192.0.0.0/24, IETF protocol assignments.
		{name: "IETF first", addr: "192.0.0.0", reason: "IETF protocol assignments"},
		{name: "IETF last", addr: "192.0.0.255", reason: "IETF protocol assignments"},
		{name: "IETF below", addr: "191.255.255.255", allowed: true},
		{name: "IETF above", addr: "192.0.1.0", allowed: true},
		{name: "IETF mapped", addr: "::ffff:192.0.0.8", reason: "IETF protocol assignments"},

		// 198.18.0.0/15, benchmarking.
		{name: "benchmarking first", addr: "198.18.0.0", reason: "benchmarking"},
		{name: "benchmarking last", addr: "198.19.255.255", reason: "benchmarking"},
		{name: "benchmarking below", addr: "198.17.255.255", allowed: true},
		{name: "benchmarking above", addr: "198.20.0.0", allowed: true},
		{name: "benchmarking mapped", addr: "::ffff:198.18.0.1", reason: "benchmarking"},

		// 240.0.0.0/4, reserved; below it is multicast, above it nothing.
		{name: "reserved first", addr: "240.0.0.0", reason: "reserved"},
		{name: "reserved last but one", addr: "255.255.255.254", reason: "reserved"},
		{name: "reserved last is broadcast", addr: "255.255.255.255", reason: "broadcast"},
		{name: "reserved below is multicast", addr: "239.255.255.255", reason: "multicast"},
		{name: "reserved mapped", addr: "::ffff:240.0.0.1", reason: "reserved"},
		{name: "broadcast mapped", addr: "::ffff:255.255.255.255", reason: "broadcast"},

		// fec0::/10, site-local; below it is link-local, above it multicast.
		{name: "site-local first", addr: "fec0::", reason: "site-local"},
		{name: "site-local last", addr: "feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", reason: "site-local"},
		{name: "site-local below is link-local", addr: "febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff", reason: "link-local"},
		{name: "site-local above is multicast", addr: "ff00::", reason: "multicast"},
		{name: "site-local zoned", addr: "fec0::1%eth0", reason: "site-local"},
		{name: "unique local below", addr: "fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", allowed: true},

		// 2002::/16, 6to4: the IPv4 address is bytes 2 to 5.
		{name: "6to4 of loopback", addr: "2002:7f00:1::", reason: "6to4 127.0.0.1) is loopback"},
		{name: "6to4 of private", addr: "2002:a00:1:1::1", reason: "6to4 10.0.0.1) is private"},
		{name: "6to4 of metadata", addr: "2002:a9fe:a9fe::", reason: "6to4 169.254.169.254) is link-local"},
		{name: "6to4 of CGNAT", addr: "2002:6440:1::", reason: "CGNAT"},
		{name: "6to4 of benchmarking", addr: "2002:c612:1::", reason: "benchmarking"},
		{name: "6to4 of reserved", addr: "2002:f000:1::", reason: "reserved"},
		{name: "6to4 of broadcast", addr: "2002:ffff:ffff::", reason: "broadcast"},
		{name: "6to4 of this network", addr: "2002::1", reason: "6to4 0.0.0.0) is unspecified"},
		{name: "6to4 last of private", addr: "2002:a00:1:ffff:ffff:ffff:ffff:ffff", reason: "private"},
		{name: "6to4 of public", addr: "2002:808:808::1", allowed: true},
		{name: "6to4 below", addr: "2001:ffff:7f00:1::", allowed: true},
		{name: "6to4 above", addr: "2003:7f00:1::", allowed: true},
		{name: "6to4 zoned", addr: "2002:7f00:1::1%eth0", reason: "loopback"},
		{name: "6to4 embedded only", addr: "2002:808:808:0:7f00:1::", allowed: true},

		// 2001::/32, Teredo: server bytes 4 to 7, client the last four
		// bytes inverted (0xf5fffffe is 10.0.0.1, 0xf7f7f7f7 8.8.8.8).
		{name: "Teredo client private", addr: "2001:0:808:808::f5ff:fffe", reason: "Teredo client 10.0.0.1) is private"},
		{name: "Teredo client loopback", addr: "2001:0:808:808:8000:ffff:80ff:fffe", reason: "Teredo client 127.0.0.1) is loopback"},
		{name: "Teredo server private", addr: "2001:0:a00:1::f7f7:f7f7", reason: "Teredo server 10.0.0.1) is private"},
		{name: "Teredo server metadata", addr: "2001:0:a9fe:a9fe::f7f7:f7f7", reason: "link-local"},
		{name: "Teredo both public", addr: "2001:0:808:808::f7f7:f7f7", allowed: true},
		{name: "Teredo client is inverted", addr: "2001:0:808:808::a00:1", reason: "Teredo client 245.255.255.254) is reserved"},
		{name: "Teredo client zero is broadcast", addr: "2001:0:808:808::", reason: "Teredo client 255.255.255.255) is broadcast"},
		{name: "Teredo last", addr: "2001:0:ffff:ffff:ffff:ffff:ffff:ffff", reason: "Teredo server 255.255.255.255"},
		{name: "Teredo below", addr: "2000:ffff:a00:1::f5ff:fffe", allowed: true},
		{name: "Teredo above", addr: "2001:1:a00:1::f5ff:fffe", allowed: true},

		// 64:ff9b::/96, NAT64 well-known prefix: the last four bytes.
		{name: "NAT64 of loopback", addr: "64:ff9b::7f00:1", reason: "NAT64 127.0.0.1) is loopback"},
		{name: "NAT64 of metadata", addr: "64:ff9b::a9fe:a9fe", reason: "link-local"},
		{name: "NAT64 of reserved", addr: "64:ff9b::f000:1", reason: "reserved"},
		{name: "NAT64 of public", addr: "64:ff9b::808:808", allowed: true},
		{name: "NAT64 below", addr: "64:ff9a:ffff:ffff:ffff:ffff:7f00:1", allowed: true},
		{name: "NAT64 above", addr: "64:ff9b::1:7f00:1", allowed: true},

		// 64:ff9b:1::/48, NAT64 local use: the last four bytes.
		{name: "NAT64 local first", addr: "64:ff9b:1::7f00:1", reason: "NAT64 127.0.0.1) is loopback"},
		{name: "NAT64 local last", addr: "64:ff9b:1:ffff:ffff:ffff:a00:1", reason: "NAT64 10.0.0.1) is private"},
		{name: "NAT64 local of public", addr: "64:ff9b:1::808:808", allowed: true},
		{name: "NAT64 local below", addr: "64:ff9b:0:ffff:ffff:ffff:7f00:1", allowed: true},
		{name: "NAT64 local above", addr: "64:ff9b:2::7f00:1", allowed: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := CheckAddr(netip.MustParseAddr(tt.addr))
			if tt.allowed {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrRefused)
			require.ErrorContains(t, err, tt.addr, "the error names the address")
			require.ErrorContains(t, err, tt.reason)
		})
	}
}

func TestGuardControl(t *testing.T) {
	t.Parallel()

	tests := []struct {
		address string
		allowed bool
	}{
		{address: "8.8.8.8:443", allowed: true},
		{address: "[2001:4860::1]:443", allowed: true},
		{address: "127.0.0.1:80"},
		{address: "[::1]:80"},
		{address: "[::ffff:127.0.0.1]:80"},
		{address: "[fe80::1%eth0]:80"},
		{address: "[2002:a9fe:a9fe::1]:80"},
		{address: "[64:ff9b:1::7f00:1]:443"},
		{address: "[2001:0:808:808::f5ff:fffe]:443"},
		{address: "198.18.0.1:80"},
		{address: "not-an-address"},
		{address: ""},
	}
	for _, tt := range tests {
		t.Run(tt.address, func(t *testing.T) {
			t.Parallel()
			err := guardControl("tcp", tt.address, nil)
			if tt.allowed {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrRefused)
		})
	}
}
