package deliver

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/testutil"
)

// bearerReceiver answers 204 to a request carrying one of the accepted
// bearer tokens and 401 to any other, and records the tokens it saw.
type bearerReceiver struct {
	*httptest.Server
	mu       sync.Mutex
	accepted map[string]bool
	seen     []string
}

func startBearerReceiver(t *testing.T, accepted ...string) *bearerReceiver {
	t.Helper()
	r := &bearerReceiver{accepted: map[string]bool{}}
	for _, tok := range accepted {
		r.accepted[tok] = true
	}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		tok, _ := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer ")
		r.mu.Lock()
		r.seen = append(r.seen, tok)
		ok := r.accepted[tok]
		r.mu.Unlock()
		if !ok {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *bearerReceiver) tokens() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.seen...)
}

// clockedClient is a client whose clock the test moves (unix nanoseconds).
func clockedClient(t *testing.T) (*Client, *atomic.Int64) {
	t.Helper()
	now := new(atomic.Int64)
	now.Store(time.Now().UnixNano())
	c, err := NewClient(WithAllowPrivate(true), WithClock(func() time.Time { return time.Unix(0, now.Load()) }))
	require.NoError(t, err)
	return c, now
}

func grantOf(ts *testutil.TokenServer) *OAuth2 {
	return &OAuth2{TokenURL: ts.TokenURL(), ClientID: "relay", ClientSecret: "s3cret", Scopes: []string{"webhooks:write", "events"}, Audience: "https://api.example.com"}
}

// TestOAuth2FiftyDeliveriesOneGrant: fifty deliveries at once, sixteen at a
// time, to a receiver that checks the bearer token cost one grant; the
// grant asked for the scopes and the audience.
func TestOAuth2FiftyDeliveriesOneGrant(t *testing.T) {
	t.Parallel()
	ts := testutil.StartTokenServer(t, "relay", "s3cret")
	rcv := startBearerReceiver(t, "tok-1")
	c, err := NewClient(WithAllowPrivate(true))
	require.NoError(t, err)
	g := grantOf(ts)
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	var delivered atomic.Int32
	for i := range 50 {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			out := c.Send(t.Context(), Request{URL: rcv.URL, ID: "ev-" + string(rune('a'+i%26)), Body: []byte(`{}`), OAuth2: g})
			if out.Class == Delivered {
				delivered.Add(1)
			}
		})
	}
	wg.Wait()
	require.EqualValues(t, 50, delivered.Load())
	require.LessOrEqual(t, ts.Grants(), 2)
	require.Equal(t, 1, ts.Grants())
	form := ts.Forms()[0]
	require.Equal(t, "client_credentials", form["grant_type"])
	require.Equal(t, "webhooks:write events", form["scope"])
	require.Equal(t, "https://api.example.com", form["audience"])
}

// TestOAuth2UnauthorizedDropsTheToken: a 401 is an attempt to retry, not a
// refusal, and the next attempt carries a new token.
func TestOAuth2UnauthorizedDropsTheToken(t *testing.T) {
	t.Parallel()
	ts := testutil.StartTokenServer(t, "relay", "s3cret")
	rcv := startBearerReceiver(t, "tok-2") // tok-1 is revoked
	c, err := NewClient(WithAllowPrivate(true))
	require.NoError(t, err)
	g := grantOf(ts)
	first := c.Send(t.Context(), Request{URL: rcv.URL, ID: "ev-1", Body: []byte(`{}`), OAuth2: g})
	require.Equal(t, Retryable, first.Class, "%v", first.Err)
	require.Equal(t, http.StatusUnauthorized, first.Status)
	second := c.Send(t.Context(), Request{URL: rcv.URL, ID: "ev-1", Body: []byte(`{}`), OAuth2: g})
	require.Equal(t, Delivered, second.Class, "%v", second.Err)
	require.Equal(t, []string{"tok-1", "tok-2"}, rcv.tokens())
	require.Equal(t, 2, ts.Grants())
}

