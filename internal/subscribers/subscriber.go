package subscribers

import (
	"fmt"
	"maps"
	"math"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/relay-dev/relay/internal/deliver"
	"github.com/relay-dev/relay/internal/filter"
	"github.com/relay-dev/relay/internal/ratelimit"
	"github.com/relay-dev/relay/internal/secrets"
)

// Defaults that [Subscriber.SetDefaults] fills in, the defaults of the
// `relay sub add` flags. With them a failing subscriber has about two hours
// to recover before an event is dead-lettered (docs/delivery-rules.md, "Retries and back-off").
const (
	// DefaultMaxAttempts is how many requests an event gets by default
	// before it is dead-lettered: enough, with the default delays, to ride
	// out an outage of about two hours.
	DefaultMaxAttempts = 12
	// DefaultTimeout bounds a request by default: long enough for a slow
	// receiver, short enough that a hung one does not hold in-flight slots.
	DefaultTimeout = 10 * time.Second
	// DefaultRetryBase is the default delay after a first failure, short
	// enough that a blip costs seconds.
	DefaultRetryBase = 5 * time.Second
	// DefaultRetryMax caps the default backoff, so that a recovered
	// subscriber is tried again within the hour.
	DefaultRetryMax = time.Hour
	// DefaultMaxInFlight is how many requests one relay keeps on the wire to
	// a subscriber by default, enough for a fast receiver at a high rate
	// without opening hundreds of connections to a slow one.
	DefaultMaxInFlight = 16
	// DefaultMaxBacklog is how many deliveries may wait for one subscriber
	// (on its lane, in its overflow, parked in RETRIES) before the fan-out
	// dead-letters its new copies as backlog: a day of one event a second,
	// and at 4 KB a body about 400 MB, so that ten subscribers down at once
	// fit in the default 4 GiB DELIVERIES.
	DefaultMaxBacklog = 100_000
)

// The circuit breaker's defaults (docs/delivery-rules.md "Circuit
// breaker"), which package ratelimit measured and applies.
const (
	// DefaultBreakerFailureRate: the circuit opens when this share of the
	// requests of the window failed.
	DefaultBreakerFailureRate = ratelimit.DefaultFailureRate
	// DefaultBreakerMinRequests: the share counts once the window holds
	// this many requests.
	DefaultBreakerMinRequests = ratelimit.DefaultMinRequests
	// DefaultBreakerWindow is the span the share is counted over.
	DefaultBreakerWindow = ratelimit.DefaultWindow
	// DefaultBreakerConsecutive: this many failures in a row open the
	// circuit of a subscriber too thin for a share.
	DefaultBreakerConsecutive = ratelimit.DefaultConsecutive
)

// Limits that [Subscriber.Validate] enforces. They keep a single subscriber
// from holding a lane's messages beyond the consumer's ack wait, or from
// asking for more concurrency than one relay can give it.
const (
	maxIDLen = 64
	maxRate  = 1_000_000
	// minRate, one request in about 17 minutes, keeps the waits of the
	// slowest subscriber within what the lanes can plan.
	minRate        = 0.001
	maxMaxAttempts = 1000
	maxTimeout     = 5 * time.Minute
	maxMaxInFlight = 1024
	maxMaxBacklog  = 1_000_000_000
	// The breaker's window is counted in ten buckets, of at least 100 ms;
	// a window of more than ten minutes remembers an outage long gone.
	minBreakerWindow = time.Second
	maxBreakerWindow = 10 * time.Minute
	// maxBreakerRequests bounds the requests a window must hold, and the
	// failures in a row: beyond it the breaker would never open.
	maxBreakerRequests = 100_000
)

