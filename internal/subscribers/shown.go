package subscribers

import "slices"

// Shown is a subscriber as `relay sub ls|get --json`, the HTTP API and the
// NATS service show it: redacted ([Subscriber.Redacted]), with its signing
// scheme and the public keys of its ed25519 keys, which are safe to show
// and what a receiver needs.
type Shown struct {
	Subscriber
	// Signing is the scheme the active keys sign with.
	Signing Signing `json:"signing"`
	// PublicKey is the public key of the newest active ed25519 key.
	PublicKey string `json:"public_key,omitempty"`
	// PublicKeys are the public keys of every ed25519 key signing now,
	// active then retired, newest first, when there is more than one.
	PublicKeys []string `json:"public_keys,omitempty"`
	// SealedWith is the id of the key the subscriber's secrets are sealed
	// with, when the reader was not given it (docs/secrets.md).
	SealedWith string `json:"sealed_with,omitempty"`
}

// Show is what may be shown of s: secrets and credential headers masked,
// and the URL redacted unless showURL.
func (s Subscriber) Show(showURL bool) Shown {
	r := Shown{Subscriber: s.Redacted(), Signing: s.Signing(), SealedWith: s.SealedWith()}
	if showURL {
		r.URL = s.URL
	}
	keys := slices.Clone(s.Secrets)
	for _, p := range s.PreviousSecrets {
		keys = append(keys, p.Secret)
	}
	if pubs := PublicKeys(keys); len(pubs) > 0 {
		r.PublicKey = pubs[0]
		if len(pubs) > 1 {
			r.PublicKeys = pubs
		}
	}
	return r
}