// TestOAuth2TokenReplacedBeforeItExpires: a token within seconds of its
// expiry is not sent; another is fetched.
func TestOAuth2TokenReplacedBeforeItExpires(t *testing.T) {
	t.Parallel()
	ts := testutil.StartTokenServer(t, "relay", "s3cret")
	ts.ExpiresIn(60)
	rcv := startBearerReceiver(t, "tok-1", "tok-2")
	c, now := clockedClient(t)
	g := grantOf(ts)
	send := func() {
		out := c.Send(t.Context(), Request{URL: rcv.URL, ID: "ev-1", Body: []byte(`{}`), OAuth2: g})
		require.Equal(t, Delivered, out.Class, "%v", out.Err)
	}
	send()
	send()
	require.Equal(t, 1, ts.Grants(), "a valid token is reused")
	now.Add(int64(55 * time.Second)) // 5 s before it expires: too close
	send()
	require.Equal(t, 2, ts.Grants())
	require.Equal(t, []string{"tok-1", "tok-1", "tok-2"}, rcv.tokens())
}

// TestOAuth2TokenEndpointFailureIsTheAttempts: a token endpoint that fails
// makes the attempt a failure to retry, with the endpoint's answer as its
// error and no request to the receiver; a refused client says why, without
// the secret.
func TestOAuth2TokenEndpointFailureIsTheAttempts(t *testing.T) {
	t.Parallel()
	ts := testutil.StartTokenServer(t, "relay", "s3cret")
	rcv := startBearerReceiver(t, "tok-1")
	c, err := NewClient(WithAllowPrivate(true))
	require.NoError(t, err)
	ts.FailWith(http.StatusServiceUnavailable)
	out := c.Send(t.Context(), Request{URL: rcv.URL, ID: "ev-1", Body: []byte(`{}`), OAuth2: grantOf(ts)})
	require.Equal(t, Retryable, out.Class)
	require.ErrorIs(t, out.Err, ErrToken)
	require.Contains(t, out.Err.Error(), "503")
	require.Empty(t, rcv.tokens())

	ts.FailWith(0)
	wrong := grantOf(ts)
	wrong.ClientSecret = "not-the-secret"
	out = c.Send(t.Context(), Request{URL: rcv.URL, ID: "ev-2", Body: []byte(`{}`), OAuth2: wrong})
	require.Equal(t, Retryable, out.Class)
	require.ErrorIs(t, out.Err, ErrToken)
	require.Contains(t, out.Err.Error(), "invalid_client")
	require.NotContains(t, out.Err.Error(), "not-the-secret")
	require.Empty(t, rcv.tokens())

	// The endpoint back, the next attempt has its token: a failure is not
	// kept beyond the moment.
	time.Sleep(tokenFailureFor)
	out = c.Send(t.Context(), Request{URL: rcv.URL, ID: "ev-1", Body: []byte(`{}`), OAuth2: grantOf(ts)})
	require.Equal(t, Delivered, out.Class, "%v", out.Err)
}

// TestOAuth2TokenURLUnderTheSSRFRule: without --allow-private-targets, a
// token URL on a loopback address is refused as a webhook URL would be,
// and nothing reaches it.
func TestOAuth2TokenURLUnderTheSSRFRule(t *testing.T) {
	t.Parallel()
	ts := testutil.StartTokenServer(t, "relay", "s3cret")
	c, err := NewClient()
	require.NoError(t, err)
	out := c.Send(t.Context(), Request{URL: "https://example.com/hook", ID: "ev-1", Body: []byte(`{}`), OAuth2: grantOf(ts)})
	require.Equal(t, Refused, out.Class, "%v", out.Err)
	require.ErrorIs(t, out.Err, ErrRefused)
	require.ErrorIs(t, out.Err, ErrToken)
	require.Zero(t, ts.Grants())
}

