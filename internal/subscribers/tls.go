package subscribers

import (
	"errors"
	"strings"

	"github.com/relay-dev/relay/internal/deliver"
)

// validateTLS checks a subscriber's TLS setting, naming the `relay sub
// add` flag at fault and never quoting the private key: the CA
// certificates parse, and the client certificate and key come together,
// parse and match.
func validateTLS(t *deliver.TLS) error {
	if t == nil {
		return nil
	}
	if t.CACert != "" {
		if err := (&deliver.TLS{CACert: t.CACert}).Check(); err != nil {
			return tlsInvalid("--ca-cert", err)
		}
	}
	switch {
	case t.ClientCert == "" && t.ClientKey == "":
		if t.CACert == "" {
			return invalid("--client-cert", "a TLS setting needs a client certificate and key, or a CA certificate")
		}
		return nil
	case t.ClientKey == "":
		return invalid("--client-key", "is required with --client-cert")
	case t.ClientCert == "":
		return invalid("--client-cert", "is required with --client-key")
	case !strings.Contains(t.ClientKey, "-----BEGIN ") || !strings.Contains(t.ClientKey, "PRIVATE KEY-----"):
		return invalid("--client-key", "is not a PEM private key (-----BEGIN PRIVATE KEY-----)")
	}
	if err := (&deliver.TLS{ClientCert: t.ClientCert, ClientKey: t.ClientKey}).Check(); err != nil {
		flag := "--client-cert"
		if strings.Contains(err.Error(), "private key") {
			flag = "--client-key"
		}
		return tlsInvalid(flag, err)
	}
	return nil
}

// tlsInvalid is a validation error for flag from an [deliver.ErrTLS], its
// explanation kept.
func tlsInvalid(flag string, err error) error {
	msg := strings.TrimPrefix(err.Error(), deliver.ErrTLS.Error()+": ")
	return &ValidationError{Flag: flag, Msg: msg, Err: errors.Unwrap(err)}
}

// redactedTLS is t safe to print: the private key masked, the
// certificates (public) as they are.
func redactedTLS(t *deliver.TLS) *deliver.TLS {
	if t == nil {
		return nil
	}
	r := *t
	if r.ClientKey != "" {
		r.ClientKey = maskedValue
	}
	return &r
}
