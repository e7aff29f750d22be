package api

import (
	"errors"
	"net/http"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/internal/attempts"
	"github.com/relay-dev/relay/internal/deadletter"
	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/internal/testrequest"
)

var (
	// ErrInvalid means a request's input breaks a rule: its message is
	// the one line the CLI gives for the same input.
	ErrInvalid = errors.New("invalid request")

	// ErrTooLarge means a body is over its bound.
	ErrTooLarge = errors.New("body too large")
)

// invalidError is an [ErrInvalid] whose message is its line alone.
type invalidError struct{ msg string }

func (e *invalidError) Error() string { return e.msg }
func (e *invalidError) Unwrap() error { return ErrInvalid }

func invalid(msg string) error { return &invalidError{msg: msg} }

// tooLargeError is an [ErrTooLarge] whose message is its line alone.
type tooLargeError struct{ msg string }

func (e *tooLargeError) Error() string { return e.msg }
func (e *tooLargeError) Unwrap() error { return ErrTooLarge }

// maxPayloadCode is JetStream's error code for a message over a stream's
// max message size.
const maxPayloadCode = 10054

// Status is the HTTP status of err, the one classification both ways in
// use (the NATS service sends 400, 404, 409 or 500 of it).
func Status(err error) int {
	var apiErr *jetstream.APIError
	switch {
	case err == nil:
		return http.StatusOK
	case errors.Is(err, ErrInvalid), errors.Is(err, subscribers.ErrInvalid), errors.Is(err, deadletter.ErrInvalidFilter),
		errors.Is(err, testrequest.ErrInvalid):
		return http.StatusBadRequest
	case errors.Is(err, subscribers.ErrNotFound), errors.Is(err, deadletter.ErrNotFound), errors.Is(err, attempts.ErrNoRecords),
		errors.Is(err, deadletter.ErrUnknownSubscriber),
		errors.Is(err, attempts.ErrNoStream):
		return http.StatusNotFound
	case errors.Is(err, ErrConflict), errors.Is(err, subscribers.ErrExists):
		return http.StatusConflict
	case errors.Is(err, ErrTooLarge), errors.Is(err, nats.ErrMaxPayload),
		errors.As(err, &apiErr) && apiErr.ErrorCode == maxPayloadCode:
		return http.StatusRequestEntityTooLarge
	}
	return http.StatusInternalServerError
}

// detail is the line an answer gives for err: its own for a client's
// error; for relay's own failure, a line that names no internals (the log
// has the error).
func detail(err error, code int) string {
	if code >= 500 {
		return "relay failed to answer; its log says why"
	}
	return err.Error()
}