// Subscriber is one webhook endpoint and how to deliver to it, as stored in
// the relay_subscribers bucket under its ID. Zero numeric and duration
// fields mean "the default" until [Subscriber.SetDefaults] fills them, which
// [Store.Put] does before storing.
type Subscriber struct {
	// ID names the subscriber in commands, subjects (deliveries.<lane>.<id>,
	// dlq.<id>.<reason>) and the bucket key, so it is limited to
	// [A-Za-z0-9_-]{1,64}.
	ID string `json:"id"`
	// URL is where events are POSTed: an http or https URL with a host.
	URL string `json:"url"`
	// Owner is the platform's own id of the customer the subscriber is
	// for, so that its backend lists one customer's subscribers (GET
	// /v1/subscribers?owner=); relay does nothing else with it. See
	// [ValidateOwner].
	Owner string `json:"owner,omitempty"`
	// Secrets are the active signing keys, newest first: "whsec_" secrets
	// (v1, HMAC) and "whsk_" ed25519 keys (v1a); the kinds held are the
	// subscriber's [Signing]. Every request carries a signature for each,
	// so that a receiver may verify with any of them.
	Secrets []string `json:"secrets"`
	// PreviousSecrets are keys of either kind that `relay sub rotate-secret` retired,
	// newest first, each still signed with until its Until: during the
	// grace a receiver that has not switched to the new secret yet keeps
	// accepting requests. Past it they are no longer signed with, and a
	// running relay rewrites the subscriber without them, so that a retired
	// secret does not stay readable in the bucket.
	PreviousSecrets []PreviousSecret `json:"previous_secrets,omitempty"`
	// Events are NATS-style filters on the event type, such as "video.*" or
	// "order.>"; an event is delivered when one matches. Empty means every
	// event.
	Events []string `json:"events,omitempty"`
	// Filter, when set, is a content filter: a CEL expression over the
	// event's JSON body, its type and its headers (package filter), such
	// as `body.status == "paid"`. The fan-out gives the subscriber a copy
	// only of the events of its Events for which it is true.
	Filter string `json:"filter,omitempty"`
	// content is Filter compiled, once, when the subscriber is read from
	// the bucket (see [Subscriber.Content]).
	content *filter.Filter
	// sealedWith is the id of the key a credential of the subscriber is
	// sealed with, when it was read with a keyring that lacks that key
	// (see [Subscriber.SealedWith]).
	sealedWith string
	// Rate is the most requests per second relay sends to the subscriber,
	// summed over all relay instances; 0 means unlimited.
	Rate float64 `json:"rate"`
	// Burst is how many requests may go at once after a quiet spell. It
	// defaults to the rate rounded up, and is at least 1 when Rate is set.
	Burst int `json:"burst"`
	// BurstGiven reports that Burst was given (--burst), not taken from the
	// rate: a change of the rate keeps it (see [Subscriber.SetRate]).
	BurstGiven bool `json:"burst_given,omitempty"`
	// MaxAttempts is how many HTTP requests one event gets before it is
	// dead-lettered with reason max_attempts.
	MaxAttempts int `json:"max_attempts"`
	// Timeout bounds one HTTP request, from dial to the end of the response.
	Timeout Duration `json:"timeout"`
	// RetryBase is the delay after the first failed attempt; each further
	// failure doubles it, up to RetryMax, with jitter.
	RetryBase Duration `json:"retry_base"`
	// RetryMax caps the delay between two attempts.
	RetryMax Duration `json:"retry_max"`
	// RetryStatus are statuses, final by default, that the subscriber's
	// deliveries are retried on as a 5xx is (--retry-status): for a
	// receiver whose authentication or routing may be misconfigured for
	// minutes, a 401, 403 or 404 waits for the next retry instead of
	// becoming a rejected dead letter. Sorted, no duplicates; see
	// [ValidateRetryStatus].
	RetryStatus []int `json:"retry_status,omitempty"`
	// MaxInFlight is the most requests to the subscriber on the wire at once
	// from one relay instance.
	MaxInFlight int `json:"max_in_flight"`
	// MaxBacklog bounds the deliveries waiting for the subscriber, summed
	// over its lane, its overflow and RETRIES: past it, the fan-out
	// dead-letters its new copies with reason backlog instead of queueing
	// them, so that an outage of one subscriber cannot take the room of
	// the others. Zero (a subscriber stored before the field existed)
	// means [DefaultMaxBacklog]; see [Subscriber.Backlog].
	MaxBacklog int `json:"max_backlog,omitempty"`
	// BreakerFailureRate, BreakerMinRequests, BreakerWindow and
	// BreakerConsecutive are the subscriber's circuit-breaker rule: the
	// circuit opens when at least BreakerFailureRate of its requests over
	// the last BreakerWindow failed, once they number BreakerMinRequests,
	// or after BreakerConsecutive failures in a row while its traffic is
	// too thin for a share (see ratelimit.Breaker). Zero (a subscriber
	// stored before the fields existed) means the defaults.
	BreakerFailureRate float64  `json:"breaker_failure_rate,omitempty"`
	BreakerMinRequests int      `json:"breaker_min_requests,omitempty"`
	BreakerWindow      Duration `json:"breaker_window,omitempty"`
	BreakerConsecutive int      `json:"breaker_consecutive,omitempty"`
	// DeadlineAfter, when set, gives every event without a Relay-Deadline
	// of its own a deadline this long after its due time (its
	// Relay-Deliver-At, else its publication): a reminder that is useless
	// an hour late is dead-lettered rather than sent late. The fan-out
	// stamps it on each copy, so a change applies to events fanned out
	// after it. Zero means no default deadline.
	DeadlineAfter Duration `json:"deadline_after,omitempty"`
	// Headers are sent with every request, such as an Authorization header
	// the receiver checks. Headers relay or HTTP set themselves cannot be
	// configured.
	Headers map[string]string `json:"headers,omitempty"`
	// OAuth2, when set, has every request carry an access token of this
	// OAuth 2.0 client-credentials grant as its Authorization header
	// (`relay sub add --oauth2-token-url …`). Its client secret is stored
	// as the signing secrets are, and masked wherever the subscriber is
	// printed.
	OAuth2 *deliver.OAuth2 `json:"oauth2,omitempty"`
	// TLS, when set, is how relay speaks TLS to the receiver beyond the
	// defaults: a client certificate for mutual TLS (`--client-cert`,
	// `--client-key`) and a private CA to trust (`--ca-cert`). The key is
	// stored as the secrets are, and masked wherever the subscriber is
	// printed.
	TLS *deliver.TLS `json:"tls,omitempty"`
	// Dedicated gives the subscriber a lane of its own instead of a shared
	// one; at most [MaxDedicated] subscribers may have one.
	Dedicated bool `json:"dedicated,omitempty"`
	// Disabled stops deliveries to the subscriber: the fan-out skips it
	// until it is enabled again. Relay disables a subscriber that answers
	// 410 Gone.
	Disabled bool `json:"disabled,omitempty"`
	// DisabledReason says why the subscriber was disabled, for `relay sub
	// get`; it is empty while the subscriber is enabled.
	DisabledReason string `json:"disabled_reason,omitempty"`
	// Paused is an operator's pause (`relay sub pause`): unlike a disabled
	// subscriber, a paused one still gets a copy of every new event, but
	// the lanes hold all of it, sending nothing, until `relay sub resume`
	// or PausedUntil. See [Subscriber.PausedAt].
	Paused bool `json:"paused,omitempty"`
	// PausedUntil ends a pause by itself when it is set; zero means until
	// `relay sub resume`. It is meaningless while Paused is false.
	PausedUntil time.Time `json:"paused_until,omitzero"`
	// CreatedAt is when the subscriber was first stored, in UTC.
	CreatedAt time.Time `json:"created_at"`
	// UpdatedAt is when the subscriber was last stored, in UTC.
	UpdatedAt time.Time `json:"updated_at"`
}

