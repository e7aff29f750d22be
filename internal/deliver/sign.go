package deliver

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"hash"
	"strconv"
	"strings"
	"sync"
	"time"
)

// DefaultTolerance is how far a webhook-timestamp may be from the verifier's
// clock when [Verify] is given no tolerance. Five minutes is what the Standard
// Webhooks libraries use: long enough for clock skew and queueing, short
// enough that a captured request cannot be replayed much later.
const DefaultTolerance = 5 * time.Minute

// signaturePrefix names the scheme of a signature: v1 is HMAC-SHA256 in the
// Standard Webhooks specification. [Verify] ignores signatures with other
// prefixes (v1a is asymmetric, see [VerifyV1a]) rather than rejecting them,
// so a header may carry both kinds.
const signaturePrefix = "v1,"

// strictBase64 decodes received signatures. The last character of a
// 32-byte signature's base64 carries two unused bits, which the lenient
// decoder ignores: four spellings of every signature would verify, so a
// changed header would pass for the one that was signed. Only the spelling
// Sign writes is accepted.
var strictBase64 = base64.StdEncoding.Strict()

// mac computes HMAC-SHA256(key, id + "." + ts + "." + body) without first
// concatenating the parts, so that a large body is not copied.
func mac(key []byte, id, ts string, body []byte) []byte {
	states := macs.states(key)
	h := states.get()
	// id and ts in one write: each conversion for a Write of its own would
	// be an allocation.
	prefix := make([]byte, 0, len(id)+len(ts)+2)
	prefix = append(append(append(append(prefix, id...), '.'), ts...), '.')
	h.Write(prefix)
	h.Write(body)
	sum := h.Sum(nil)
	states.put(h)
	return sum
}

// macs keeps, per signing key in use, a few idle HMAC-SHA256 states keyed
// with it: hmac.New costs seven allocations and about a microsecond, three
// times the HMAC of a 200-byte body, and every delivery signs. (A sync.Pool
// per key would cost every key a slot per core, and every collection a walk
// over all of them.)
var macs = macCache{keys: make(map[string]*macStates)}

// maxCachedKeys bounds macs: past it, the cache starts again empty, so that
// keys rotated away (or a verifier fed keys by the thousand) do not stay
// for the life of the process.
const maxCachedKeys = 1 << 16

// maxIdleStates is how many idle states a key keeps: signing takes about a
// microsecond, so more than two at once for one key is rare.
const maxIdleStates = 2

type macCache struct {
	mu   sync.RWMutex
	keys map[string]*macStates
}

// macStates are the idle HMAC states of one key.
type macStates struct {
	key  []byte
	mu   sync.Mutex
	idle []hash.Hash
}

// states returns the states of key, making them on first use.
func (c *macCache) states(key []byte) *macStates {
	c.mu.RLock()
	m := c.keys[string(key)]
	c.mu.RUnlock()
	if m != nil {
		return m
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if m := c.keys[string(key)]; m != nil {
		return m
	}
	if len(c.keys) >= maxCachedKeys {
		clear(c.keys)
	}
	m = &macStates{key: bytes.Clone(key)}
	c.keys[string(m.key)] = m
	return m
}

// get returns a state keyed and reset, idle or new.
func (m *macStates) get() hash.Hash {
	m.mu.Lock()
	if n := len(m.idle); n > 0 {
		h := m.idle[n-1]
		m.idle[n-1] = nil
		m.idle = m.idle[:n-1]
		m.mu.Unlock()
		h.Reset()
		return h
	}
	m.mu.Unlock()
	return hmac.New(sha256.New, m.key)
}

// put keeps h for the next get, unless enough are idle already.
func (m *macStates) put(h hash.Hash) {
	m.mu.Lock()
	if len(m.idle) < maxIdleStates {
		m.idle = append(m.idle, h)
	}
	m.mu.Unlock()
}

// Sign returns the Standard Webhooks signature of one message under one key:
// "v1," followed by the standard base64 of HMAC-SHA256 over id, the unix
// timestamp and the body joined by dots. The timestamp is part of the signed
// content so that a receiver can refuse old requests without trusting an
// unsigned header.
func Sign(key []byte, id string, ts int64, body []byte) string {
	sum := mac(key, id, strconv.FormatInt(ts, 10), body)
	sig := make([]byte, len(signaturePrefix)+base64.StdEncoding.EncodedLen(len(sum)))
	base64.StdEncoding.Encode(sig[copy(sig, signaturePrefix):], sum)
	return string(sig)
}

// Signatures returns one signature per key, space-separated, which is the
// webhook-signature header value during a secret rotation: a receiver that
// knows either the old or the new secret accepts the request. No keys gives
// the empty string.
func Signatures(keys [][]byte, id string, ts int64, body []byte) string {
	if len(keys) == 1 {
		return Sign(keys[0], id, ts, body)
	}
	var b strings.Builder
	for i, key := range keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(Sign(key, id, ts, body))
	}
	return b.String()
}

// Verify checks a received webhook the way a subscriber should: all three
// headers present, the timestamp within tolerance of now (DefaultTolerance
// when tolerance is 0), and at least one "v1," signature in the
// space-separated header matching at least one key. Signatures are compared
// in constant time so that the comparison does not leak how much of a forged
// signature was right. Errors wrap [ErrMissingHeaders], [ErrStaleTimestamp] or
// [ErrBadSignature].
func Verify(keys [][]byte, id, tsHeader, sigHeader string, body []byte, now time.Time, tolerance time.Duration) error {
	if err := checkHeaders(id, tsHeader, sigHeader, now, tolerance); err != nil {
		return err
	}
	if len(keys) == 0 {
		return fmt.Errorf("%w: no key to verify with", ErrBadSignature)
	}
	expected := make([][]byte, len(keys))
	for i, key := range keys {
		expected[i] = mac(key, id, tsHeader, body)
	}
	for _, field := range strings.Fields(sigHeader) {
		encoded, ok := strings.CutPrefix(field, signaturePrefix)
		if !ok {
			continue
		}
		got, err := strictBase64.DecodeString(encoded)
		if err != nil {
			continue
		}
		for _, want := range expected {
			if hmac.Equal(got, want) {
				return nil
			}
		}
	}
	return fmt.Errorf("%w: no v1 signature matches any of %d key(s)", ErrBadSignature, len(keys))
}

// checkHeaders is what [Verify] and [VerifyV1a] check before any signature:
// all three headers present, and the timestamp unix seconds within
// tolerance of now (DefaultTolerance when tolerance is 0).
func checkHeaders(id, tsHeader, sigHeader string, now time.Time, tolerance time.Duration) error {
	if id == "" || tsHeader == "" || sigHeader == "" {
		return fmt.Errorf("%w: webhook-id, webhook-timestamp and webhook-signature are all required", ErrMissingHeaders)
	}
	ts, err := strconv.ParseInt(tsHeader, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: webhook-timestamp %q is not unix seconds", ErrMissingHeaders, tsHeader)
	}
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	// Compare in seconds against bounds computed from now: subtracting a
	// hostile timestamp from now could overflow.
	tol := int64(tolerance / time.Second)
	if unix := now.Unix(); ts < unix-tol || ts > unix+tol {
		return fmt.Errorf("%w: webhook-timestamp %d is more than %s from now (%d)",
			ErrStaleTimestamp, ts, tolerance, unix)
	}
	return nil
}
