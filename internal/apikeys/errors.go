package apikeys

import "errors"

var (
	// ErrInvalidScope means a scope list names no scope, or one that is not
	// in [Scopes].
	ErrInvalidScope = errors.New("invalid scope")

	// ErrInvalidName means a key name is not 1 to 64 characters from
	// A-Z a-z 0-9 _ - (it is a KV key, and is shown in logs).
	ErrInvalidName = errors.New("invalid key name")

	// ErrExists means a key of that name exists: a key is never replaced
	// silently, remove it first.
	ErrExists = errors.New("a key of that name exists")

	// ErrNotFound means no key has that name.
	ErrNotFound = errors.New("no key of that name")

	// ErrUnknownKey means a presented key is malformed or matches no
	// stored key. It never carries the key.
	ErrUnknownKey = errors.New("unknown API key")
)
