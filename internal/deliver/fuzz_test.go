package deliver

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// The fuzz targets of this package. `go test` runs their seeds (the f.Add
// calls and testdata/fuzz/<name>/); `make fuzz` fuzzes each in turn.

// FuzzParseRetryAfter checks that a Retry-After value, whatever it holds,
// gives a delay that is never negative, is 0 when the value is not
// understood, and is exactly what the value says: delta seconds capped at
// maxRetryAfterSeconds, or the time until an HTTP date, 0 when it is past.
func FuzzParseRetryAfter(f *testing.F) {
	const now = 1_767_225_600 // 2026-01-01T00:00:00Z
	for _, v := range []string{
		"0", "120", " 120 ", "-1", "+5", "1.5", "", " ", "9223372036", "9223372037",
		"99999999999999999999999", "-99999999999999999999", "1e3", "0x10",
		"Wed, 21 Oct 2015 07:28:00 GMT", "Thu, 01 Jan 2026 00:02:00 GMT",
		"Friday, 31-Dec-99 23:59:59 GMT", "Fri Dec 31 23:59:59 9999", "Mon, 02 Jan 2006 15:04:05 PST",
	} {
		f.Add(v, int64(now))
	}
	f.Fuzz(func(t *testing.T, v string, nowUnix int64) {
		clock := time.Unix(nowUnix%(1<<40), 0)
		d, ok := ParseRetryAfter(v, clock)
		if d < 0 {
			t.Fatalf("ParseRetryAfter(%q) = %v: negative", v, d)
		}
		if !ok && d != 0 {
			t.Fatalf("ParseRetryAfter(%q) = %v, false: a value not understood must give 0", v, d)
		}
		if d2, ok2 := ParseRetryAfter(" \t"+v+" ", clock); d2 != d || ok2 != ok {
			t.Fatalf("surrounding spaces changed %q: %v, %v then %v, %v", v, d, ok, d2, ok2)
		}
		trimmed := strings.TrimSpace(v)
		if isDecimal(trimmed) {
			if !ok {
				t.Fatalf("ParseRetryAfter(%q): delta seconds not understood", v)
			}
			want := time.Duration(maxRetryAfterSeconds) * time.Second
			if n, err := strconv.ParseInt(trimmed, 10, 64); err == nil && n < maxRetryAfterSeconds {
				want = time.Duration(max(n, 0)) * time.Second
			} else if strings.HasPrefix(trimmed, "-") {
				want = 0
			}
			if d != want {
				t.Fatalf("ParseRetryAfter(%q) = %v, want %v", v, d, want)
			}
			return
		}
		at, err := http.ParseTime(trimmed)
		if ok != (err == nil) {
			t.Fatalf("ParseRetryAfter(%q) ok = %v, but http.ParseTime says %v", v, ok, err)
		}
		if ok && d != max(0, at.Sub(clock)) {
			t.Fatalf("ParseRetryAfter(%q) = %v, want %v until %v", v, d, max(0, at.Sub(clock)), at)
		}
	})
}

