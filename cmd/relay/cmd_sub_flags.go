package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/relay-dev/relay/internal/deliver"
	"github.com/relay-dev/relay/internal/subscribers"
)

// subFlags are the flags that describe a subscriber. relay sub add and relay
// sub update register the same set, so that the two commands take the same
// flags with the same meaning: add with every flag (an unset one takes its
// default), update with only the ones given.
type subFlags struct {
	url         string
	owner       string
	secrets     secretFlags
	signing     string
	keyFile     string
	events      []string
	filter      string
	rate        float64
	burst       int
	maxAttempts int
	timeout     time.Duration
	retryBase   time.Duration
	retryMax    time.Duration
	maxInFlight int
	maxBacklog  int
	breaker     breakerFlags
	deadline    time.Duration
	headers     []string
	lane        string
	retryStatus []string
	oauth2      oauth2Flags
	tls         tlsFlags

	// generated are the keys the last application of a change generated,
	// for the command to print: a "whsec_" secret, or a "whsk_" key whose
	// public key is printed.
	generated []string
	// burstFollowed says that the last application of a change moved the
	// burst with the rate (see [subscribers.Subscriber.SetRate]), from
	// burstWas.
	burstFollowed bool
	burstWas      int
}

// register defines the flags on fs. With defaults (add) the help shows
// what an unset flag means; without (update) an unset flag keeps the
// stored value, so no default is shown.
func (f *subFlags) register(fs *pflag.FlagSet, defaults bool) {
	fs.StringVar(&f.url, "url", "", "webhook URL (http or https)")
	fs.StringVar(&f.owner, "owner", "", "the platform's own id of the customer this subscriber is for ('' for none; GET /v1/subscribers?owner= lists by it)")
	f.secrets.register(fs, "secret", secretLinesHint, "signing secret, whsec_ + base64 of 24-64 bytes; repeat during a rotation, newest first")
	fs.StringVar(&f.signing, "signing", shown(defaults, string(subscribers.SigningHMAC)), "signature scheme: hmac (v1, whsec_ secret), ed25519 (v1a, whsk_ key) or both")
	fs.StringVar(&f.keyFile, "signing-key-file", "", "read the ed25519 signing keys (whsk_..., one a line, newest first) from this file")
	fs.StringSliceVar(&f.events, "events", nil, "event types to receive, comma separated, NATS wildcards allowed (none: all)")
	fs.StringVar(&f.filter, "filter", "", `content filter, a CEL expression over body, type and headers, such as 'body.status == "paid"' (none: every event of --events)`)
	fs.Float64Var(&f.rate, "rate", 0, "requests per second, 0 = unlimited")
	fs.IntVar(&f.burst, "burst", 0, "bucket size: requests allowed at once (0: the rate)")
	fs.IntVar(&f.maxAttempts, "max-attempts", shown(defaults, subscribers.DefaultMaxAttempts), "attempts before a delivery is dead-lettered")
	fs.DurationVar(&f.timeout, "timeout", shown(defaults, subscribers.DefaultTimeout), "HTTP timeout of one attempt")
	fs.DurationVar(&f.retryBase, "retry-base", shown(defaults, subscribers.DefaultRetryBase), "delay before the first retry; doubles on each one")
	fs.DurationVar(&f.retryMax, "retry-max", shown(defaults, subscribers.DefaultRetryMax), "longest delay between retries")
	fs.IntVar(&f.maxInFlight, "max-in-flight", shown(defaults, subscribers.DefaultMaxInFlight), "requests in flight at once, per relay")
	fs.IntVar(&f.maxBacklog, "max-backlog", shown(defaults, subscribers.DefaultMaxBacklog), "deliveries that may wait for this subscriber; past it new copies are dead-lettered as backlog")
	fs.Float64Var(&f.breaker.failureRate, "breaker-failure-rate", shown(defaults, subscribers.DefaultBreakerFailureRate), "open the circuit when this share of the requests of --breaker-window failed")
	fs.IntVar(&f.breaker.minRequests, "breaker-min-requests", shown(defaults, subscribers.DefaultBreakerMinRequests), "requests the window must hold for --breaker-failure-rate to count")
	fs.DurationVar(&f.breaker.window, "breaker-window", shown(defaults, subscribers.DefaultBreakerWindow), "span the share of failures is counted over")
	fs.IntVar(&f.breaker.consecutive, "breaker-consecutive", shown(defaults, subscribers.DefaultBreakerConsecutive), "failures in a row that open the circuit of a subscriber too thin for a share")
	fs.DurationVar(&f.deadline, "deadline-after", 0, "default deadline of an event without its own Relay-Deadline, from its due time (0: none)")
	fs.StringArrayVar(&f.headers, "header", nil, "extra request header 'Name: value'; repeatable")
	fs.StringVar(&f.lane, "lane", shown(defaults, "shared"), "shared or dedicated")
	fs.StringSliceVar(&f.retryStatus, "retry-status", nil, "statuses final by default to retry as a 5xx is, such as 401,403,404 (none: every 4xx but 408, 425 and 429 is final)")
	f.oauth2.register(fs)
	f.tls.register(fs)
}

