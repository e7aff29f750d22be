package subscribers

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"slices"
	"time"

	"github.com/relay-dev/relay/internal/deliver"
)

// DefaultGrace is how long `relay sub rotate-secret` keeps signing with the
// secrets it retires by default: a day, time enough for a receiver's
// operator to deploy the new secret without a rejected request.
const DefaultGrace = 24 * time.Hour

// MaxGrace bounds a rotation's grace. A retired secret still trusted a month
// later is not being rotated out; whoever needs longer can rotate again.
const MaxGrace = 30 * 24 * time.Hour

// newSecretLen is how many random bytes a generated secret holds: 32, the
// size of an HMAC-SHA256 key, within the 24–64 bytes a secret may have.
const newSecretLen = 32

// NewSecret returns a new random signing secret in the Standard Webhooks
// format, "whsec_" followed by the standard base64 of 32 random bytes, for
// `relay sub rotate-secret` without --secret.
func NewSecret() (string, error) {
	key := make([]byte, newSecretLen)
	if _, err := rand.Read(key); err != nil {
		return "", fmt.Errorf("generating a secret: %w", err)
	}
	return deliver.SecretPrefix + base64.StdEncoding.EncodeToString(key), nil
}

// ValidateGrace reports whether grace can be a rotation's grace: 0 (the
// retired secrets are dropped at once) up to [MaxGrace]. The error is a
// [*ValidationError] for --grace.
func ValidateGrace(grace time.Duration) error {
	if grace < 0 || grace > MaxGrace {
		return invalid("--grace", fmt.Sprintf("must be 0 (stop signing with the old secret at once) or a duration up to %s (30 days) such as 24h, got %s",
			MaxGrace, grace))
	}
	return nil
}

// RotateSecret makes secrets (newest first) the active secrets of the
// subscriber with the given id, as `relay sub rotate-secret` does, and keeps
// signing with the secrets they replace until grace from now: during the
// grace every request carries a signature for the new and for the old, so
// that a receiver may switch at its own pace. A secret retired by an earlier
// rotation keeps its own end, but no old secret outlives the newest one
// retired: each ends at the latest grace from now. A grace of 0 drops every
// old secret at once. At most [MaxPreviousSecrets] are kept, the oldest
// dropped first.
//
// The grace must pass [ValidateGrace] and the secrets must be valid; giving
// the active secrets again is refused, since it would rotate nothing. The
// errors are then [*ValidationError]s. It returns the subscriber as stored,
// or an error wrapping [ErrNotFound] when there is no such subscriber.
func (s *Store) RotateSecret(ctx context.Context, id string, secrets []string, grace time.Duration) (Subscriber, error) {
	if err := ValidateGrace(grace); err != nil {
		return Subscriber{}, err
	}
	if err := validateSecrets(secrets); err != nil {
		return Subscriber{}, err
	}
	sub, _, err := s.modify(ctx, id, func(sub *Subscriber, now time.Time) (bool, error) {
		if slices.Equal(sub.Secrets, secrets) {
			return false, invalid("--secret", "is the active secret already; give a new one, or leave out --secret to have one generated")
		}
		if got, have := SigningOf(secrets), sub.Signing(); got != have {
			return false, invalid("--secret", fmt.Sprintf("the new keys sign with %s, the subscriber with %s; give keys of its kinds, or change the kinds with relay sub update --signing", got, have))
		}
		sub.PreviousSecrets = retire(sub.Secrets, sub.PreviousSecrets, secrets, now, grace)
		sub.Secrets = slices.Clone(secrets)
		return true, nil
	})
	return sub, err
}

// retire returns the previous secrets after active is replaced by next at
// now: the secrets of active first (the newest retired), each until now +
// grace, then those of prev, each until the earlier of its own end and now +
// grace; none that is in next, none twice, none whose grace is over, at most
// MaxPreviousSecrets.
func retire(active []string, prev []PreviousSecret, next []string, now time.Time, grace time.Duration) []PreviousSecret {
	if grace <= 0 {
		return nil
	}
	until := now.Add(grace)
	out := make([]PreviousSecret, 0, len(active)+len(prev))
	keep := func(p PreviousSecret) {
		if !now.Before(p.Until) || slices.Contains(next, p.Secret) ||
			slices.ContainsFunc(out, func(o PreviousSecret) bool { return o.Secret == p.Secret }) {
			return
		}
		out = append(out, p)
	}
	for _, sec := range active {
		keep(PreviousSecret{Secret: sec, Until: until})
	}
	for _, p := range prev {
		if p.Until.After(until) {
			p.Until = until
		}
		keep(p)
	}
	if len(out) > MaxPreviousSecrets {
		out = out[:MaxPreviousSecrets]
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