// TestOAuth2WaitEndsWithTheAttempt: an attempt waiting for a token another
// attempt is fetching from a hanging endpoint ends with its own timeout.
func TestOAuth2WaitEndsWithTheAttempt(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(release); hang.Close() })
	c, err := NewClient(WithAllowPrivate(true))
	require.NoError(t, err)
	g := &OAuth2{TokenURL: hang.URL, ClientID: "relay", ClientSecret: "s3cret"}
	done := make(chan Outcome, 2)
	for range 2 {
		go func() {
			done <- c.Send(context.Background(), Request{URL: "http://127.0.0.1:1/", ID: "ev-1", OAuth2: g, Timeout: 200 * time.Millisecond})
		}()
	}
	for range 2 {
		select {
		case out := <-done:
			require.Equal(t, Retryable, out.Class)
			require.True(t, errors.Is(out.Err, ErrToken), "%v", out.Err)
		case <-time.After(30 * time.Second):
			t.Fatal("an attempt outlived its timeout waiting for a token")
		}
	}
}

// TestOAuth2CredentialsInTheFormWhenBasicIsRefused: an endpoint that
// refuses HTTP Basic gets the credentials in the form, and the next grant
// goes that way at once.
func TestOAuth2CredentialsInTheFormWhenBasicIsRefused(t *testing.T) {
	t.Parallel()
	ts := testutil.StartTokenServer(t, "relay", "s3cret")
	ts.FormOnly()
	ts.ExpiresIn(60)
	rcv := startBearerReceiver(t, "tok-1", "tok-2")
	c, now := clockedClient(t)
	g := grantOf(ts)
	for range 2 {
		out := c.Send(t.Context(), Request{URL: rcv.URL, ID: "ev-1", Body: []byte(`{}`), OAuth2: g})
		require.Equal(t, Delivered, out.Class, "%v", out.Err)
		now.Add(int64(time.Minute)) // the token expires: the next attempt asks again
	}
	require.Equal(t, 2, ts.Grants())
	require.Equal(t, 3, ts.Requests(), "Basic once, then the form each time")
	for _, form := range ts.Forms() {
		require.Equal(t, "relay", form["client_id"])
	}
}

// TestOAuth2RedirectNotFollowed: a token endpoint that redirects is
// answered as it is, a failed grant, and the place it points to is never
// asked: a redirect must not take relay where the SSRF rule would not.
func TestOAuth2RedirectNotFollowed(t *testing.T) {
	t.Parallel()
	ts := testutil.StartTokenServer(t, "relay", "s3cret")
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, ts.TokenURL(), http.StatusTemporaryRedirect)
	}))
	t.Cleanup(redirect.Close)
	rcv := startBearerReceiver(t, "tok-1")
	c, err := NewClient(WithAllowPrivate(true))
	require.NoError(t, err)
	g := grantOf(ts)
	g.TokenURL = redirect.URL
	out := c.Send(t.Context(), Request{URL: rcv.URL, ID: "ev-1", Body: []byte(`{}`), OAuth2: g})
	require.Equal(t, Retryable, out.Class)
	require.ErrorIs(t, out.Err, ErrToken)
	require.Contains(t, out.Err.Error(), "307")
	require.Zero(t, ts.Grants())
	require.Empty(t, rcv.tokens())
}

// TestOAuth2ShortLivedTokenReused: a token that lives less than twice the
// early margin is still reused for the first half of its life, not
// fetched again for every delivery.
func TestOAuth2ShortLivedTokenReused(t *testing.T) {
	t.Parallel()
	ts := testutil.StartTokenServer(t, "relay", "s3cret")
	ts.ExpiresIn(4)
	rcv := startBearerReceiver(t, "tok-1", "tok-2")
	c, now := clockedClient(t)
	g := grantOf(ts)
	for range 3 {
		out := c.Send(t.Context(), Request{URL: rcv.URL, ID: "ev-1", Body: []byte(`{}`), OAuth2: g})
		require.Equal(t, Delivered, out.Class, "%v", out.Err)
	}
	require.Equal(t, 1, ts.Grants())
	now.Add(int64(3 * time.Second)) // past half its life
	out := c.Send(t.Context(), Request{URL: rcv.URL, ID: "ev-1", Body: []byte(`{}`), OAuth2: g})
	require.Equal(t, Delivered, out.Class, "%v", out.Err)
	require.Equal(t, 2, ts.Grants())
}
