package secrets

import (
	"errors"
	"fmt"
)

var (
	// ErrKeyFile means a key file, or one of its lines, is not a list of
	// keys: each the standard base64 of 32 bytes. It is wrapped with the
	// file's name and the line at fault, never with a key.
	ErrKeyFile = errors.New("invalid secrets key file")

	// ErrMissingKey means a value is sealed under a key the keyring does
	// not hold; the error is a [*MissingKeyError] naming the key's id.
	ErrMissingKey = errors.New("sealed with a key not given")

	// ErrTampered means a sealed value names a key the keyring holds but
	// does not open under it: it was changed, cut, or copied from another
	// context.
	ErrTampered = errors.New("sealed value does not open")
)

// MissingKeyError is the error of [Keyring.Open] for a value sealed under a
// key the keyring lacks. It wraps [ErrMissingKey].
type MissingKeyError struct {
	// KeyID is the id of the key that sealed the value.
	KeyID string
}

// Error names the key id the value needs.
func (e *MissingKeyError) Error() string {
	return fmt.Sprintf("sealed with key %s, which is not among the secrets keys given (--secrets-key-file)", e.KeyID)
}

// Unwrap returns [ErrMissingKey].
func (e *MissingKeyError) Unwrap() error { return ErrMissingKey }
