package subscribers

import (
	"fmt"
	"strings"
)

// reservedHeaders are the headers a subscriber may not configure, lowercased.
// relay sets content-type and the webhook-* signature headers itself, and
// the HTTP client owns the framing and hop-by-hop headers; letting a
// configured value replace any of them would break the signature or the
// request.
var reservedHeaders = map[string]bool{
	"content-type":      true,
	"content-length":    true,
	"host":              true,
	"connection":        true,
	"keep-alive":        true,
	"proxy-connection":  true,
	"te":                true,
	"trailer":           true,
	"transfer-encoding": true,
	"upgrade":           true,
}

// reservedHeaderPrefix starts the Standard Webhooks headers (webhook-id,
// webhook-timestamp, webhook-signature) and any the specification adds.
const reservedHeaderPrefix = "webhook-"

// ParseHeader splits a header as given to `relay sub add --header`, "Name:
// value", at its first colon. Spaces around the name and the value are
// dropped, as curl does. The name and the value are checked as
// [Subscriber.Validate] checks them, and the error is a [*ValidationError]
// for --header that never repeats the value, which is often a credential.
func ParseHeader(kv string) (name, value string, err error) {
	name, value, ok := strings.Cut(kv, ":")
	if !ok {
		return "", "", invalid("--header", `must be "Name: value", with a colon after the name`)
	}
	name = strings.TrimSpace(name)
	value = strings.Trim(value, " \t")
	if err := validateHeader(name, value); err != nil {
		return "", "", err
	}
	return name, value, nil
}

// validateHeader checks one configured header.
func validateHeader(name, value string) error {
	if name == "" {
		return invalid("--header", `must be "Name: value", got an empty name`)
	}
	if !isToken(name) {
		return invalid("--header", fmt.Sprintf("a header name must be an HTTP token (letters, digits and !#$%%&'*+-.^_`|~), got %q", name))
	}
	lower := strings.ToLower(name)
	if reservedHeaders[lower] || strings.HasPrefix(lower, reservedHeaderPrefix) {
		return invalid("--header", fmt.Sprintf("%q is set by relay or by HTTP itself and cannot be configured (webhook-*, content-type, content-length, host and hop-by-hop headers are reserved)", name))
	}
	for i := 0; i < len(value); i++ {
		if c := value[i]; (c < 0x20 && c != '\t') || c == 0x7f {
			return invalid("--header", fmt.Sprintf("the value of %q must not contain CR, LF or other control characters", name))
		}
	}
	return nil
}

// isToken reports whether s is an HTTP token (RFC 9110, section 5.6.2), the
// syntax of a header name.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}
