package subscribers

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/relay-dev/relay/internal/deliver"
)

// Change is what `relay sub add|update` set of a subscriber, by the flags
// given, and what the HTTP API's POST and PATCH and the NATS service's
// subscribers.create|update take: each field named as `relay sub get
// --json` prints it, nil when not given. [Change.Check] is the one reading
// of these values and [Change.Apply] the one way they are set, so that the
// three ways in refuse and change alike. The secrets, the signing scheme,
// the circuit breaker, OAuth2 and TLS are set by the CLI's own flags.
type Change struct {
	URL           *string            `json:"url,omitempty"`
	Owner         *string            `json:"owner,omitempty"`
	Events        *[]string          `json:"events,omitempty"`
	Filter        *string            `json:"filter,omitempty"`
	Rate          *float64           `json:"rate,omitempty"`
	Burst         *int               `json:"burst,omitempty"`
	MaxAttempts   *int               `json:"max_attempts,omitempty"`
	Timeout       *Duration          `json:"timeout,omitempty"`
	RetryBase     *Duration          `json:"retry_base,omitempty"`
	RetryMax      *Duration          `json:"retry_max,omitempty"`
	RetryStatus   *[]int             `json:"retry_status,omitempty"`
	MaxInFlight   *int               `json:"max_in_flight,omitempty"`
	MaxBacklog    *int               `json:"max_backlog,omitempty"`
	DeadlineAfter *Duration          `json:"deadline_after,omitempty"`
	Headers       *map[string]string `json:"headers,omitempty"`
	Lane          *string            `json:"lane,omitempty"`
}

// Empty reports whether c changes nothing.
func (c Change) Empty() bool { return c == Change{} }

// Check refuses a value no subscriber may take, with the line the CLI
// gives for its flag (a [*ValidationError]). What depends on the whole
// subscriber is left to [Subscriber.Validate].
func (c Change) Check() error {
	if c.Events != nil {
		for _, e := range *c.Events {
			if rest, ok := strings.CutPrefix(e, "events."); ok {
				return &ValidationError{Flag: "--events " + e, Msg: fmt.Sprintf("filters are event types, the subject after events. (this one matches only events.%s); give %s",
					e, rest)}
			}
			if err := ValidateReservedFilter(e); err != nil {
				return err
			}
		}
	}
	if c.Owner != nil {
		if err := ValidateOwner(*c.Owner); err != nil {
			return err
		}
	}
	if c.Lane != nil && *c.Lane != "shared" && *c.Lane != "dedicated" {
		return invalid("--lane", fmt.Sprintf("must be shared or dedicated, got %q", *c.Lane))
	}
	positive := []struct {
		flag, example string
		d             *Duration
	}{{"--timeout", "10s", c.Timeout}, {"--retry-base", "5s", c.RetryBase}, {"--retry-max", "1h", c.RetryMax}}
	for _, p := range positive {
		if p.d != nil && *p.d <= 0 {
			return invalid(p.flag, fmt.Sprintf("must be a positive duration such as %s, got %s", p.example, time.Duration(*p.d)))
		}
	}
	atLeastOne := []struct {
		flag string
		n    *int
	}{{"--max-attempts", c.MaxAttempts}, {"--max-in-flight", c.MaxInFlight}, {"--max-backlog", c.MaxBacklog}}
	for _, a := range atLeastOne {
		if a.n != nil && *a.n <= 0 {
			return invalid(a.flag, fmt.Sprintf("must be at least 1, got %d", *a.n))
		}
	}
	if c.DeadlineAfter != nil && *c.DeadlineAfter < 0 {
		return invalid("--deadline-after", fmt.Sprintf("must be 0 (none) or a positive duration such as 1h, got %s", time.Duration(*c.DeadlineAfter)))
	}
	if c.Burst != nil && *c.Burst < 0 {
		return invalid("--burst", fmt.Sprintf("must not be negative, got %d", *c.Burst))
	}
	if c.RetryStatus != nil {
		if err := ValidateRetryStatus(*c.RetryStatus); err != nil {
			return err
		}
	}
	return nil
}