// shown is a flag's default when defaults are shown, else the zero value,
// which the help leaves out.
func shown[T any](defaults bool, v T) T {
	if defaults {
		return v
	}
	var zero T
	return zero
}

// changes checks the flags given on fs and returns what they change: a
// function that sets, on a subscriber, the fields of the flags given and
// leaves the others alone, and the flag the secrets came from ("" when no
// secret flag was given). Files and the environment are read here, once, so
// that the function may be applied again when a compare-and-set is retried.
func (f *subFlags) changes(fs *pflag.FlagSet) (change func(*subscribers.Subscriber), secretFlag string, err error) {
	given := fs.Changed
	var c subscribers.Change
	if given("events") {
		events := []string{}
		for _, e := range f.events {
			for _, part := range strings.Split(e, ",") {
				if part = strings.TrimSpace(part); part != "" {
					events = append(events, part)
				}
			}
		}
		c.Events = &events
	}
	var headers map[string]string
	for _, h := range f.headers {
		name, value, err := subscribers.ParseHeader(h)
		if err != nil {
			return nil, "", validationErr(err)
		}
		if headers == nil {
			headers = map[string]string{}
		}
		headers[name] = value
	}
	if given("header") {
		c.Headers = &headers
	}
	var retryStatus []int
	for _, part := range f.retryStatus {
		for _, code := range strings.Split(part, ",") {
			code = strings.TrimSpace(code)
			if code == "" {
				continue
			}
			n, err := strconv.Atoi(code)
			if err != nil {
				return nil, "", usagef("--retry-status: must be HTTP statuses, comma separated, such as 401,403,404, got %q", code)
			}
			retryStatus = append(retryStatus, n)
		}
	}
	if given("retry-status") {
		c.RetryStatus = &retryStatus
	}
	if given("url") {
		c.URL = &f.url
	}
	if given("owner") {
		c.Owner = &f.owner
	}
	if given("filter") {
		c.Filter = &f.filter
	}
	if given("rate") {
		c.Rate = &f.rate
	}
	if given("burst") {
		c.Burst = &f.burst
	}
	if given("max-attempts") {
		c.MaxAttempts = &f.maxAttempts
	}
	if given("timeout") {
		c.Timeout = durationOf(f.timeout)
	}
	if given("retry-base") {
		c.RetryBase = durationOf(f.retryBase)
	}
	if given("retry-max") {
		c.RetryMax = durationOf(f.retryMax)
	}
	if given("max-in-flight") {
		c.MaxInFlight = &f.maxInFlight
	}
	if given("max-backlog") {
		c.MaxBacklog = &f.maxBacklog
	}
	if given("deadline-after") {
		c.DeadlineAfter = durationOf(f.deadline)
	}
	if given("lane") {
		c.Lane = &f.lane
	}
	if err := c.Check(); err != nil {
		return nil, "", validationErr(err)
	}
	breaker := subscribers.Subscriber{BreakerFailureRate: f.breaker.failureRate, BreakerMinRequests: f.breaker.minRequests,
		BreakerWindow: subscribers.Duration(f.breaker.window), BreakerConsecutive: f.breaker.consecutive}
	if err := breaker.ValidateBreaker(func(flag string) bool { return given(strings.TrimPrefix(flag, "--")) }); err != nil {
		return nil, "", usagef("%w", err)
	}
	keys, secretFlag, err := f.keys(fs)
	if err != nil {
		return nil, "", err
	}
	grant, err := f.oauth2.change(fs)
	if err != nil {
		return nil, "", err
	}
	tlsChange, err := f.tls.change(fs)
	if err != nil {
		return nil, "", err
	}
	change = func(sub *subscribers.Subscriber) {
		sub.Secrets, f.generated = keys.apply(sub.Secrets)
		f.burstFollowed, f.burstWas = c.Apply(sub)
		if given("breaker-failure-rate") {
			sub.BreakerFailureRate = f.breaker.failureRate
		}
		if given("breaker-min-requests") {
			sub.BreakerMinRequests = f.breaker.minRequests
		}
		if given("breaker-window") {
			sub.BreakerWindow = subscribers.Duration(f.breaker.window)
		}
		if given("breaker-consecutive") {
			sub.BreakerConsecutive = f.breaker.consecutive
		}
		if grant != nil {
			sub.OAuth2 = grant(sub.OAuth2)
		}
		if tlsChange != nil {
			sub.TLS = tlsChange(sub.TLS)
		}
	}
	return change, secretFlag, nil
}