// Content is the subscriber's content filter, compiled; nil when it has
// none. A subscriber read from the bucket has it compiled once, when it is
// read: the fan-out evaluates it for every event of its types.
func (s *Subscriber) Content() *filter.Filter { return s.content }

// compileFilter compiles Filter into content, or clears content when there
// is no Filter.
func (s *Subscriber) compileFilter() error {
	if s.Filter == "" {
		s.content = nil
		return nil
	}
	if s.content != nil && s.content.String() == s.Filter {
		return nil
	}
	f, err := filter.Compile(s.Filter)
	if err != nil {
		return invalid("--filter", filter.Reason(err))
	}
	s.content = f
	return nil
}

// DeadlineFor is the deadline of an event due at due that carries no
// Relay-Deadline of its own: due plus DeadlineAfter, or zero (none) when
// the subscriber sets no default.
func (s Subscriber) DeadlineFor(due time.Time) time.Time {
	if s.DeadlineAfter <= 0 || due.IsZero() {
		return time.Time{}
	}
	return due.Add(s.DeadlineAfter.Std())
}

// PreviousSecret is a signing secret that a rotation retired, still used
// until Until so that receivers have time to switch to the new one.
type PreviousSecret struct {
	// Secret is the retired "whsec_" secret.
	Secret string `json:"secret"`
	// Until is when requests stop carrying its signature, in UTC.
	Until time.Time `json:"until"`
}

