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