// durationOf is a flag's duration as a subscriber holds it.
func durationOf(d time.Duration) *subscribers.Duration {
	v := subscribers.Duration(d)
	return &v
}

// breakerFlags are the circuit-breaker rule's flags (--breaker-*).
type breakerFlags struct {
	failureRate float64
	minRequests int
	window      time.Duration
	consecutive int
}

// keyChange is what the key flags (--secret and its two siblings,
// --signing-key-file, --signing) change of a subscriber's keys.
type keyChange struct {
	// signing is --signing, "" when not given.
	signing subscribers.Signing
	// secrets and signingKeys are the keys given of each kind, nil when
	// none was.
	secrets, signingKeys []string
	// newSecret and newSigningKey are generated in advance, used for a
	// kind that is wanted and has no key given or stored.
	newSecret, newSigningKey string
}

// apply returns the keys a subscriber holding cur has after the change, and
// those of them that were generated. Each kind is the keys given, else the
// keys of that kind held, else (when the kind is wanted) a generated one; a
// kind --signing does not want is dropped. With neither --signing nor a key
// given the keys stay as they are, unless there are none (a new
// subscriber), which gets a generated secret.
func (k keyChange) apply(cur []string) (keys, generated []string) {
	var held, heldSigning []string
	for _, key := range cur {
		if deliver.IsSigningKey(key) {
			heldSigning = append(heldSigning, key)
		} else {
			held = append(held, key)
		}
	}
	want := k.signing
	if want == "" {
		if k.secrets == nil && k.signingKeys == nil && len(cur) > 0 {
			return cur, nil
		}
		// The kinds of the keys each flag gives, else of those held.
		secrets, signingKeys := held, heldSigning
		if k.secrets != nil {
			secrets = k.secrets
		}
		if k.signingKeys != nil {
			signingKeys = k.signingKeys
		}
		want = subscribers.SigningOf(slices.Concat(secrets, signingKeys))
	}
	pick := func(wanted bool, given, held []string, fresh string) {
		switch {
		case !wanted:
		case given != nil:
			keys = append(keys, given...)
		case len(held) > 0:
			keys = append(keys, held...)
		default:
			keys = append(keys, fresh)
			generated = append(generated, fresh)
		}
	}
	pick(want.HMAC(), k.secrets, held, k.newSecret)
	pick(want.Ed25519(), k.signingKeys, heldSigning, k.newSigningKey)
	return keys, generated
}

