package subscribers

import (
	"fmt"
	"slices"
	"strings"

	"github.com/relay-dev/relay/internal/deliver"
	"github.com/relay-dev/relay/internal/secrets"
)

// Bounds of an OAuth2 grant's fields: far above any real client's, low
// enough that a stored subscriber stays small.
const (
	maxOAuth2Field  = 1024
	maxOAuth2Scopes = 64
)

// validateOAuth2 checks a subscriber's client-credentials grant, naming the
// `relay sub add` flag at fault and never quoting the client secret. A
// subscriber with a grant must not configure an Authorization header of its
// own: the token is that header.
//
// A client secret sealed with a key not given (sealed) cannot be judged:
// it was judged when it was sealed, and sealing makes it longer than the
// bound. A clear one that looks sealed is refused: it would be read as
// sealed with a key no relay has, and its subscriber held for good.
func validateOAuth2(g *deliver.OAuth2, headers map[string]string, sealed bool) error {
	if g == nil {
		return nil
	}
	if err := validateURLFlag("--oauth2-token-url", g.TokenURL); err != nil {
		return err
	}
	if g.ClientID == "" {
		return invalid("--oauth2-client-id", "is required with --oauth2-token-url")
	}
	if err := printableField("--oauth2-client-id", g.ClientID, true); err != nil {
		return err
	}
	if g.ClientSecret == "" {
		return invalid("--oauth2-client-secret", "is required with --oauth2-token-url (or --oauth2-client-secret-file, --oauth2-client-secret-env)")
	}
	if !sealed {
		if err := printableField("--oauth2-client-secret", g.ClientSecret, false); err != nil {
			return err
		}
		if secrets.IsSealed(g.ClientSecret) {
			return invalid("--oauth2-client-secret", "must not begin with "+secrets.SealedPrefix+", which marks a sealed value")
		}
	}
	if len(g.Scopes) > maxOAuth2Scopes {
		return invalid("--oauth2-scopes", fmt.Sprintf("at most %d scopes, got %d", maxOAuth2Scopes, len(g.Scopes)))
	}
	for _, scope := range g.Scopes {
		if !isScope(scope) {
			return invalid("--oauth2-scopes", fmt.Sprintf("a scope is printable ASCII without spaces, quotes or backslashes (RFC 6749, 3.3), got %s", quote(scope)))
		}
	}
	if err := printableField("--oauth2-audience", g.Audience, true); err != nil {
		return err
	}
	for name := range headers {
		if strings.EqualFold(name, "Authorization") {
			return invalid("--header", "Authorization is the OAuth2 access token of this subscriber; remove the header, or the grant with --oauth2-token-url ''")
		}
	}
	return nil
}

// printableField checks a grant's text field: at most maxOAuth2Field bytes
// of printable characters, quoted in the error only when show.
func printableField(flag, v string, show bool) error {
	if len(v) > maxOAuth2Field {
		return invalid(flag, fmt.Sprintf("must be at most %d bytes, got %d", maxOAuth2Field, len(v)))
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c == 0x7f {
			if show {
				return invalid(flag, fmt.Sprintf("must not contain control characters, got %s", quote(v)))
			}
			return invalid(flag, "must not contain control characters")
		}
	}
	return nil
}

// isScope reports whether s is an RFC 6749 scope-token: one or more of
// %x21 / %x23-5B / %x5D-7E.
func isScope(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x21 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// redactedOAuth2 is g safe to print: the client secret masked.
func redactedOAuth2(g *deliver.OAuth2) *deliver.OAuth2 {
	if g == nil {
		return nil
	}
	r := cloneOAuth2(g)
	r.TokenURL = RedactURL(g.TokenURL)
	r.ClientSecret = maskedValue
	return r
}

// cloneOAuth2 copies g, sharing nothing with it.
func cloneOAuth2(g *deliver.OAuth2) *deliver.OAuth2 {
	if g == nil {
		return nil
	}
	c := *g
	c.Scopes = slices.Clone(g.Scopes)
	return &c
}