// MaxPreviousSecrets is the most retired secrets a subscriber keeps signing
// with at once. Each adds a signature to every request; a rotation beyond it
// drops the oldest.
const MaxPreviousSecrets = 8

// PausedAt reports whether the subscriber's deliveries are held at now: an
// operator's pause holds it, either until `relay sub resume` or until a
// time after now; or its credentials are sealed with a key this process
// was not given ([Subscriber.SealedWith]), which holds it as a pause
// without an end does, until a relay with the key reads it, so that
// nothing of it is sent unsigned or dead-lettered for want of a key.
func (s Subscriber) PausedAt(now time.Time) bool {
	return s.sealedWith != "" || s.Paused && (s.PausedUntil.IsZero() || now.Before(s.PausedUntil))
}

// SetDefaults fills the zero fields of s with the defaults of `relay sub
// add`: [DefaultMaxAttempts], [DefaultTimeout], [DefaultRetryBase],
// [DefaultRetryMax], [DefaultMaxInFlight], and a Burst of the rate rounded
// up (at least 1) when a rate is set. Fields already set, including invalid
// ones, are left for [Subscriber.Validate] to judge.
func (s *Subscriber) SetDefaults() {
	if s.Burst == 0 && s.Rate > 0 && s.Rate <= maxRate {
		s.Burst = defaultBurst(s.Rate)
	}
	if len(s.RetryStatus) > 0 {
		slices.Sort(s.RetryStatus)
		s.RetryStatus = slices.Compact(s.RetryStatus)
	}
	if s.MaxAttempts == 0 {
		s.MaxAttempts = DefaultMaxAttempts
	}
	if s.Timeout == 0 {
		s.Timeout = Duration(DefaultTimeout)
	}
	if s.RetryBase == 0 {
		s.RetryBase = Duration(DefaultRetryBase)
	}
	if s.RetryMax == 0 {
		s.RetryMax = Duration(DefaultRetryMax)
	}
	if s.MaxInFlight == 0 {
		s.MaxInFlight = DefaultMaxInFlight
	}
	if s.MaxBacklog == 0 {
		s.MaxBacklog = DefaultMaxBacklog
	}
	s.setBreakerDefaults()
}

// setBreakerDefaults fills the breaker's zero fields by the breaker's own
// rule (ratelimit.Breaker.WithDefaults); a field out of range stays, for
// Validate to refuse.
func (s *Subscriber) setBreakerDefaults() {
	b := ratelimit.Breaker{FailureRate: s.BreakerFailureRate, MinRequests: s.BreakerMinRequests,
		Window: s.BreakerWindow.Std(), Consecutive: s.BreakerConsecutive}
	if b.FailureRate < 0 || b.MinRequests < 0 || b.Window < 0 || b.Consecutive < 0 || math.IsNaN(b.FailureRate) {
		return
	}
	b = b.WithDefaults(DefaultBreakerConsecutive)
	s.BreakerFailureRate, s.BreakerMinRequests = b.FailureRate, b.MinRequests
	s.BreakerWindow, s.BreakerConsecutive = Duration(b.Window), b.Consecutive
}

// Backlog is the subscriber's bound on waiting deliveries: MaxBacklog, or
// [DefaultMaxBacklog] for a subscriber stored without one.
func (s Subscriber) Backlog() int {
	if s.MaxBacklog <= 0 {
		return DefaultMaxBacklog
	}
	return s.MaxBacklog
}

// ValidateID reports whether id can name a subscriber: 1 to 64 characters
// from A-Z, a-z, 0-9, "_" and "-". Ids become subject tokens and KV keys, so
// dots, wildcards and spaces are out. The error is a [*ValidationError] for
// "ID", wrapping [ErrInvalid].
func ValidateID(id string) error {
	ok := id != "" && len(id) <= maxIDLen
	for i := 0; ok && i < len(id); i++ {
		c := id[i]
		ok = 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-'
	}
	if !ok {
		return invalid("ID", fmt.Sprintf("must be 1 to %d characters from A-Z a-z 0-9 _ -, got %s", maxIDLen, quote(id)))
	}
	return nil
}

