package deliver

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
)

// SecretPrefix starts every secret, as in the Standard Webhooks
// specification, so that a secret is recognisable in a config file or a leak
// scanner and cannot be confused with some other base64 string.
const SecretPrefix = "whsec_"

// Key sizes a secret may decode to. Fewer than 24 bytes is too weak for
// HMAC-SHA256; more than 64 bytes is longer than the hash's block and would
// be hashed down first, which adds nothing.
const (
	minKeyLen = 24
	maxKeyLen = 64
)

// secretExpectation is said in every secret error so that the user learns
// what to type rather than only that it was wrong.
const secretExpectation = `secret must be "whsec_" followed by base64 of 24–64 bytes`

// ParseSecret returns the signing key inside a "whsec_" secret. The base64
// part may be given with or without its "=" padding, because secrets are
// copied by hand between dashboards, shells and config files and padding is
// the first thing to get lost. Errors wrap [ErrInvalidSecret] and never
// contain the secret itself.
func ParseSecret(s string) ([]byte, error) {
	key, err := decodeKey(s, SecretPrefix, secretExpectation)
	if err != nil {
		return nil, err
	}
	if len(key) < minKeyLen || len(key) > maxKeyLen {
		return nil, fmt.Errorf("%w: %s (it decodes to %d bytes)", ErrInvalidSecret, secretExpectation, len(key))
	}
	return key, nil
}

// decodeKey returns the bytes of a key written as prefix + base64: a
// secret, a signing key or a public key. The base64 part may be given with
// or without its "=" padding, for the reason [ParseSecret] gives. Errors
// wrap [ErrInvalidSecret], say what was expected, and never quote the key.
func decodeKey(s, prefix, expectation string) ([]byte, error) {
	encoded, ok := strings.CutPrefix(s, prefix)
	if !ok {
		return nil, fmt.Errorf("%w: %s (the prefix is missing)", ErrInvalidSecret, expectation)
	}
	enc := base64.RawStdEncoding
	if strings.HasSuffix(encoded, "=") {
		enc = base64.StdEncoding
	}
	key, err := enc.DecodeString(encoded)
	if err != nil {
		return nil, fmt.Errorf("%w: %s (the rest is not standard base64)", ErrInvalidSecret, expectation)
	}
	return key, nil
}

// SecretKey is [ParseSecret] for a secret that signs requests: a secret
// decoded once is remembered, because every delivery is signed and the
// base64 decoding cost more than the HMAC of a small body. Errors are not
// remembered.
func SecretKey(s string) ([]byte, error) {
	return cachedKey(s, ParseSecret)
}

// cachedKey returns the key parse makes of s, parsing s only the first
// time. Secrets and signing keys share the cache: their prefixes keep them
// apart.
func cachedKey(s string, parse func(string) ([]byte, error)) ([]byte, error) {
	secretKeys.mu.RLock()
	key, ok := secretKeys.keys[s]
	secretKeys.mu.RUnlock()
	if ok {
		return key, nil
	}
	key, err := parse(s)
	if err != nil {
		return nil, err
	}
	secretKeys.mu.Lock()
	if len(secretKeys.keys) >= maxCachedKeys {
		clear(secretKeys.keys)
	}
	secretKeys.keys[s] = key
	secretKeys.mu.Unlock()
	return key, nil
}

// secretKeys are the keys [cachedKey] decoded, by secret or signing key;
// like macs, it starts again empty past maxCachedKeys.
var secretKeys = struct {
	mu   sync.RWMutex
	keys map[string][]byte
}{keys: make(map[string][]byte)}

// MaskSecret returns a form of a secret or a signing key that is safe to
// print, enough to tell two apart in `relay sub ls`. A "whsec_" secret shows
// its prefix and first four base64 characters followed by an ellipsis (a
// string too short to spare four characters, or without a known prefix,
// shows none of its own). A "whsk_" private key shows no byte of itself: it
// is named by its public key's fingerprint ([PublicKeyFingerprint]), as
// "whsk_…pk:1a2b3c4d"; one that does not parse shows its prefix alone.
func MaskSecret(s string) string {
	if s == "" {
		return ""
	}
	if IsSigningKey(s) {
		key, err := SigningKey(s)
		if err != nil {
			return SigningKeyPrefix + "…"
		}
		return SigningKeyPrefix + "…pk:" + PublicKeyFingerprint(key.Public().(ed25519.PublicKey))
	}
	encoded, ok := strings.CutPrefix(s, SecretPrefix)
	if !ok {
		return "…"
	}
	// The shortest valid secret has 32 base64 characters; anything much
	// shorter is not a real one and four characters would be too much of
	// it.
	const shown = 4
	if len(encoded) < 4*shown {
		return SecretPrefix + "…"
	}
	return SecretPrefix + encoded[:shown] + "…"
}

// PublicKeyFingerprint names an ed25519 public key, and so its private
// key, in a few characters: the hex of the first 4 bytes of the SHA-256 of
// its 32 bytes.
func PublicKeyFingerprint(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:4])
}