// keys reads the key flags given on fs: the secrets, the signing keys and
// --signing, refusing a key of a kind --signing does not use. It returns the
// flag the secrets came from, as [secretFlags.read] does.
func (f *subFlags) keys(fs *pflag.FlagSet) (keyChange, string, error) {
	var k keyChange
	if fs.Changed("signing") {
		g, err := subscribers.ParseSigning(f.signing)
		if err != nil {
			return k, "", validationErr(err)
		}
		k.signing = g
	}
	secrets, secretFlag, err := f.secrets.read(fs)
	if err != nil {
		return k, "", err
	}
	for _, s := range secrets {
		if deliver.IsSigningKey(s) {
			return k, "", usagef("%s: give whsk_ signing keys with --signing-key-file, not with %s", secretFlag, secretFlag)
		}
	}
	if secretFlag != "" {
		k.secrets = secrets
	}
	if fs.Changed("signing-key-file") {
		if k.signingKeys, err = readSigningKeys(f.keyFile); err != nil {
			return k, "", err
		}
	}
	if k.signing != "" && k.secrets != nil && !k.signing.HMAC() {
		return k, "", usagef("%s: --signing %s uses no whsec_ secret; give --signing both to sign with both", secretFlag, k.signing)
	}
	if k.signing != "" && k.signingKeys != nil && !k.signing.Ed25519() {
		return k, "", usagef("--signing-key-file: --signing %s uses no ed25519 key; give --signing both to sign with both", k.signing)
	}
	if k.newSecret, err = subscribers.NewSecret(); err != nil {
		return k, "", err
	}
	if k.newSigningKey, err = deliver.NewSigningKey(); err != nil {
		return k, "", err
	}
	return k, secretFlag, nil
}

// readSigningKeys reads a --signing-key-file: whsk_ keys, one a line,
// newest first, each checked here so that the error names this flag. No
// error quotes a key.
func readSigningKeys(path string) ([]string, error) {
	text, err := readKeyFile("--signing-key-file", path)
	if err != nil {
		return nil, err
	}
	keys := secretLines(text)
	if len(keys) == 0 {
		return nil, usagef("--signing-key-file: %s holds no key; write one whsk_ key a line, newest first", path)
	}
	for i, key := range keys {
		if _, err := deliver.ParseSigningKey(key); err != nil {
			msg := strings.TrimPrefix(err.Error(), deliver.ErrInvalidSecret.Error()+": ")
			return nil, usagef("--signing-key-file: key %d of %d: %s", i+1, len(keys), msg)
		}
	}
	return keys, nil
}

// printGenerated prints the keys a command generated, each once: a secret
// as it is (the receiver needs it), a signing key as its public key (the
// receiver needs no more, and the private key is never printed).
func printGenerated(out io.Writer, generated []string) {
	for _, key := range generated {
		if deliver.IsSigningKey(key) {
			pub, _ := deliver.PublicKey(key)
			key = pub
		}
		fmt.Fprintln(out, key)
	}
}

// secretLinesHint says what a --secret-file or --secret-env holds.
const secretLinesHint = "the whsec_ secrets, one a line, newest first"

// maxSecretFile bounds what --secret-file reads: a few secrets take a few
// hundred bytes, and a file far larger is not a secret file.
const maxSecretFile = 64 << 10

// secretFlags are the three ways to give secrets: on the command line
// (where other users of the machine may see them in the process list), in a
// file, or in an environment variable.
type secretFlags struct {
	// name is the flag on the command line; name-file and name-env are
	// the others.
	name string
	// what says what a line holds, for the errors: "one whsec_ secret a
	// line, newest first".
	what   string
	values []string
	file   string
	env    string
}

// register defines --name (with the given help), --name-file and
// --name-env on fs.
func (f *secretFlags) register(fs *pflag.FlagSet, name, what, help string) {
	f.name, f.what = name, what
	fs.StringArrayVar(&f.values, name, nil, help)
	fs.StringVar(&f.file, name+"-file", "", "read "+what+" from this file instead")
	fs.StringVar(&f.env, name+"-env", "", "read "+what+" from this environment variable instead")
}

