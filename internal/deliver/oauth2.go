package deliver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"
)

// OAuth2 is a receiver's OAuth 2.0 client-credentials grant (RFC 6749,
// section 4.4): relay asks TokenURL for an access token as ClientID and
// sends it with every request as "Authorization: Bearer …". It is stored with
// the subscriber, so that every relay of a cluster uses it.
type OAuth2 struct {
	// TokenURL is the authorization server's token endpoint: an http or
	// https URL, dialled under the same rule as a webhook URL (a private
	// address only with --allow-private-targets).
	TokenURL string `json:"token_url"`
	// ClientID and ClientSecret are relay's credentials at the token
	// endpoint, sent as HTTP Basic authentication (or in the form, for an
	// endpoint that refuses Basic).
	ClientID     string `json:"client_id"`
	ClientSecret string `json:"client_secret"`
	// Scopes are asked for in the grant's scope parameter, space separated;
	// none asks for the client's default.
	Scopes []string `json:"scopes,omitempty"`
	// Audience, when set, is sent as the grant's audience parameter, which
	// Auth0, Okta and others read to choose the API the token is for.
	Audience string `json:"audience,omitempty"`
}

// tokenEarly is how long before its expiry a cached token is replaced:
// enough for a request that takes it to reach the receiver while it is
// still valid (oauth2's own margin); half its life for a token that lives
// less than twice that, so that it is still reused.
const tokenEarly = 10 * time.Second

// tokenFailureFor is how long a failed fetch answers the attempts that
// waited for it: they share its error rather than each asking the token
// endpoint in turn.
const tokenFailureFor = time.Second

// tokens caches access tokens, one per grant (endpoint, client, secret,
// scopes and audience): the subscribers sharing a grant share its token, and
// a subscriber whose grant changes gets a new one. Attempts that find no
// valid token wait while one of them fetches it, so that a burst of
// deliveries costs one grant.
type tokens struct {
	// client sends the grants, through the Client's Doer: the token
	// endpoint is dialled under the webhook's SSRF rule.
	client *http.Client
	now    func() time.Time

	mu      sync.Mutex
	entries map[tokenKey]*tokenEntry
	// byGrant finds the entry of a subscriber's grant by its pointer (the
	// subscriber view's, the same for every delivery until the subscriber
	// changes), without hashing its fields for each delivery.
	byGrant map[*OAuth2]*tokenEntry
	// swept is the size of entries after its last sweep, sweptAt its time;
	// the next comes when it has doubled, or after cacheSweepEvery.
	swept   int
	sweptAt time.Time
}

// cacheSweepEvery is how often the caches of a Client (tokens, TLS
// transports) drop what no delivery used lately, at the latest.
const cacheSweepEvery = 10 * time.Minute

// tokenIdle is how long a grant's entry, its token and client secret, is
// kept unused: a grant a subscriber no longer has goes with it.
const tokenIdle = time.Hour

// tokenKey identifies a grant.
type tokenKey struct {
	url, id, secret, scopes, audience string
}

// tokenEntry is one grant's token, fetched by one attempt at a time.
type tokenEntry struct {
	// turn is held (a token in it) by the attempt that reads or fetches
	// the token; the others wait for it, or for the end of their own
	// attempt.
	turn   chan struct{}
	config clientcredentials.Config
	token  *oauth2.Token
	// lastUsed is when a delivery last asked for it (under tokens.mu).
	lastUsed time.Time
	// fetched is when token was fetched.
	fetched time.Time
	// err and errAt are the last failed fetch, shared with those that
	// waited for it.
	err   error
	errAt time.Time
}