// Validate reports the first subscriber rule (docs/cli.md, relay sub add) that s breaks, as a
// [*ValidationError] wrapping [ErrInvalid] whose one-line message names the
// `relay sub add` flag at fault and what it expects. It judges s as given:
// call [Subscriber.SetDefaults] first to accept the defaults. It checks the
// id; that the URL is http or https with a host and without credentials; that
// there is at least one secret and each is valid, as is each of at most
// [MaxPreviousSecrets] previous secrets, with the end of its grace; every
// event filter; that the rate is finite and from 0 to 1,000,000 and the
// burst at least 1 when there is a rate; max attempts from 1 to 1000; a
// timeout above 0 and at most 5m; a retry base above 0 and a retry max no
// lower; max in flight from 1 to 1024; the breaker's rule (see
// validateBreaker); that every header is valid and
// not reserved; a TLS setting's certificates and key (see validateTLS); and
// an OAuth2 grant's token URL (as the URL), client id, client secret and
// scopes, with no Authorization header beside it.
func (s Subscriber) Validate() error {
	if err := ValidateID(s.ID); err != nil {
		return err
	}
	if err := validateURL(s.URL); err != nil {
		return err
	}
	if err := ValidateOwner(s.Owner); err != nil {
		return err
	}
	// Credentials sealed with a key not given cannot be judged; they were
	// judged when they were sealed.
	sealed := s.sealedWith != ""
	if err := validateSecrets(s.Secrets); err != nil && !sealed {
		return err
	}
	if err := validatePrevious(s.PreviousSecrets); err != nil && !sealed {
		return err
	}
	for _, f := range s.Events {
		if err := ValidateFilter(f); err != nil {
			return err
		}
	}
	if s.Filter != "" && (s.content == nil || s.content.String() != s.Filter) {
		if _, err := filter.Compile(s.Filter); err != nil {
			return invalid("--filter", filter.Reason(err))
		}
	}
	if math.IsNaN(s.Rate) || math.IsInf(s.Rate, 0) || s.Rate < 0 || s.Rate > maxRate || (s.Rate > 0 && s.Rate < minRate) {
		return invalid("--rate", fmt.Sprintf("must be 0 (unlimited) or a number of requests per second from %g to %d, got %v", minRate, maxRate, s.Rate))
	}
	if s.Burst < 0 {
		return invalid("--burst", fmt.Sprintf("must be 0 or more, got %d", s.Burst))
	}
	if s.Rate > 0 && s.Burst < 1 {
		return invalid("--burst", fmt.Sprintf("must be at least 1 when --rate is above 0, got %d", s.Burst))
	}
	if err := ValidateRetryStatus(s.RetryStatus); err != nil {
		return err
	}
	if s.MaxAttempts < 1 || s.MaxAttempts > maxMaxAttempts {
		return invalid("--max-attempts", fmt.Sprintf("must be from 1 to %d, got %d", maxMaxAttempts, s.MaxAttempts))
	}
	if s.Timeout <= 0 || s.Timeout.Std() > maxTimeout {
		return invalid("--timeout", fmt.Sprintf("must be above 0 and at most %v, got %v", maxTimeout, s.Timeout))
	}
	if s.RetryBase <= 0 {
		return invalid("--retry-base", fmt.Sprintf("must be above 0, got %v", s.RetryBase))
	}
	if s.RetryMax < s.RetryBase {
		return invalid("--retry-max", fmt.Sprintf("must be at least --retry-base (%v), got %v", s.RetryBase, s.RetryMax))
	}
	if s.MaxInFlight < 1 || s.MaxInFlight > maxMaxInFlight {
		return invalid("--max-in-flight", fmt.Sprintf("must be from 1 to %d, got %d", maxMaxInFlight, s.MaxInFlight))
	}
	if s.MaxBacklog < 0 || s.MaxBacklog > maxMaxBacklog {
		return invalid("--max-backlog", fmt.Sprintf("must be from 1 to %d, got %d", maxMaxBacklog, s.MaxBacklog))
	}
	if err := s.ValidateBreaker(nil); err != nil {
		return err
	}
	if s.DeadlineAfter < 0 || (s.DeadlineAfter > 0 && s.DeadlineAfter.Std() < time.Second) {
		return invalid("--deadline-after", fmt.Sprintf("must be 0 (no default deadline) or at least 1s, such as 1h, got %v", s.DeadlineAfter))
	}
	// Sorted, so that the error reported for several bad headers is always
	// the same one.
	seen := make(map[string]string, len(s.Headers))
	for _, name := range slices.Sorted(maps.Keys(s.Headers)) {
		if err := validateHeader(name, s.Headers[name]); err != nil {
			return err
		}
		lower := strings.ToLower(name)
		if other, dup := seen[lower]; dup {
			return invalid("--header", fmt.Sprintf("%q and %q are the same header; give it once", other, name))
		}
		seen[lower] = name
	}
	if err := validateTLS(s.TLS); err != nil && !sealed {
		return err
	}
	return validateOAuth2(s.OAuth2, s.Headers, sealed)
}