// read returns the secrets given, newest first, and the flag that gave
// them; no secret flag gives none and "". More than one of the three is a
// usage error. No error quotes a secret.
func (f *secretFlags) read(fs *pflag.FlagSet) ([]string, string, error) {
	flag, file, env := "--"+f.name, "--"+f.name+"-file", "--"+f.name+"-env"
	var given []string
	for _, name := range []string{flag, file, env} {
		if fs.Changed(name[2:]) {
			given = append(given, name)
		}
	}
	switch len(given) {
	case 0:
		return nil, "", nil
	case 1:
	default:
		return nil, "", usagef("%s: give only one of %s, %s and %s", strings.Join(given, " and "), flag, file, env)
	}
	switch given[0] {
	case file:
		text, err := readKeyFile(file, f.file)
		if err != nil {
			return nil, "", err
		}
		secrets := secretLines(text)
		if len(secrets) == 0 {
			return nil, "", usagef("%s: %s holds no secret; write %s", file, f.file, f.what)
		}
		return secrets, given[0], nil
	case env:
		if f.env == "" {
			return nil, "", usagef("%s: give the name of an environment variable that holds the secret", env)
		}
		text, ok := os.LookupEnv(f.env)
		if !ok {
			return nil, "", usagef("%s: %s is not set; export it with %s, or use %s", env, f.env, f.what, file)
		}
		secrets := secretLines(text)
		if len(secrets) == 0 {
			return nil, "", usagef("%s: %s is empty; set it to %s", env, f.env, f.what)
		}
		return secrets, given[0], nil
	}
	return append([]string(nil), f.values...), given[0], nil
}

// readKeyFile reads a file of keys or certificates given with flag
// (--secret-file, --signing-key-file, --client-cert…), refusing one far too
// large to be one.
func readKeyFile(flag, path string) (string, error) {
	if path == "" {
		return "", usagef("%s: give the path of a file that holds the key", flag)
	}
	file, err := os.Open(path)
	if err != nil {
		return "", usagef("%s: %w (give a readable file)", flag, err)
	}
	defer file.Close()
	raw, err := io.ReadAll(io.LimitReader(file, maxSecretFile+1))
	if err != nil {
		return "", usagef("%s: reading %s: %w", flag, path, err)
	}
	if len(raw) > maxSecretFile {
		return "", usagef("%s: %s is larger than %d KiB, far more than keys or certificates take", flag, path, maxSecretFile>>10)
	}
	return string(raw), nil
}

// secretLines splits a file's or a variable's text into secrets: one a
// non-empty line, spaces and a CR around it dropped.
func secretLines(text string) []string {
	var out []string
	for line := range strings.Lines(text) {
		if line = strings.TrimSpace(line); line != "" {
			out = append(out, line)
		}
	}
	return out
}

// secretErr names, in a validation error about the secrets, the flag they
// really came from (--secret-file or --secret-env rather than --secret).
func secretErr(err error, flag string) error {
	var ve *subscribers.ValidationError
	if flag != "" && flag != "--secret" && errors.As(err, &ve) && ve.Flag == "--secret" {
		relabelled := *ve
		relabelled.Flag = flag
		return validationErr(&relabelled)
	}
	return validationErr(err)
}

// notFound turns a missing subscriber into the one message every command
// gives for it, "no such subscriber: ID (relay sub ls lists them)"; run
// applies it to whatever a command returns, so a command need not.
func notFound(err error, _ string) error {
	var nf notFoundError
	if errors.Is(err, subscribers.ErrNotFound) && !errors.As(err, &nf) {
		return notFoundError{err}
	}
	return err
}

// notFoundError is a missing subscriber's error with what to do about it.
type notFoundError struct{ err error }

func (e notFoundError) Error() string { return e.err.Error() + " (relay sub ls lists them)" }
func (e notFoundError) Unwrap() error { return e.err }
