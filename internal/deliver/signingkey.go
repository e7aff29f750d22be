package deliver

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Prefixes of the asymmetric keys of the Standard Webhooks specification: an
// ed25519 private key ("whsk_") signs v1a signatures, its public key
// ("whpk_") verifies them. As with "whsec_", the prefix makes a key
// recognisable and keeps one kind from being taken for another.
const (
	SigningKeyPrefix = "whsk_"
	PublicKeyPrefix  = "whpk_"
)

// v1aPrefix names an ed25519 signature in a webhook-signature header.
const v1aPrefix = "v1a,"

// Expectations said in every key error, so that the user learns what to type.
const (
	signingKeyExpectation = `signing key must be "whsk_" followed by base64 of an ed25519 private key (its 32-byte seed, or the 64 bytes of seed and public key)`
	publicKeyExpectation  = `public key must be "whpk_" followed by base64 of a 32-byte ed25519 public key`
)

// ParseSigningKey returns the ed25519 private key inside a "whsk_" key. The
// base64 part may hold the 32-byte seed (as most libraries outside Go write
// a private key) or the 64 bytes of seed and public key (as Go's
// crypto/ed25519 and libsodium do, and as [NewSigningKey] writes); in the
// second form the public half must be the seed's, so that a key pasted
// from two halves of different keys is refused rather than signing with
// one and advertising the other. Errors wrap [ErrInvalidSecret] and never
// contain the key.
func ParseSigningKey(s string) (ed25519.PrivateKey, error) {
	raw, err := decodeKey(s, SigningKeyPrefix, signingKeyExpectation)
	if err != nil {
		return nil, err
	}
	switch len(raw) {
	case ed25519.SeedSize:
		return ed25519.NewKeyFromSeed(raw), nil
	case ed25519.PrivateKeySize:
		key := ed25519.NewKeyFromSeed(raw[:ed25519.SeedSize])
		if !bytes.Equal(key[ed25519.SeedSize:], raw[ed25519.SeedSize:]) {
			return nil, fmt.Errorf("%w: %s (its last 32 bytes are not the public key of its first 32)", ErrInvalidSecret, signingKeyExpectation)
		}
		return key, nil
	}
	return nil, fmt.Errorf("%w: %s (it decodes to %d bytes)", ErrInvalidSecret, signingKeyExpectation, len(raw))
}

// ParsePublicKey returns the ed25519 public key inside a "whpk_" key, for a
// receiver that verifies v1a signatures. Errors wrap [ErrInvalidSecret].
func ParsePublicKey(s string) (ed25519.PublicKey, error) {
	raw, err := decodeKey(s, PublicKeyPrefix, publicKeyExpectation)
	if err != nil {
		return nil, err
	}
	if len(raw) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("%w: %s (it decodes to %d bytes)", ErrInvalidSecret, publicKeyExpectation, len(raw))
	}
	return ed25519.PublicKey(raw), nil
}

// NewSigningKey returns a new ed25519 signing key in the Standard Webhooks
// format: "whsk_" followed by the standard base64 of the 64 bytes of seed
// and public key.
func NewSigningKey() (string, error) {
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return "", fmt.Errorf("generating a signing key: %w", err)
	}
	return SigningKeyPrefix + base64.StdEncoding.EncodeToString(key), nil
}

// PublicKey returns the "whpk_" public key of a "whsk_" signing key: what a
// receiver is given to verify v1a signatures, and safe to print.
func PublicKey(signingKey string) (string, error) {
	key, err := SigningKey(signingKey)
	if err != nil {
		return "", err
	}
	return PublicKeyPrefix + base64.StdEncoding.EncodeToString(key.Public().(ed25519.PublicKey)), nil
}

// SigningKey is [ParseSigningKey] for a key that signs requests, remembered
// as [SecretKey] remembers secrets: deriving a key from its seed costs a
// scalar multiplication, as much as the signature itself.
func SigningKey(s string) (ed25519.PrivateKey, error) {
	key, err := cachedKey(s, func(s string) ([]byte, error) { return ParseSigningKey(s) })
	return ed25519.PrivateKey(key), err
}