// FuzzParseRateLimitReset checks the quota headers: a reset is reported
// only when the remaining quota is a number at or below 0 and the reset a
// non-negative decimal, the delay is never negative, a delta is taken as
// seconds and an epoch as the time until it, and RateLimit-* wins over
// X-RateLimit-* whenever its Remaining is present.
func FuzzParseRateLimitReset(f *testing.F) {
	const now = 1_767_225_600
	f.Add("0", "30", "", "", int64(now))
	f.Add("", "", "0", "1767225660", int64(now)) // epoch a minute ahead
	f.Add("", "", "0", "1767225000", int64(now)) // epoch in the past
	f.Add("5", "30", "0", "30", int64(now))      // RateLimit- wins: not exhausted
	f.Add("-1", "999999999", "", "", int64(now)) // the largest delta
	f.Add("0", "1000000000", "", "", int64(now)) // the smallest epoch
	f.Add("0", "9223372036", "", "", int64(now)) // the largest epoch kept
	f.Add("0", "9223372037", "", "", int64(now)) // beyond a Duration
	f.Add("0", "-5", "", "", int64(now))
	f.Add("0", "+5", "", "", int64(now))
	f.Add(" 0 ", " 7 ", "", "", int64(now))
	f.Add("zero", "5", "0", "5", int64(now))
	f.Add("0", "99999999999999999999", "", "", int64(-now))
	f.Fuzz(func(t *testing.T, remaining, reset, xRemaining, xReset string, nowUnix int64) {
		clock := time.Unix(nowUnix%(1<<40), 0)
		h := http.Header{}
		set := func(h http.Header, name, v string) {
			if v != "" {
				h.Set(name, v)
			}
		}
		set(h, "RateLimit-Remaining", remaining)
		set(h, "RateLimit-Reset", reset)
		set(h, "X-RateLimit-Remaining", xRemaining)
		set(h, "X-RateLimit-Reset", xReset)
		d, ok := ParseRateLimitReset(h, clock)
		if d < 0 {
			t.Fatalf("%v: negative delay %v", h, d)
		}
		if !ok && d != 0 {
			t.Fatalf("%v: not exhausted but a delay of %v", h, d)
		}

		// Which pair is read, and what it must give.
		rem, rst := xRemaining, xReset
		if strings.TrimSpace(remaining) != "" {
			rem, rst = remaining, reset
		}
		n, err := strconv.ParseInt(strings.TrimSpace(rem), 10, 64)
		exhausted := err == nil && n <= 0
		r := strings.TrimSpace(rst)
		secs, rerr := strconv.ParseInt(r, 10, 64)
		readable := isDecimal(r) && !strings.HasPrefix(r, "-") && rerr == nil && secs <= maxRetryAfterSeconds
		if ok != (exhausted && readable) {
			t.Fatalf("%v: ok = %v, want %v (remaining %q, reset %q)", h, ok, exhausted && readable, rem, rst)
		}
		if !ok {
			return
		}
		want := time.Duration(secs) * time.Second
		if secs >= epochThreshold {
			want = max(0, time.Unix(secs, 0).Sub(clock))
		}
		if d != want {
			t.Fatalf("%v: delay %v, want %v", h, d, want)
		}
		if secs < epochThreshold && d >= epochThreshold*time.Second {
			t.Fatalf("%v: a delta gave %v, more than the deltas' bound", h, d)
		}
	})
}

