package deliver

import (
	"fmt"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
)

// ipv4Range is an IPv4 range that [netip.Addr]'s own predicates do not
// cover, with the reason a refusal gives for it.
type ipv4Range struct {
	prefix netip.Prefix
	reason string
}

// refusedIPv4 are the IPv4 ranges refused beyond loopback, private,
// link-local, multicast and unspecified. None of them holds a public
// webhook receiver, and each may reach something on the relay's own network.
var refusedIPv4 = []ipv4Range{
	// 0.0.0.0/8 is "this host on this network", which many stacks route
	// to the local machine.
	{netip.MustParsePrefix("0.0.0.0/8"), `in 0.0.0.0/8 ("this network")`},
	// 100.64.0.0/10 is carrier-grade NAT (RFC 6598): inside a cloud it
	// often reaches other tenants' or the provider's hosts.
	{netip.MustParsePrefix("100.64.0.0/10"), "CGNAT shared address space (100.64.0.0/10)"},
	// 192.0.0.0/24 is for IETF protocol assignments (RFC 6890): DS-Lite,
	// NAT64 discovery and the like, services of the local network.
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol assignments (192.0.0.0/24)"},
	// 198.18.0.0/15 is for benchmarking network devices (RFC 2544); it is
	// used inside data centres and appliances, never on the internet.
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking (198.18.0.0/15)"},
	// 240.0.0.0/4 is reserved (RFC 1112); some clouds and stacks route
	// parts of it internally. 255.255.255.255 is checked before it so that
	// the reason says broadcast.
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved (240.0.0.0/4)"},
}

var (
	// limitedBroadcast is 255.255.255.255, which reaches every host of the
	// local link.
	limitedBroadcast = netip.AddrFrom4([4]byte{255, 255, 255, 255})
	// siteLocal is fec0::/10, the deprecated IPv6 site-local range (RFC
	// 3879), which older networks still route as private addresses.
	siteLocal = netip.MustParsePrefix("fec0::/10")
	// nat64 is 64:ff9b::/96, the well-known NAT64 prefix (RFC 6052), and
	// nat64Local 64:ff9b:1::/48, the local-use one (RFC 8215): on a NAT64
	// network such an address reaches the IPv4 address in its last four
	// bytes.
	nat64      = netip.MustParsePrefix("64:ff9b::/96")
	nat64Local = netip.MustParsePrefix("64:ff9b:1::/48")
	// sixToFour is 2002::/16 (RFC 3056): a 6to4 relay sends such an
	// address's packets to the IPv4 address in bytes 2 to 5.
	sixToFour = netip.MustParsePrefix("2002::/16")
	// teredo is 2001::/32 (RFC 4380): such an address reaches a Teredo
	// client through its server, whose IPv4 address is bytes 4 to 7; the
	// client's IPv4 address is the last four bytes, inverted.
	teredo = netip.MustParsePrefix("2001::/32")
)

// embedded is an IPv4 address that an IPv6 address carries and delivers
// packets to, with the name of the mechanism that carries it.
type embedded struct {
	kind string
	addr netip.Addr
}

// embeddedIPv4 returns the IPv4 addresses the packets sent to ip (an IPv6
// address, already unmapped) may reach: the one inside a NAT64 or 6to4
// address, or both the server and the client of a Teredo address. It
// returns nothing for any other address.
func embeddedIPv4(ip netip.Addr) []embedded {
	if !ip.Is6() {
		return nil
	}
	b := ip.As16()
	switch {
	case nat64.Contains(ip), nat64Local.Contains(ip):
		return []embedded{{"NAT64", netip.AddrFrom4([4]byte(b[12:16]))}}
	case sixToFour.Contains(ip):
		return []embedded{{"6to4", netip.AddrFrom4([4]byte(b[2:6]))}}
	case teredo.Contains(ip):
		client := [4]byte{^b[12], ^b[13], ^b[14], ^b[15]}
		return []embedded{
			{"Teredo server", netip.AddrFrom4([4]byte(b[4:8]))},
			{"Teredo client", netip.AddrFrom4(client)},
		}
	}
	return nil
}

// CheckAddr says whether the SSRF guard lets relay dial ip. It refuses
// loopback, private (RFC 1918, fc00::/7, and the old site-local fec0::/10),
// link-local (169.254.0.0/16, where cloud metadata services live, and
// fe80::/10), CGNAT (100.64.0.0/10), IETF protocol assignments
// (192.0.0.0/24), benchmarking (198.18.0.0/15), reserved (240.0.0.0/4),
// multicast, unspecified, 0.0.0.0/8 and broadcast addresses. An IPv6
// address that carries an IPv4 address its packets go to is judged by that
// IPv4 address: IPv4-mapped (::ffff:10.0.0.1), NAT64 (64:ff9b::/96,
// 64:ff9b:1::/48) and 6to4 (2002::/16) addresses by the one inside, and a
// Teredo address (2001::/32) by its server and its client, refused when
// either is. The error wraps [ErrRefused] and names the address and the
// reason. A zone (fe80::1%eth0) changes nothing.
func CheckAddr(ip netip.Addr) error {
	if !ip.IsValid() {
		return fmt.Errorf("%w: invalid address", ErrRefused)
	}
	// The zone goes too: it says which interface to use, not where the
	// packets go, and netip's prefixes never contain a zoned address.
	inner := ip.Unmap().WithZone("")
	if reason := refusal(inner); reason != "" {
		if inner != ip {
			return fmt.Errorf("%w: %s (%s) is %s", ErrRefused, ip, inner, reason)
		}
		return fmt.Errorf("%w: %s is %s", ErrRefused, ip, reason)
	}
	for _, e := range embeddedIPv4(inner) {
		if reason := refusal(e.addr); reason != "" {
			return fmt.Errorf("%w: %s (%s %s) is %s", ErrRefused, ip, e.kind, e.addr, reason)
		}
	}
	return nil
}

// refusal names why ip may not be dialled, or returns "" when it may. It
// judges ip alone, not an IPv4 address inside it.
func refusal(ip netip.Addr) string {
	switch {
	case ip.IsLoopback():
		return "loopback"
	case ip.IsPrivate():
		return "private"
	case ip.Is6() && siteLocal.Contains(ip):
		return "private (site-local fec0::/10)"
	case ip.IsLinkLocalUnicast():
		return "link-local"
	case ip.IsMulticast():
		return "multicast"
	case ip.IsUnspecified():
		return "unspecified"
	case ip == limitedBroadcast:
		return "broadcast"
	}
	if ip.Is4() {
		for _, r := range refusedIPv4 {
			if r.prefix.Contains(ip) {
				return r.reason
			}
		}
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

// PrivateTarget says why a relay would refuse to deliver to rawURL unless it
// runs with --allow-private-targets ("" when nothing tells so yet): its host
// is an address [CheckAddr] refuses, or localhost. A name is judged only by
// the address dialled, so `relay sub add` can warn of a literal address or
// localhost, not of a name that resolves to one.
func PrivateTarget(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return ""
	}
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return host + " is loopback"
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return ""
	}
	if err := CheckAddr(ip); err != nil {
		return strings.TrimPrefix(err.Error(), ErrRefused.Error()+": ")
	}
	return ""
}