// IsSigningKey reports whether s is meant as an ed25519 signing key (it has
// the "whsk_" prefix), valid or not; anything else is taken for a "whsec_"
// secret.
func IsSigningKey(s string) bool {
	return strings.HasPrefix(s, SigningKeyPrefix)
}

// signed is the content a signature covers, id + "." + ts + "." + body, in
// a buffer from signedBufs. ed25519 reads its message twice, so unlike the
// HMAC it needs the whole of it in one piece; the buffer is reused so that a
// 64 KB body does not make 64 KB of garbage per signature.
func signed(id string, ts string, body []byte) *[]byte {
	bp := signedBufs.Get().(*[]byte)
	b := append((*bp)[:0], id...)
	b = append(b, '.')
	b = append(b, ts...)
	b = append(b, '.')
	*bp = append(b, body...)
	return bp
}

// maxPooledSigned is the largest buffer signedBufs keeps: a rare huge body
// is not held on to.
const maxPooledSigned = 1 << 20

var signedBufs = sync.Pool{New: func() any { return new([]byte) }}

// putSigned returns a buffer from signed.
func putSigned(bp *[]byte) {
	if cap(*bp) <= maxPooledSigned {
		signedBufs.Put(bp)
	}
}

// SignV1a returns the Standard Webhooks asymmetric signature of one message:
// "v1a," followed by the standard base64 of the 64-byte ed25519 signature
// over id, the unix timestamp and the body joined by dots, the content that
// v1 signs.
func SignV1a(key ed25519.PrivateKey, id string, ts int64, body []byte) string {
	bp := signed(id, strconv.FormatInt(ts, 10), body)
	sum := ed25519.Sign(key, *bp)
	putSigned(bp)
	sig := make([]byte, len(v1aPrefix)+base64.StdEncoding.EncodedLen(len(sum)))
	base64.StdEncoding.Encode(sig[copy(sig, v1aPrefix):], sum)
	return string(sig)
}

// SignatureHeader is the webhook-signature of one request: a v1 signature
// per HMAC key, then a v1a signature per ed25519 key, space separated, each
// list newest first. No keys gives the empty string.
func SignatureHeader(keys [][]byte, signingKeys []ed25519.PrivateKey, id string, ts int64, body []byte) string {
	if len(signingKeys) == 0 {
		return Signatures(keys, id, ts, body)
	}
	var b strings.Builder
	if len(keys) > 0 {
		b.WriteString(Signatures(keys, id, ts, body))
	}
	for _, key := range signingKeys {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(SignV1a(key, id, ts, body))
	}
	return b.String()
}

// VerifyV1a checks a received webhook as [Verify] does, with ed25519 public
// keys: the headers present, the timestamp within tolerance of now, and at
// least one "v1a," signature in the header valid under at least one key.
// Errors wrap [ErrMissingHeaders], [ErrStaleTimestamp] or [ErrBadSignature].
func VerifyV1a(keys []ed25519.PublicKey, id, tsHeader, sigHeader string, body []byte, now time.Time, tolerance time.Duration) error {
	if err := checkHeaders(id, tsHeader, sigHeader, now, tolerance); err != nil {
		return err
	}
	if len(keys) == 0 {
		return fmt.Errorf("%w: no public key to verify with", ErrBadSignature)
	}
	var bp *[]byte
	defer func() {
		if bp != nil {
			putSigned(bp)
		}
	}()
	for _, field := range strings.Fields(sigHeader) {
		encoded, ok := strings.CutPrefix(field, v1aPrefix)
		if !ok {
			continue
		}
		got, err := strictBase64.DecodeString(encoded)
		if err != nil || len(got) != ed25519.SignatureSize {
			continue
		}
		if bp == nil {
			bp = signed(id, tsHeader, body)
		}
		for _, key := range keys {
			if ed25519.Verify(key, *bp, got) {
				return nil
			}
		}
	}
	return fmt.Errorf("%w: no v1a signature is valid under any of %d public key(s)", ErrBadSignature, len(keys))
}