// ValidateBreaker is the one rule of the circuit breaker's fields: a
// failure rate above 0 and at most 1, a window from 1s to 10m, min
// requests and consecutive failures from 1 to 100,000. A zero field takes
// its default (see SetDefaults) and passes, unless given reports its flag
// ("--breaker-window") given: relay sub add|update refuses a flag given as
// 0 in the same words as any value out of range. Validate calls it with
// given nil.
func (s Subscriber) ValidateBreaker(given func(flag string) bool) error {
	checked := func(flag string, zero bool) bool { return !zero || (given != nil && given(flag)) }
	if r := s.BreakerFailureRate; checked("--breaker-failure-rate", r == 0) && !(r > 0 && r <= 1) {
		return invalid("--breaker-failure-rate", fmt.Sprintf("must be a share of requests above 0 and at most 1, such as 0.5, got %v", r))
	}
	if w := s.BreakerWindow.Std(); checked("--breaker-window", w == 0) && (w < minBreakerWindow || w > maxBreakerWindow) {
		return invalid("--breaker-window", fmt.Sprintf("must be from %v to %v, got %v", minBreakerWindow, maxBreakerWindow, s.BreakerWindow))
	}
	if n := s.BreakerMinRequests; checked("--breaker-min-requests", n == 0) && (n < 1 || n > maxBreakerRequests) {
		return invalid("--breaker-min-requests", fmt.Sprintf("must be from 1 to %d, got %d", maxBreakerRequests, n))
	}
	if n := s.BreakerConsecutive; checked("--breaker-consecutive", n == 0) && (n < 1 || n > maxBreakerRequests) {
		return invalid("--breaker-consecutive", fmt.Sprintf("must be from 1 to %d, got %d", maxBreakerRequests, n))
	}
	return nil
}

// validateURL checks the subscriber URL. Whether its address is private is
// not judged here: the relay that dials decides, by its own flag.
func validateURL(raw string) error { return validateURLFlag("--url", raw) }