// FuzzSignVerify checks the signature both ways: what Sign makes, Verify
// and the Standard Webhooks reference library accept; a request whose id,
// timestamp header, body or signature differs in any way from what was
// signed, or that is checked with another key, is refused. A rotation's
// header (Signatures) verifies under each of its keys. The same holds of
// v1a signatures (SignV1a, VerifyV1a).
func FuzzSignVerify(f *testing.F) {
	key := bytes.Repeat([]byte{0x5a}, 32)
	f.Add(key, "evt_01", int64(1_767_225_600), []byte(`{"id":"evt_01"}`), "evt_02", "", int8(1), []byte(`{"id":"evt_02"}`), uint16(10), byte('A'), uint8(0))
	f.Add(key, "evt_01", int64(1_767_225_600), []byte("x"), "evt_01 ", "0", int8(0), []byte("x "), uint16(45), byte('B'), uint8(1))
	f.Add([]byte{}, "a.1", int64(2), []byte("3.x"), "a", "+", int8(0), []byte("1.2.3.x"), uint16(0), byte('V'), uint8(2))
	f.Add(bytes.Repeat([]byte{1}, 100), "id", int64(-5), []byte(nil), "", " ", int8(-1), []byte{0}, uint16(46), byte('='), uint8(0))
	f.Add(key, "evt", int64(1_767_225_600), []byte("b"), "EVT", "00", int8(0), []byte(""), uint16(3), byte(0), uint8(1))
	f.Fuzz(func(t *testing.T, key []byte, id string, ts int64, body []byte,
		otherID, tsPrefix string, tsDelta int8, otherBody []byte, sigPos uint16, sigByte byte, sigOp uint8) {
		if id == "" {
			return // Verify rightly refuses a request without an id
		}
		ts %= 1 << 40 // the signer's and verifier's clocks are the real one
		now := time.Unix(ts, 0)
		tsHeader := strconv.FormatInt(ts, 10)
		keys := [][]byte{key}
		sig := Sign(key, id, ts, body)
		if err := Verify(keys, id, tsHeader, sig, body, now, 0); err != nil {
			t.Fatalf("Verify refuses what Sign made: %v", err)
		}
		wh, err := standardwebhooks.NewWebhookRaw(key)
		if err != nil {
			t.Fatal(err)
		}
		if err := wh.VerifyIgnoringTimestamp(body, http.Header{
			"Webhook-Id": {id}, "Webhook-Timestamp": {tsHeader}, "Webhook-Signature": {sig},
		}); err != nil && !strings.ContainsAny(id, "\r\n") {
			t.Fatalf("the reference library refuses what Sign made: %v", err)
		}

		refused := func(what string, err error) {
			t.Helper()
			if err == nil {
				t.Fatalf("Verify accepts a request with a changed %s", what)
			}
			if !errors.Is(err, ErrBadSignature) && !errors.Is(err, ErrStaleTimestamp) && !errors.Is(err, ErrMissingHeaders) {
				t.Fatalf("changed %s: error %v wraps none of the verification errors", what, err)
			}
		}
		if otherID != id {
			refused("id", Verify(keys, otherID, tsHeader, sig, body, now, 0))
		}
		if otherTS := tsPrefix + strconv.FormatInt(ts+int64(tsDelta), 10); otherTS != tsHeader {
			refused("timestamp", Verify(keys, id, otherTS, sig, body, now, 0))
		}
		if !bytes.Equal(otherBody, body) {
			refused("body", Verify(keys, id, tsHeader, sig, otherBody, now, 0))
		}
		if otherSig := changeOneByte(sig, int(sigPos), sigByte, sigOp); otherSig != sig {
			refused("signature", Verify(keys, id, tsHeader, otherSig, body, now, 0))
		}
		otherKey := append([]byte{}, key...)
		if len(otherKey) == 0 {
			otherKey = []byte{0x80}
		} else {
			otherKey[0] ^= 1
		}
		refused("key", Verify([][]byte{otherKey}, id, tsHeader, sig, body, now, 0))

		both := Signatures([][]byte{otherKey, key}, id, ts, body)
		for _, k := range [][]byte{key, otherKey} {
			if err := Verify([][]byte{k}, id, tsHeader, both, body, now, 0); err != nil {
				t.Fatalf("a rotation's header does not verify under one of its keys: %v", err)
			}
		}

		// v1a, under an ed25519 key made from the fuzzed bytes: the same
		// both ways, and a header with both kinds verifies with either.
		seed := sha256.Sum256(key)
		priv := ed25519.NewKeyFromSeed(seed[:])
		pubs := []ed25519.PublicKey{priv.Public().(ed25519.PublicKey)}
		mixed := SignatureHeader(keys, []ed25519.PrivateKey{priv}, id, ts, body)
		if err := VerifyV1a(pubs, id, tsHeader, mixed, body, now, 0); err != nil {
			t.Fatalf("VerifyV1a refuses what SignatureHeader made: %v", err)
		}
		if err := Verify(keys, id, tsHeader, mixed, body, now, 0); err != nil {
			t.Fatalf("Verify refuses the v1 entry beside a v1a one: %v", err)
		}
		v1a := SignV1a(priv, id, ts, body)
		if otherID != id {
			refused("id (v1a)", VerifyV1a(pubs, otherID, tsHeader, v1a, body, now, 0))
		}
		if otherTS := tsPrefix + strconv.FormatInt(ts+int64(tsDelta), 10); otherTS != tsHeader {
			refused("timestamp (v1a)", VerifyV1a(pubs, id, otherTS, v1a, body, now, 0))
		}
		if !bytes.Equal(otherBody, body) {
			refused("body (v1a)", VerifyV1a(pubs, id, tsHeader, v1a, otherBody, now, 0))
		}
		if otherSig := changeOneByte(v1a, int(sigPos), sigByte, sigOp); otherSig != v1a {
			refused("signature (v1a)", VerifyV1a(pubs, id, tsHeader, otherSig, body, now, 0))
		}
	})
}

