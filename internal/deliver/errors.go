package deliver

import "errors"

var (
	// ErrInvalidSecret means a secret is not "whsec_" followed by the base64
	// of a 24 to 64 byte key; such a secret cannot sign or verify anything.
	ErrInvalidSecret = errors.New("invalid secret")

	// ErrBadSignature means no signature in a webhook-signature header matches
	// any of the keys: the request was not signed by a holder of the secret,
	// or its id, timestamp or body were changed on the way.
	ErrBadSignature = errors.New("bad signature")

	// ErrStaleTimestamp means a webhook-timestamp is further from now than the
	// tolerance allows; a correct signature on an old request is how replay
	// attacks look.
	ErrStaleTimestamp = errors.New("timestamp outside tolerance")

	// ErrMissingHeaders means webhook-id, webhook-timestamp or
	// webhook-signature is absent or malformed, so there is nothing to verify.
	ErrMissingHeaders = errors.New("missing or malformed webhook headers")

	// ErrRefused means the SSRF guard refused to dial an address because it
	// is loopback, private, link-local, CGNAT, reserved or special-purpose,
	// multicast, unspecified or broadcast, or carries such an IPv4 address
	// (see [CheckAddr]). The outcome of such an attempt is [Refused].
	ErrRefused = errors.New("refused address")

	// ErrTimeout means the attempt did not finish within its timeout. The
	// outcome is [Retryable]: a slow subscriber may be fast again later.
	ErrTimeout = errors.New("timeout")

	// ErrConnection means the attempt failed below HTTP: the connection could
	// not be made, was closed, or the reply was not valid HTTP. The outcome
	// is [Retryable].
	ErrConnection = errors.New("connection failed")

	// ErrLocal means the attempt failed on the relay's side, not the
	// subscriber's: the dial ran out of file descriptors, socket buffers,
	// memory or local ports, or the caller cancelled the attempt (the relay
	// stopping). The outcome is [Local], which is not an attempt and not a
	// breaker failure; the error also wraps the cause (a syscall.Errno, or
	// context.Canceled), so errors.Is still tells which.
	ErrLocal = errors.New("local failure")

	// ErrStatus means the subscriber answered with a status other than 2xx;
	// the wrapping error names the status and the outcome's class says what
	// it means for the message.
	ErrStatus = errors.New("unexpected status")

	// ErrInvalidRequest means a [Request] cannot be sent at all (a URL that
	// is not absolute http or https, a header that is not valid HTTP).
	// Retrying cannot help, so the outcome is [Rejected].
	ErrInvalidRequest = errors.New("invalid request")

	// ErrToken means the attempt failed before its request because no
	// access token could be had from the subscriber's OAuth2 token endpoint
	// (see [OAuth2]). The attempt is [Retryable], retried on the
	// subscriber's schedule, and the endpoint's answer is its error; a token
	// URL the SSRF guard refuses makes it [Refused].
	ErrToken = errors.New("oauth2 token")

	// ErrInvalidOption means an [Option] given to [NewClient] has a value the
	// client cannot work with.
	ErrInvalidOption = errors.New("invalid option")
)