// validateURLFlag checks a URL relay dials (a webhook's, a token
// endpoint's) given with flag: http or https, with a host, without
// credentials.
func validateURLFlag(flag, raw string) error {
	const expect = "must be an http or https URL with a host"
	u, err := url.Parse(raw)
	if err != nil {
		// Neither the URL nor url.Parse's error (which quotes it) is shown:
		// a query string may hold a credential.
		return invalid(flag, expect+"; the one given does not parse as a URL")
	}
	if u.User != nil {
		return invalid(flag, fmt.Sprintf("must not contain a user or password (send credentials with --header, such as \"Authorization: Basic ...\"), got %s", quote(RedactURL(raw))))
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Opaque != "" || u.Hostname() == "" {
		return invalid(flag, fmt.Sprintf("%s, got %s", expect, quote(RedactURL(raw))))
	}
	return nil
}

// validateSecrets checks that there is at least one secret and that each
// parses, without ever quoting a secret.
func validateSecrets(secrets []string) error {
	if len(secrets) == 0 {
		return invalid("--secret", `at least one secret is required: "whsec_" followed by base64 of 24–64 bytes`)
	}
	for i, sec := range secrets {
		if err := parseKey(sec); err != nil {
			return secretError(i, len(secrets), err)
		}
	}
	return nil
}

// validatePrevious checks the retired secrets a rotation keeps, without
// ever quoting one.
func validatePrevious(prev []PreviousSecret) error {
	if len(prev) > MaxPreviousSecrets {
		return invalid("--secret", fmt.Sprintf("at most %d previous secrets are kept, got %d", MaxPreviousSecrets, len(prev)))
	}
	for i, p := range prev {
		if err := parseKey(p.Secret); err != nil {
			msg := strings.TrimPrefix(err.Error(), deliver.ErrInvalidSecret.Error()+": ")
			return &ValidationError{Flag: "--secret", Msg: fmt.Sprintf("previous secret %d of %d: %s", i+1, len(prev), msg), Err: err}
		}
		if p.Until.IsZero() {
			return invalid("--secret", fmt.Sprintf("previous secret %d of %d: has no end of its grace (until)", i+1, len(prev)))
		}
	}
	return nil
}

// secretError turns an error of [deliver.ParseSecret] into a validation
// error for --secret, keeping its explanation of what is wrong.
func secretError(i, n int, err error) error {
	msg := strings.TrimPrefix(err.Error(), deliver.ErrInvalidSecret.Error()+": ")
	if n > 1 {
		msg = fmt.Sprintf("secret %d of %d: %s", i+1, n, msg)
	}
	return &ValidationError{Flag: "--secret", Msg: msg, Err: err}
}

// expiry is the soonest time at which s holds something that must go: a
// retired secret whose grace ends, or the end of a pause. ok is false when
// s holds neither.
func (s Subscriber) expiry() (at time.Time, ok bool) {
	for _, p := range s.PreviousSecrets {
		if !ok || p.Until.Before(at) {
			at, ok = p.Until, true
		}
	}
	if s.Paused && !s.PausedUntil.IsZero() && (!ok || s.PausedUntil.Before(at)) {
		at, ok = s.PausedUntil, true
	}
	return at, ok
}

// expire drops from s what has ended at now: the previous secrets whose
// grace is over, and a pause whose time has passed. It reports whether
// anything changed. s must not share its PreviousSecrets with a snapshot.
func (s *Subscriber) expire(now time.Time) bool {
	kept := slices.DeleteFunc(s.PreviousSecrets, func(p PreviousSecret) bool { return !now.Before(p.Until) })
	changed := len(kept) != len(s.PreviousSecrets)
	s.PreviousSecrets = kept
	if len(s.PreviousSecrets) == 0 {
		s.PreviousSecrets = nil
	}
	if s.Paused && !s.PausedAt(now) {
		s.Paused, s.PausedUntil, changed = false, time.Time{}, true
	}
	if !s.Paused && !s.PausedUntil.IsZero() {
		s.PausedUntil, changed = time.Time{}, true
	}
	return changed
}

// sensitiveHeaderWords mark header names whose values are credentials more
// often than not; [Subscriber.Redacted] hides their values.
var sensitiveHeaderWords = []string{"auth", "token", "secret", "key", "password", "cookie", "session", "signature", "credential"}

// maskedValue replaces a hidden header value.
const maskedValue = "…"

// Redacted returns a copy of s that is safe to print or log: every secret,
// active or previous, is masked as [MaskKey] masks it (enough to tell two
// apart, no byte of a private key), and so is the value of every header
// whose name suggests a credential (Authorization, X-Api-Key, Cookie and the
// like); the URL loses its query string and fragment, as [RedactURL] says.
// The copy shares no slice or map with s.
func (s Subscriber) Redacted() Subscriber {
	r := s
	r.URL = RedactURL(s.URL)
	r.Secrets = make([]string, len(s.Secrets))
	for i, sec := range s.Secrets {
		r.Secrets[i] = MaskKey(sec)
	}
	r.PreviousSecrets = nil
	for _, p := range s.PreviousSecrets {
		r.PreviousSecrets = append(r.PreviousSecrets, PreviousSecret{Secret: MaskKey(p.Secret), Until: p.Until})
	}
	r.Events = slices.Clone(s.Events)
	r.OAuth2 = redactedOAuth2(s.OAuth2)
	r.TLS = redactedTLS(s.TLS)
	if s.Headers != nil {
		r.Headers = make(map[string]string, len(s.Headers))
		for name, value := range s.Headers {
			if sensitiveHeader(name) {
				value = maskedValue
			}
			r.Headers[name] = value
		}
	}
	return r
}

// MaskKey is the one form in which a subscriber's signing secret or key is
// printed, by every command (and every other surface): a key sealed with
// a key not given as [secrets.Mask] shows it ("sealed:<key id>"), any
// other as [deliver.MaskSecret] does.
func MaskKey(k string) string {
	if secrets.IsSealed(k) {
		return secrets.Mask(k)
	}
	return deliver.MaskSecret(k)
}

// RedactURL returns a URL in a form safe to print: without its user
// information, and with its query string and fragment, which often carry a
// token (?token=…), replaced by an ellipsis, such as
// "https://example.com/hook?…". A string that does not parse as a URL is
// shown as an ellipsis alone, since nothing tells which part is sensitive.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return maskedValue
	}
	query := u.RawQuery != "" || u.ForceQuery
	fragment := u.Fragment != "" || u.RawFragment != "" || strings.HasSuffix(raw, "#")
	u.User = nil
	u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = "", false, "", ""
	out := u.String()
	if query {
		out += "?" + maskedValue
	}
	if fragment {
		out += "#" + maskedValue
	}
	return out
}