// changeOneByte replaces (op 0), deletes (1) or inserts (2) one byte of s
// at pos: the smallest changes a signature can suffer. An inserted space is
// not a change of the signature but a second, empty one, so it is not made.
func changeOneByte(s string, pos int, b byte, op uint8) string {
	pos %= len(s)
	switch op % 3 {
	case 0:
		return s[:pos] + string([]byte{b}) + s[pos+1:]
	case 1:
		return s[:pos] + s[pos+1:]
	default:
		if strings.TrimSpace(string([]byte{b})) == "" || b == 0x85 || b == 0xa0 {
			return s
		}
		return s[:pos] + string([]byte{b}) + s[pos:]
	}
}

// FuzzCheckAddr checks the SSRF guard's verdicts: an IPv4 address, its
// IPv4-mapped form and every IPv6 form that carries it (NAT64 well-known and
// local-use, 6to4, a Teredo server or client beside a public one) get the
// same verdict, with or without a zone; any IPv6 address in those prefixes
// is judged by what it carries; the dial hook agrees with CheckAddr; and a
// refusal always wraps ErrRefused.
func FuzzCheckAddr(f *testing.F) {
	for _, seed := range []struct {
		v4  [4]byte
		v6  string
		mid uint64
	}{
		{[4]byte{127, 0, 0, 1}, "::1", 0},
		{[4]byte{10, 0, 0, 1}, "2002:a00:1::1", 1},
		{[4]byte{169, 254, 169, 254}, "64:ff9b::a9fe:a9fe", 0},
		{[4]byte{8, 8, 8, 8}, "2001:0:808:808::f5ff:fffe", 7},
		{[4]byte{198, 18, 0, 1}, "64:ff9b:1::c612:1", 0},
		{[4]byte{240, 0, 0, 1}, "fec0::1", 0},
		{[4]byte{255, 255, 255, 255}, "2001:0:808:808::", 0},
		{[4]byte{100, 64, 0, 0}, "2001:4860::1", 0},
		{[4]byte{192, 0, 0, 255}, "::ffff:192.0.0.255", 0},
		{[4]byte{1, 1, 1, 1}, "2002:7f00:1::1%eth0", 0},
	} {
		f.Add(seed.v4[:], seed.v6, seed.mid)
	}
	public := netip.AddrFrom4([4]byte{8, 8, 8, 8})
	if err := CheckAddr(public); err != nil {
		f.Fatalf("the public address of the Teredo forms is refused: %v", err)
	}
	f.Fuzz(func(t *testing.T, v4 []byte, v6 string, mid uint64) {
		if len(v4) < 4 {
			return
		}
		a := netip.AddrFrom4([4]byte(v4[:4]))
		want := verdict(t, a)
		m := [8]byte{byte(mid >> 56), byte(mid >> 48), byte(mid >> 40), byte(mid >> 32), byte(mid >> 24), byte(mid >> 16), byte(mid >> 8), byte(mid)}
		forms := map[string]netip.Addr{
			"IPv4-mapped":       netip.AddrFrom16([16]byte{10: 0xff, 11: 0xff, 12: a.As4()[0], 13: a.As4()[1], 14: a.As4()[2], 15: a.As4()[3]}),
			"NAT64":             with(netip.MustParseAddr("64:ff9b::"), 12, a),
			"NAT64 local":       with(with6(netip.MustParseAddr("64:ff9b:1::"), 6, m[:10-6]), 12, a),
			"6to4":              with(with6(netip.MustParseAddr("2002::"), 6, m[:]), 2, a),
			"Teredo server":     with(with(with6(netip.MustParseAddr("2001::"), 8, m[:4]), 4, a), 12, invert(public)),
			"Teredo client":     with(with(with6(netip.MustParseAddr("2001::"), 8, m[:4]), 4, public), 12, invert(a)),
			"Teredo both":       with(with(with6(netip.MustParseAddr("2001::"), 8, m[:4]), 4, a), 12, invert(a)),
			"6to4 zoned":        with(with6(netip.MustParseAddr("2002::"), 6, m[:]), 2, a).WithZone("eth0"),
			"NAT64 local zoned": with(netip.MustParseAddr("64:ff9b:1::"), 12, a).WithZone("1"),
		}
		for name, form := range forms {
			if got := verdict(t, form); got != want {
				t.Fatalf("%s: %s is refused: %v, but %s (%s form): %v", a, a, want, form, name, got)
			}
		}

		ip, err := netip.ParseAddr(v6)
		if err != nil {
			return
		}
		got := verdict(t, ip)
		if zoned := verdict(t, ip.WithZone("eth0")); ip.Is6() && zoned != got {
			t.Fatalf("%s: a zone changes the verdict: %v without, %v with", ip, got, zoned)
		}
		if inner := ip.Unmap(); inner != ip && verdict(t, inner) != got {
			t.Fatalf("%s: the verdict differs from that of %s", ip, inner)
		}
		if carried := carriedIPv4(ip.WithZone("")); len(carried) > 0 {
			anyRefused := false
			for _, c := range carried {
				anyRefused = anyRefused || verdict(t, c)
			}
			if got != anyRefused {
				t.Fatalf("%s: refused %v, but the IPv4 addresses it carries, %v, say %v", ip, got, carried, anyRefused)
			}
		}
		dial := guardControl("tcp", net.JoinHostPort(ip.String(), "443"), nil)
		if (dial != nil) != got {
			t.Fatalf("%s: CheckAddr refused %v, the dial hook %v", ip, got, dial)
		}
	})
}

