package main

import (
	"slices"
	"strings"

	"github.com/spf13/pflag"

	"github.com/relay-dev/relay/internal/deliver"
)

// oauth2Flags are the flags of a subscriber's OAuth2 client-credentials
// grant: relay fetches an access token from the token endpoint and sends it
// with every request as "Authorization: Bearer …".
type oauth2Flags struct {
	tokenURL string
	clientID string
	secret   secretFlags
	scopes   []string
	audience string
}

// oauth2FlagNames are the flags of a grant, --oauth2-token-url first.
var oauth2FlagNames = []string{"oauth2-token-url", "oauth2-client-id", "oauth2-client-secret", "oauth2-client-secret-file",
	"oauth2-client-secret-env", "oauth2-scopes", "oauth2-audience"}

func (f *oauth2Flags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.tokenURL, "oauth2-token-url", "", "OAuth2 token endpoint: every request carries an access token of the client-credentials grant ('' removes the grant)")
	fs.StringVar(&f.clientID, "oauth2-client-id", "", "OAuth2 client id, with --oauth2-token-url")
	f.secret.register(fs, "oauth2-client-secret", "the OAuth2 client secret", "OAuth2 client secret, with --oauth2-token-url")
	fs.StringSliceVar(&f.scopes, "oauth2-scopes", nil, "OAuth2 scopes to ask for, comma separated")
	fs.StringVar(&f.audience, "oauth2-audience", "", "OAuth2 audience parameter of the grant (Auth0, Okta and others read it)")
}

// change checks the grant's flags given on fs and returns what they change
// of a subscriber's grant (nil: none given): the grant it has, or a new
// one, with the fields given set; nil when an empty --oauth2-token-url removes
// it. The secret's file or variable is read here, once.
func (f *oauth2Flags) change(fs *pflag.FlagSet) (func(*deliver.OAuth2) *deliver.OAuth2, error) {
	var given []string
	for _, name := range oauth2FlagNames {
		if fs.Changed(name) {
			given = append(given, name)
		}
	}
	if len(given) == 0 {
		return nil, nil
	}
	if fs.Changed("oauth2-token-url") && f.tokenURL == "" {
		if len(given) > 1 {
			return nil, usagef("--oauth2-token-url '': removes the grant; give no other --oauth2 flag with it (--%s given)", given[1])
		}
		return func(*deliver.OAuth2) *deliver.OAuth2 { return nil }, nil
	}
	secrets, secretFlag, err := f.secret.read(fs)
	if err != nil {
		return nil, err
	}
	if len(secrets) > 1 {
		return nil, usagef("%s: give one client secret, got %d", secretFlag, len(secrets))
	}
	var scopes []string
	for _, s := range f.scopes {
		for part := range strings.SplitSeq(s, ",") {
			if part = strings.TrimSpace(part); part != "" {
				scopes = append(scopes, part)
			}
		}
	}
	return func(cur *deliver.OAuth2) *deliver.OAuth2 {
		g := &deliver.OAuth2{}
		if cur != nil {
			c := *cur
			c.Scopes = slices.Clone(cur.Scopes)
			g = &c
		}
		if fs.Changed("oauth2-token-url") {
			g.TokenURL = f.tokenURL
		}
		if fs.Changed("oauth2-client-id") {
			g.ClientID = f.clientID
		}
		if len(secrets) == 1 {
			g.ClientSecret = secrets[0]
		}
		if fs.Changed("oauth2-scopes") {
			g.Scopes = slices.Clone(scopes)
		}
		if fs.Changed("oauth2-audience") {
			g.Audience = f.audience
		}
		return g
	}, nil
}

// oauth2String is a redacted grant as `relay sub get` prints it.
func oauth2String(g *deliver.OAuth2) string {
	out := "token URL " + g.TokenURL + ", client " + g.ClientID + ", secret " + g.ClientSecret
	if len(g.Scopes) > 0 {
		out += ", scopes " + strings.Join(g.Scopes, " ")
	}
	if g.Audience != "" {
		out += ", audience " + g.Audience
	}
	return out
}
