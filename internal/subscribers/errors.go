package subscribers

import (
	"errors"
	"fmt"
)

var (
	// ErrNotFound means no subscriber has the given id. It is wrapped with
	// the id, so the message says which one was looked for.
	ErrNotFound = errors.New("no such subscriber")

	// ErrInvalid means a subscriber, or one of its parts given on its own,
	// breaks a rule of docs/cli.md (relay sub add). Every validation error wraps it and is a
	// [*ValidationError] naming the `relay sub add` flag at fault, so the CLI
	// can print it as is and exit with status 2.
	ErrInvalid = errors.New("invalid subscriber")

	// ErrTooManyDedicated means a subscriber asked for a dedicated lane when
	// [MaxDedicated] subscribers already have one. Each dedicated lane is a
	// JetStream consumer on the DELIVERIES work-queue stream, and every ack
	// scans all of that stream's consumers, so their number is capped. The
	// error also wraps [ErrInvalid], because the remedy is a different
	// command line: a shared lane.
	ErrTooManyDedicated = errors.New("too many dedicated lanes")

	// ErrCorrupt means a value in the relay_subscribers bucket is not a valid
	// subscriber: it is not JSON of the expected shape, its id does not match
	// its key, or it breaks a validation rule. Such a value was written
	// around relay (for example with `nats kv put`); relay never writes one.
	// It is wrapped with the key and with the underlying problem.
	ErrCorrupt = errors.New("corrupt subscriber value in bucket")

	// ErrExists means `relay sub add` (a create) was given the id of a
	// subscriber that exists (see [Create]): replacing it would change its
	// secret, its URL and every setting not given, so a create refuses, as
	// an API answers 409 Conflict. The error is an [*ExistsError].
	ErrExists = errors.New("subscriber exists")
)

// ExistsError is returned by [Store.Put] with [Create] when the subscriber
// exists. It carries the stored URL so that the CLI can name it, and wraps
// [ErrExists].
type ExistsError struct {
	// ID is the subscriber's id, URL the one stored (empty when the
	// stored value cannot be read).
	ID, URL string
}

// Error names the stored URL in its redacted form ([RedactURL]), since an
// error is printed and logged.
func (e *ExistsError) Error() string {
	if e.URL == "" {
		return fmt.Sprintf("subscriber %s exists (a value this relay cannot read)", e.ID)
	}
	return fmt.Sprintf("subscriber %s exists (URL %s)", e.ID, RedactURL(e.URL))
}

// Unwrap returns [ErrExists].
func (e *ExistsError) Unwrap() error { return ErrExists }

// ValidationError is the error returned for a value that breaks a rule. It
// names the `relay sub add` flag (or the positional "ID") that carries the
// value and says what that flag expects, in one line, so that the user can
// fix the command without reading documentation. It wraps [ErrInvalid] and,
// when there is one, the error that caused it.
type ValidationError struct {
	// Flag is the command-line flag at fault, such as "--url", or "ID" for
	// the subscriber id.
	Flag string
	// Msg says what the flag expects and, when it is safe to show, what it
	// got. It never contains a secret or a header value.
	Msg string
	// Err is the underlying cause, if any, such as the error from parsing a
	// secret.
	Err error
}

// Error returns the one-line message, "<flag>: <what it expects>".
func (e *ValidationError) Error() string {
	return e.Flag + ": " + e.Msg
}

// Unwrap returns [ErrInvalid] and the cause, so that errors.Is finds both.
func (e *ValidationError) Unwrap() []error {
	errs := []error{ErrInvalid}
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	return errs
}

// invalid returns a [*ValidationError] for flag.
func invalid(flag, msg string) error {
	return &ValidationError{Flag: flag, Msg: msg}
}

// ErrSealed means a subscriber's credentials are sealed under a key that
// was not given (see [SealedError]).
var ErrSealed = errors.New("subscriber's secrets are sealed with a key not given")

// SealedError is the error for a subscriber whose credentials are sealed
// under a key the keyring lacks: it cannot be delivered to, tested or
// changed until relay is given that key. It wraps [ErrSealed].
type SealedError struct {
	// ID is the subscriber's id, KeyID the id of the key it needs.
	ID, KeyID string
}

// Error names the subscriber and the key id it needs, in one line.
func (e *SealedError) Error() string {
	return fmt.Sprintf("subscriber %s: its secrets are sealed with key %s, which is not among the secrets keys given (--secrets-key-file or RELAY_SECRETS_KEY_FILE)", e.ID, e.KeyID)
}

// Unwrap returns [ErrSealed].
func (e *SealedError) Unwrap() error { return ErrSealed }

// ErrNoKeys means a Store was asked to seal with no keyring given.
var ErrNoKeys = errors.New("no secrets key given (--secrets-key-file or RELAY_SECRETS_KEY_FILE)")
