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
	b := setup(t, Config{MaxConcurrent: 1, RequestTimeout: 2 * time.Second})
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
	// The slow request holds the one slot (seen in the server, as a
	// request of the test's own would take it too), then gives it back,
	// and the next request is served.
	srv := b.srv.Config.Handler.(*Server)
	rtest.Eventually(t, func() bool { return len(srv.slots) == 1 }, "the slow request never held the slot")
	rtest.Eventually(t, func() bool { return len(srv.slots) == 0 }, "the slow request held its slot past its deadline")
	if code := status(); code != http.StatusOK {
		t.Errorf("the next request: %d, want 200", code)
	}
	// Its connection was closed, not left open: reading it ends.
	if _, err := io.ReadAll(conn); err != nil {
		t.Fatal(err)
	}
}
