// Package apitest checks requests to the HTTP API and their answers
// against its OpenAPI document with a validator that is not relay's
// (kin-openapi), for the tests of every package that asks the API.
package apitest

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
)

func init() {
	openapi3filter.RegisterBodyDecoder("application/problem+json", openapi3filter.JSONBodyDecoder)
}

// Checker holds a loaded, valid OpenAPI document.
type Checker struct {
	router routers.Router
}

// New loads and validates doc, failing t when it is not a valid OpenAPI
// document.
func New(t testing.TB, doc []byte) *Checker {
	t.Helper()
	loader := openapi3.NewLoader()
	d, err := loader.LoadFromData(doc)
	if err != nil {
		t.Fatalf("apitest: the OpenAPI document: %v", err)
	}
	if err := d.Validate(loader.Context); err != nil {
		t.Fatalf("apitest: the OpenAPI document is not valid: %v", err)
	}
	router, err := legacy.NewRouter(d)
	if err != nil {
		t.Fatalf("apitest: %v", err)
	}
	return &Checker{router: router}
}

// Check fails t unless the answer (code, header, body) to req matches the
// document, and unless req does, but for an answer 400 or 413 (a request
// the document refuses too). req's body must be readable (a fresh copy of
// what was sent). An answer 404 to a path the document lacks is taken.
func (c *Checker) Check(t testing.TB, req *http.Request, code int, header http.Header, body []byte) {
	t.Helper()
	route, params, err := c.router.FindRoute(req)
	if err != nil {
		if code != http.StatusNotFound {
			t.Errorf("%s %s: not in the OpenAPI document: %v", req.Method, req.URL.Path, err)
		}
		return
	}
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}}
	if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil && code != http.StatusBadRequest &&
		code != http.StatusRequestEntityTooLarge {
		t.Errorf("%s %s: the request does not match the OpenAPI document: %v", req.Method, req.URL.Path, err)
	}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: code, Header: header,
		Body: io.NopCloser(bytes.NewReader(body)), Options: &openapi3filter.Options{IncludeResponseStatus: true}}
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		t.Errorf("%s %s: the answer %d does not match the OpenAPI document: %v\n%s", req.Method, req.URL.Path, code, err, body)
	}
}
