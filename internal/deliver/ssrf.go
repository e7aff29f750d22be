package deliver

import (
	"fmt"
	"net/netip"
	"syscall"
)

// Ranges that [netip.Addr]'s own predicates do not cover.
var (
	// thisNetwork is 0.0.0.0/8: "this host on this network", which many
	// stacks route to the local machine.
	thisNetwork = netip.MustParsePrefix("0.0.0.0/8")
	// sharedAddressSpace is 100.64.0.0/10, carrier-grade NAT (RFC 6598):
	// inside a cloud it often reaches other tenants' or the provider's hosts.
	sharedAddressSpace = netip.MustParsePrefix("100.64.0.0/10")
	// limitedBroadcast is 255.255.255.255.
	limitedBroadcast = netip.AddrFrom4([4]byte{255, 255, 255, 255})
	// nat64 is 64:ff9b::/96 (RFC 6052): on a NAT64 network an address in it
	// reaches the IPv4 address in its last four bytes, so it is judged by
	// that address.
	nat64 = netip.MustParsePrefix("64:ff9b::/96")
)

// CheckAddr says whether the SSRF guard lets relay dial ip. It refuses
// loopback, private (RFC 1918, fc00::/7), link-local (169.254.0.0/16, where
// cloud metadata services live, and fe80::/10), CGNAT (100.64.0.0/10),
// multicast, unspecified, 0.0.0.0/8 and broadcast addresses. IPv4-mapped IPv6
// addresses (::ffff:10.0.0.1) and NAT64 addresses are judged by the IPv4
// address inside them, because that is where the packets go. The error wraps
// [ErrRefused] and names the address and the reason.
func CheckAddr(ip netip.Addr) error {
	if !ip.IsValid() {
		return fmt.Errorf("%w: invalid address", ErrRefused)
	}
	inner := ip.Unmap()
	if inner.Is6() && nat64.Contains(inner) {
		b := inner.As16()
		inner = netip.AddrFrom4([4]byte(b[12:]))
	}
	reason := refusal(inner)
	if reason == "" {
		return nil
	}
	if inner != ip {
		return fmt.Errorf("%w: %s (%s) is %s", ErrRefused, ip, inner, reason)
	}
	return fmt.Errorf("%w: %s is %s", ErrRefused, ip, reason)
}

// refusal names why ip may not be dialled, or returns "" when it may.
func refusal(ip netip.Addr) string {
	switch {
	case ip.IsLoopback():
		return "loopback"
	case ip.IsPrivate():
		return "private"
	case ip.IsLinkLocalUnicast():
		return "link-local"
	case ip.IsMulticast():
		return "multicast"
	case ip.IsUnspecified():
		return "unspecified"
	case thisNetwork.Contains(ip):
		return `in 0.0.0.0/8 ("this network")`
	case sharedAddressSpace.Contains(ip):
		return "CGNAT shared address space (100.64.0.0/10)"
	case ip == limitedBroadcast:
		return "broadcast"
	}
	return ""
}

// guardControl is the [net.Dialer] Control hook of the default client. It runs
// after name resolution, once for every address the dialer tries, so the
// check is on the address actually dialled: a DNS answer that changes between
// checks (DNS rebinding) cannot slip past it. An address that does not parse
// is refused, because a guard that fails open is no guard.
func guardControl(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: cannot parse dialled address %q on %s", ErrRefused, address, network)
	}
	return CheckAddr(ap.Addr())
}
