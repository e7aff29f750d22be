package subscribers

import (
	"crypto/ed25519"
	"fmt"
	"time"

	"github.com/relay-dev/relay/internal/deliver"
)

// Signing is how a subscriber's requests are signed: with HMAC-SHA256 under
// "whsec_" secrets (v1), with ed25519 under "whsk_" keys (v1a), or both. It
// is not stored on its own: it is the kinds of key the subscriber's Secrets
// hold, so that a rotation, a grace and the masking of secrets work alike
// for both kinds.
type Signing string

// The signing schemes of `relay sub add --signing`.
const (
	// SigningHMAC signs with "whsec_" secrets (v1), the default: the
	// receiver verifies with the same secret.
	SigningHMAC Signing = "hmac"
	// SigningEd25519 signs with "whsk_" keys (v1a): the receiver verifies
	// with the "whpk_" public key and holds nothing that can sign.
	SigningEd25519 Signing = "ed25519"
	// SigningBoth signs with one key of each kind, so that receivers can
	// move from one scheme to the other without a rejected request.
	SigningBoth Signing = "both"
)

// ParseSigning reads --signing. The error is a [*ValidationError] for
// --signing.
func ParseSigning(s string) (Signing, error) {
	switch g := Signing(s); g {
	case SigningHMAC, SigningEd25519, SigningBoth:
		return g, nil
	}
	return "", invalid("--signing", fmt.Sprintf("must be hmac, ed25519 or both, got %s", quote(s)))
}

// HMAC reports whether g signs with "whsec_" secrets.
func (g Signing) HMAC() bool { return g == SigningHMAC || g == SigningBoth }

// Ed25519 reports whether g signs with "whsk_" keys.
func (g Signing) Ed25519() bool { return g == SigningEd25519 || g == SigningBoth }

// SigningOf is the scheme of a list of keys, by the kinds it holds; an
// empty list is hmac, the scheme relay generates a secret for.
func SigningOf(keys []string) Signing {
	var hmac, ed bool
	for _, k := range keys {
		if deliver.IsSigningKey(k) {
			ed = true
		} else {
			hmac = true
		}
	}
	switch {
	case hmac && ed:
		return SigningBoth
	case ed:
		return SigningEd25519
	}
	return SigningHMAC
}

// Signing is the scheme s's active keys sign with.
func (s Subscriber) Signing() Signing { return SigningOf(s.Secrets) }

// NewKeys returns a new key for each kind g signs with, the "whsec_" secret
// first: what `relay sub add` and `rotate-secret` store when given no key.
func NewKeys(g Signing) ([]string, error) {
	var keys []string
	if g.HMAC() {
		secret, err := NewSecret()
		if err != nil {
			return nil, err
		}
		keys = append(keys, secret)
	}
	if g.Ed25519() {
		key, err := deliver.NewSigningKey()
		if err != nil {
			return nil, err
		}
		keys = append(keys, key)
	}
	return keys, nil
}

// PublicKeys returns the "whpk_" public key of each "whsk_" key in keys, in
// order: what a receiver of a subscriber that signs with ed25519 is given.
// Keys that do not parse are left out; [Subscriber.Validate] reports them.
func PublicKeys(keys []string) []string {
	var out []string
	for _, k := range keys {
		if !deliver.IsSigningKey(k) {
			continue
		}
		if pub, err := deliver.PublicKey(k); err == nil {
			out = append(out, pub)
		}
	}
	return out
}

// parseKey checks one key of either kind, as [Subscriber.Validate] does.
func parseKey(k string) error {
	if deliver.IsSigningKey(k) {
		_, err := deliver.ParseSigningKey(k)
		return err
	}
	_, err := deliver.ParseSecret(k)
	return err
}

// Keys returns the HMAC keys a request made at now is signed with, one v1
// signature each: the active "whsec_" secrets, newest first, then the
// previous ones whose grace has not ended at now, newest first. The lanes
// pass their clock's time, so that a retired secret stops being used at the
// end of its grace whether or not the bucket was cleaned yet. The error is
// a [*ValidationError] for --secret.
func (s Subscriber) Keys(now time.Time) ([][]byte, error) {
	return s.keys(now, false, deliver.SecretKey)
}

// SigningKeys returns the ed25519 keys a request made at now is signed
// with, one v1a signature each, chosen as [Subscriber.Keys] chooses secrets.
// A subscriber that signs with HMAC alone has none, and costs no
// allocation.
func (s Subscriber) SigningKeys(now time.Time) ([]ed25519.PrivateKey, error) {
	raw, err := s.keys(now, true, func(k string) ([]byte, error) { return deliver.SigningKey(k) })
	if err != nil || raw == nil {
		return nil, err
	}
	keys := make([]ed25519.PrivateKey, len(raw))
	for i, k := range raw {
		keys[i] = k
	}
	return keys, nil
}

// keys returns the decoded keys of one kind (ed25519 when signing) in force
// at now.
func (s Subscriber) keys(now time.Time, signing bool, decode func(string) ([]byte, error)) ([][]byte, error) {
	var keys [][]byte
	for i, sec := range s.Secrets {
		if deliver.IsSigningKey(sec) != signing {
			continue
		}
		key, err := decode(sec)
		if err != nil {
			return nil, secretError(i, len(s.Secrets), err)
		}
		keys = append(keys, key)
	}
	for _, p := range s.PreviousSecrets {
		if deliver.IsSigningKey(p.Secret) != signing || !now.Before(p.Until) {
			continue
		}
		key, err := decode(p.Secret)
		if err != nil {
			return nil, validatePrevious(s.PreviousSecrets)
		}
		keys = append(keys, key)
	}
	return keys, nil
}