// Apply sets on sub the fields c gives and leaves the others. A rate moves
// a burst never given with it ([Subscriber.SetRate]): followed says so,
// from was.
func (c Change) Apply(sub *Subscriber) (followed bool, was int) {
	if c.URL != nil {
		sub.URL = *c.URL
	}
	if c.Owner != nil {
		sub.Owner = *c.Owner
	}
	if c.Events != nil {
		sub.Events = slices.Clone(*c.Events)
		if len(sub.Events) == 0 {
			sub.Events = nil
		}
	}
	if c.Filter != nil {
		sub.Filter = strings.TrimSpace(*c.Filter)
	}
	if c.Rate != nil {
		followed, was = sub.SetRate(*c.Rate)
	}
	if c.Burst != nil {
		sub.SetBurst(*c.Burst)
		followed = false
	}
	if c.RetryStatus != nil {
		sub.RetryStatus = slices.Clone(*c.RetryStatus)
	}
	if c.MaxAttempts != nil {
		sub.MaxAttempts = *c.MaxAttempts
	}
	if c.Timeout != nil {
		sub.Timeout = *c.Timeout
	}
	if c.RetryBase != nil {
		sub.RetryBase = *c.RetryBase
	}
	if c.RetryMax != nil {
		sub.RetryMax = *c.RetryMax
	}
	if c.MaxInFlight != nil {
		sub.MaxInFlight = *c.MaxInFlight
	}
	if c.MaxBacklog != nil {
		sub.MaxBacklog = *c.MaxBacklog
	}
	if c.DeadlineAfter != nil {
		sub.DeadlineAfter = *c.DeadlineAfter
	}
	if c.Headers != nil {
		sub.Headers = maps.Clone(*c.Headers)
		if sub.Headers == nil {
			sub.Headers = map[string]string{}
		}
	}
	if c.Lane != nil {
		sub.Dedicated = *c.Lane == "dedicated"
	}
	return followed, was
}

// ParseUntil reads the end of a pause (--until, the API's until): an RFC
// 3339 time, or a duration from now; either must be in the future.
func ParseUntil(s string, now time.Time) (time.Time, error) {
	at, err := time.Parse(time.RFC3339, s)
	if err != nil {
		d, derr := time.ParseDuration(s)
		if derr != nil {
			return time.Time{}, invalid("--until", fmt.Sprintf("must be an RFC 3339 time such as 2026-12-01T18:00:00Z or a duration from now such as 30m, got %q", s))
		}
		at = now.Add(d)
	}
	if !at.After(now) {
		return time.Time{}, invalid("--until", fmt.Sprintf("must be in the future, got %s (now %s)", at.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339)))
	}
	return at, nil
}

// KeysFor are the keys of a new subscriber: those given, else one
// generated of each kind signing names (hmac when ""), which are also
// returned as generated, to be shown once.
func KeysFor(given []string, signing string) (keys, generated []string, err error) {
	g := SigningHMAC
	if signing != "" {
		if g, err = ParseSigning(signing); err != nil {
			return nil, nil, err
		}
	}
	if len(given) > 0 {
		if signing != "" && SigningOf(given) != g {
			return nil, nil, invalid("--signing", fmt.Sprintf("%s: the keys given sign with %s", g, SigningOf(given)))
		}
		return slices.Clone(given), nil, nil
	}
	if keys, err = NewKeys(g); err != nil {
		return nil, nil, err
	}
	return keys, keys, nil
}

// MaxOwner bounds a subscriber's owner, in bytes.
const MaxOwner = 128

// ValidateOwner checks an owner (--owner): "" (none), or at most
// [MaxOwner] bytes of printable text without spaces at either end.
func ValidateOwner(owner string) error {
	if owner == "" {
		return nil
	}
	if len(owner) > MaxOwner || strings.TrimSpace(owner) != owner || strings.IndexFunc(owner, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return invalid("--owner", fmt.Sprintf("must be up to %d bytes of printable text without spaces at either end (the platform's id of its customer)", MaxOwner))
	}
	return nil
}

// ReplaceKeys is cur with the kinds of key given replaced by given, as
// `relay sub update --secret` replaces the whsec_ secrets and keeps the
// whsk_ keys: a kind given replaces that kind, a kind not given stays.
func ReplaceKeys(cur, given []string) []string {
	var hmac, ed bool
	for _, k := range given {
		if deliver.IsSigningKey(k) {
			ed = true
		} else {
			hmac = true
		}
	}
	out := slices.Clone(given)
	for _, k := range cur {
		if deliver.IsSigningKey(k) && !ed || !deliver.IsSigningKey(k) && !hmac {
			out = append(out, k)
		}
	}
	return out
}