func newTokens(doer Doer, now func() time.Time) *tokens {
	return &tokens{
		client: &http.Client{
			Transport: doerTransport{doer},
			// A token endpoint that redirects is answered as it is: a
			// redirect to a private address would escape the SSRF rule's
			// check of the URL given.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		now:     now,
		entries: make(map[tokenKey]*tokenEntry),
		byGrant: make(map[*OAuth2]*tokenEntry),
	}
}

// doerTransport adapts a Doer to an http.RoundTripper for the oauth2
// package's client.
type doerTransport struct{ doer Doer }

func (t doerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.doer.Do(req)
	var uerr *url.Error
	if errors.As(err, &uerr) {
		// http.Client wraps a transport's error in a *url.Error of its own.
		err = uerr.Err
	}
	return resp, err
}

func (g *OAuth2) key() tokenKey {
	return tokenKey{url: g.TokenURL, id: g.ClientID, secret: g.ClientSecret, scopes: strings.Join(g.Scopes, " "), audience: g.Audience}
}

// entry returns the grant's cache entry, made on first use.
func (t *tokens) entry(g *OAuth2) *tokenEntry {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if now.Sub(t.sweptAt) > cacheSweepEvery || len(t.entries) >= 2*t.swept+64 {
		t.sweepLocked(now)
	}
	if e, ok := t.byGrant[g]; ok {
		e.lastUsed = now
		return e
	}
	key := g.key()
	if e, ok := t.entries[key]; ok {
		t.byGrant[g] = e
		e.lastUsed = now
		return e
	}
	e := &tokenEntry{turn: make(chan struct{}, 1), lastUsed: now, config: clientcredentials.Config{
		ClientID: g.ClientID, ClientSecret: g.ClientSecret, TokenURL: g.TokenURL, Scopes: g.Scopes,
	}}
	if g.Audience != "" {
		e.config.EndpointParams = url.Values{"audience": {g.Audience}}
	}
	t.entries[key] = e
	t.byGrant[g] = e
	return e
}

// sweepLocked drops the entries no delivery asked for in tokenIdle: grants
// no subscriber has any more, their secret and token with them. The
// pointers are forgotten too, and found again on their next delivery.
func (t *tokens) sweepLocked(now time.Time) {
	for key, e := range t.entries {
		if now.Sub(e.lastUsed) > tokenIdle {
			delete(t.entries, key)
		}
	}
	clear(t.byGrant)
	t.swept, t.sweptAt = len(t.entries), now
}

// validAt reports whether the entry's token may still be sent at now. The
// caller has the entry's turn.
func (e *tokenEntry) validAt(now time.Time) bool {
	if e.token == nil || e.token.AccessToken == "" {
		return false
	}
	if e.token.Expiry.IsZero() {
		return true
	}
	early := min(tokenEarly, e.token.Expiry.Sub(e.fetched)/2)
	return now.Add(early).Before(e.token.Expiry)
}

// token returns the grant's access token, fetched under ctx (the attempt's)
// when none is cached or the cached one is about to expire.
func (t *tokens) token(ctx context.Context, g *OAuth2) (*oauth2.Token, error) {
	e := t.entry(g)
	select {
	case e.turn <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: waiting for the token being fetched: %w", ErrToken, ctx.Err())
	}
	defer func() { <-e.turn }()
	now := t.now()
	if e.validAt(now) {
		return e.token, nil
	}
	if e.err != nil && now.Sub(e.errAt) < tokenFailureFor {
		return nil, e.err
	}
	tok, err := e.config.Token(context.WithValue(ctx, oauth2.HTTPClient, t.client))
	if err == nil && tok.AccessToken == "" {
		err = errors.New("the token endpoint answered without an access_token")
	}
	if err != nil {
		err = tokenError(err)
		e.token = nil
		if !errors.Is(ctx.Err(), context.Canceled) {
			// The endpoint's failure, or its silence past the attempt's
			// timeout, not the relay stopping: those that waited share it
			// rather than each waiting as long in turn.
			e.err, e.errAt = err, t.now()
		}
		return nil, err
	}
	e.token, e.err, e.fetched = tok, nil, now
	return tok, nil
}

// drop forgets tok, which the receiver refused (401): the next attempt
// fetches another. A newer token fetched meanwhile stays. It gives up when
// ctx ends first (another attempt fetching a token for as long): that
// attempt's token replaces tok anyway.
func (t *tokens) drop(ctx context.Context, g *OAuth2, tok *oauth2.Token) {
	e := t.entry(g)
	select {
	case e.turn <- struct{}{}:
	case <-ctx.Done():
		return
	}
	defer func() { <-e.turn }()
	if e.token == tok {
		e.token = nil
	}
}

// tokenError is a failed fetch as an attempt's error: ErrToken, and what the
// endpoint said (its OAuth2 error code and description, or its status and
// the start of its body), never the credentials.
func tokenError(err error) error {
	var rerr *oauth2.RetrieveError
	if errors.As(err, &rerr) {
		if rerr.ErrorCode != "" {
			msg := rerr.ErrorCode
			if rerr.ErrorDescription != "" {
				msg += ": " + rerr.ErrorDescription
			}
			return fmt.Errorf("%w: the token endpoint refused the grant: %s", ErrToken, truncate(msg, maxOutcomeBody/2))
		}
		status := "no response"
		if rerr.Response != nil {
			status = statusString(rerr.Response.StatusCode)
		}
		return fmt.Errorf("%w: the token endpoint answered %s: %s", ErrToken, status, truncate(string(rerr.Body), maxOutcomeBody/2))
	}
	var uerr *url.Error
	if errors.As(err, &uerr) {
		// Its URL may carry a credential in its query string.
		err = uerr.Err
	}
	return fmt.Errorf("%w: %w", ErrToken, err)
}

// truncate cuts s to at most n bytes.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
