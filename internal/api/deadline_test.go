package api

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/relay-dev/relay/internal/apikeys"
	rtest "github.com/relay-dev/relay/internal/testutil"
)

// A client that sends a request's body a byte at a time, and then nothing,
// holds its slot only until the request's deadline: then its read fails,
// the slot is free again, the next request is served rather than answered
// 503, and the slow request's connection is closed.
func TestSlowBodyGivesItsSlotBack(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{MaxConcurrent: 1, RequestTimeout: 3 * time.Second})
	key := b.key(t, "ops", apikeys.SubscribersWrite, apikeys.StatusRead)
	conn, err := net.Dial("tcp", strings.TrimPrefix(b.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("POST /v1/subscribers HTTP/1.1\r\nHost: relay\r\nAuthorization: Bearer " + key +
		"\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")); err != nil {
		t.Fatal(err)
	}
	status := func() int {
		req, err := http.NewRequest("GET", b.srv.URL+"/v1/status", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	// The slow request holds the one slot: seen as a 503.
	rtest.Eventually(t, func() bool { return status() == http.StatusServiceUnavailable }, "the slow request never held the slot")
	rtest.Eventually(t, func() bool { return status() == http.StatusOK }, "the slow request held its slot past its deadline")
	// Its connection was closed, not left open: reading it ends.
	if _, err := io.ReadAll(conn); err != nil {
		t.Fatal(err)
	}
}
