package testutil

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
)

// TokenServer is an OAuth2 token endpoint for tests: it grants the client
// credentials grant to one client, counts the grants, and hands out
// tokens tok-1, tok-2… in turn.
type TokenServer struct {
	*httptest.Server
	clientID, secret string

	mu sync.Mutex
	// grants counts the tokens handed out, requests every request.
	grants, requests int
	// failWith, when not zero, is the status every request is answered
	// with, and nothing is granted.
	failWith int
	// expiresIn is the tokens' lifetime in seconds (0: none given).
	expiresIn int
	// forms are the grants' form values, in order.
	forms []map[string]string
	// formOnly refuses credentials sent as HTTP Basic authentication.
	formOnly bool
}

// StartTokenServer starts a token endpoint for the client id and secret,
// closed when the test ends. Its URL (+"/token") is the token URL.
func StartTokenServer(t testing.TB, clientID, secret string) *TokenServer {
	t.Helper()
	s := &TokenServer{clientID: clientID, secret: secret, expiresIn: 3600}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

// TokenURL is the endpoint's URL.
func (s *TokenServer) TokenURL() string { return s.URL + "/token" }

// Grants is how many tokens were handed out.
func (s *TokenServer) Grants() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.grants
}

// Requests is how many requests the endpoint answered, grants or not.
func (s *TokenServer) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests
}

// Forms are the grants' form values (grant_type, scope, audience…), in
// order.
func (s *TokenServer) Forms() []map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]map[string]string(nil), s.forms...)
}

// FailWith makes every request from now on fail with status (0: grant
// again).
func (s *TokenServer) FailWith(status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failWith = status
}

// FormOnly makes the endpoint refuse client credentials sent as HTTP Basic
// authentication (invalid_client), as some do: they must come in the form.
func (s *TokenServer) FormOnly() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.formOnly = true
}

// ExpiresIn sets the lifetime, in seconds, of the tokens handed out from
// now on.
func (s *TokenServer) ExpiresIn(seconds int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expiresIn = seconds
}

func (s *TokenServer) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests++
	if s.failWith != 0 {
		http.Error(w, "token endpoint down", s.failWith)
		return
	}
	if r.Method != http.MethodPost || r.ParseForm() != nil || r.PostForm.Get("grant_type") != "client_credentials" {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"error":"unsupported_grant_type"}`))
		return
	}
	id, secret, basic := r.BasicAuth()
	if !basic {
		id, secret = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
	}
	if basic && s.formOnly {
		id = ""
	}
	if id != s.clientID || secret != s.secret {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"error":"invalid_client","error_description":"unknown client or wrong secret"}`))
		return
	}
	form := map[string]string{}
	for k := range r.PostForm {
		form[k] = r.PostForm.Get(k)
	}
	s.forms = append(s.forms, form)
	s.grants++
	body := map[string]any{"access_token": "tok-" + strconv.Itoa(s.grants), "token_type": "Bearer"}
	if s.expiresIn > 0 {
		body["expires_in"] = s.expiresIn
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(body)
}