// verdict reports whether CheckAddr refuses ip, and fails the test when a
// refusal does not wrap ErrRefused.
func verdict(t *testing.T, ip netip.Addr) bool {
	t.Helper()
	err := CheckAddr(ip)
	if err != nil && !errors.Is(err, ErrRefused) {
		t.Fatalf("CheckAddr(%s) = %v, which does not wrap ErrRefused", ip, err)
	}
	return err != nil
}

// with returns ip6 with the IPv4 address v4 written at byte offset at.
func with(ip6 netip.Addr, at int, v4 netip.Addr) netip.Addr {
	b := v4.As4()
	return with6(ip6, at, b[:])
}

// with6 returns ip6 with b written at byte offset at, keeping its zone.
func with6(ip6 netip.Addr, at int, b []byte) netip.Addr {
	a := ip6.As16()
	copy(a[at:], b)
	return netip.AddrFrom16(a).WithZone(ip6.Zone())
}

// invert is the Teredo obfuscation of a client address: every bit flipped.
func invert(v4 netip.Addr) netip.Addr {
	b := v4.As4()
	return netip.AddrFrom4([4]byte{^b[0], ^b[1], ^b[2], ^b[3]})
}

// carriedIPv4 is the test's own reading of the IPv4 addresses an IPv6
// address delivers to, written from the RFCs rather than from ssrf.go.
func carriedIPv4(ip netip.Addr) []netip.Addr {
	if !ip.Is6() || ip.Is4In6() {
		return nil
	}
	b := ip.As16()
	v4 := func(i int) netip.Addr { return netip.AddrFrom4([4]byte(b[i : i+4])) }
	switch {
	case b[0] == 0x00 && b[1] == 0x64 && b[2] == 0xff && b[3] == 0x9b && ((b[4] == 0 && b[5] == 0 && [6]byte(b[6:12]) == [6]byte{}) || (b[4] == 0 && b[5] == 1)):
		return []netip.Addr{v4(12)}
	case b[0] == 0x20 && b[1] == 0x02:
		return []netip.Addr{v4(2)}
	case b[0] == 0x20 && b[1] == 0x01 && b[2] == 0 && b[3] == 0:
		return []netip.Addr{v4(4), invert(v4(12))}
	}
	return nil
}
