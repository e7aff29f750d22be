package testutil

import (
	"context"
	"net/http"
	"time"
)

// HTTPStatus is the status code of a GET of url, 0 when it cannot be had
// within 2 s: what a test polls a relay's /readyz with.
func HTTPStatus(url string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// Tail is the last n bytes of s: the end of a log a failed test shows.
func Tail(s string, n int) string {
	if len(s) > n {
		s = s[len(s)-n:]
	}
	return s
}