// sensitiveHeader reports whether a header's value should not be printed.
func sensitiveHeader(name string) bool {
	lower := strings.ToLower(name)
	for _, w := range sensitiveHeaderWords {
		if strings.Contains(lower, w) {
			return true
		}
	}
	return false
}

// clone returns a copy of s that shares no slice or map with it.
func (s Subscriber) clone() Subscriber {
	c := s
	c.Secrets = slices.Clone(s.Secrets)
	c.PreviousSecrets = slices.Clone(s.PreviousSecrets)
	c.Events = slices.Clone(s.Events)
	c.RetryStatus = slices.Clone(s.RetryStatus)
	c.Headers = maps.Clone(s.Headers)
	c.OAuth2 = cloneOAuth2(s.OAuth2)
	if s.TLS != nil {
		t := *s.TLS
		c.TLS = &t
	}
	return c
}

// quote quotes a user-given value for an error message, shortened so that
// the message stays one readable line.
func quote(s string) string {
	const limit = 100
	if len(s) > limit {
		cut := limit
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		return fmt.Sprintf("%q…", s[:cut])
	}
	return fmt.Sprintf("%q", s)
}

// defaultBurst is the burst of a subscriber given a rate and no --burst:
// the rate rounded up, at least 1.
func defaultBurst(rate float64) int { return max(1, int(math.Ceil(rate))) }

// SetRate changes the subscriber's rate, as `relay sub update --rate`
// does. A burst that was never given (--burst) and is still the one the
// old rate gave follows the rate: a subscriber added with --rate 50 and
// lowered to --rate 5 gets a burst of 5, not 50 requests at once after
// each quiet spell. It reports whether the burst followed, and the burst
// before; [Subscriber.SetDefaults] fills the new one.
func (s *Subscriber) SetRate(rate float64) (followed bool, was int) {
	was = s.Burst
	if !s.BurstGiven && s.Rate > 0 && s.Burst == defaultBurst(s.Rate) {
		s.Burst, followed = 0, true
	}
	s.Rate = rate
	return followed, was
}

// SetBurst sets the subscriber's burst as --burst does: 0 is the rate's
// again, which a change of the rate then moves; any other is its own.
func (s *Subscriber) SetBurst(burst int) {
	s.Burst, s.BurstGiven = burst, burst != 0
}

// ValidateRetryStatus is the rule of --retry-status, which `relay sub
// add|update` and every other way of writing a subscriber call: each
// status must be one a receiver answers that is final by default, a 4xx
// but 408, 425 and 429 (retried already) and 410 (which disables the
// subscriber). A 5xx is retried already; a 2xx or 3xx is no failure.
func ValidateRetryStatus(codes []int) error {
	for _, c := range codes {
		switch {
		case c == 408 || c == 425 || c == 429 || c >= 500 && c <= 599:
			return invalid("--retry-status", fmt.Sprintf("%d is retried already; give only statuses that are final by default, such as 401,403,404", c))
		case c == 410:
			return invalid("--retry-status", "410 Gone disables the subscriber and cannot be retried; give statuses such as 401,403,404")
		case c < 400 || c > 499:
			return invalid("--retry-status", fmt.Sprintf("must be 4xx statuses that are final by default, such as 401,403,404, got %d", c))
		}
	}
	return nil
}

// Retries reports whether a delivery answered with status is retried by
// the subscriber's --retry-status rather than dead-lettered as rejected.
func (s *Subscriber) Retries(status int) bool {
	return slices.Contains(s.RetryStatus, status)
}
