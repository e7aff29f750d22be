package deliver

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A request with Inspect gets the reply's headers and learns whether its
// body went on past the kilobyte kept, over both paths (relay's own
// HTTP/1.1 and net/http's, which a large request takes); a delivery,
// without it, keeps neither.
func TestSendInspectKeepsTheReplyHeaders(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Receiver", "inspect")
		w.WriteHeader(http.StatusAccepted)
		if r.URL.Path == "/long" {
			_, _ = w.Write([]byte(strings.Repeat("x", maxOutcomeBody+1)))
			return
		}
		_, _ = w.Write([]byte(strings.Repeat("y", maxOutcomeBody)))
	}))
	t.Cleanup(srv.Close)
	c := newTestClient(t)
	for _, body := range [][]byte{[]byte(`{}`), make([]byte, maxHTTP1Body+1)} {
		out := c.Send(context.Background(), Request{URL: srv.URL + "/long", ID: "evt_1", Body: body, Inspect: true})
		require.Equal(t, Delivered, out.Class, out.Err)
		require.Equal(t, "inspect", out.Header.Get("X-Receiver"))
		require.Len(t, out.Body, maxOutcomeBody)
		require.True(t, out.BodyCut)

		out = c.Send(context.Background(), Request{URL: srv.URL + "/exact", ID: "evt_1", Body: body, Inspect: true})
		require.Len(t, out.Body, maxOutcomeBody)
		require.False(t, out.BodyCut, "a body of exactly what is kept is whole")

		out = c.Send(context.Background(), Request{URL: srv.URL + "/long", ID: "evt_1", Body: body})
		require.Nil(t, out.Header)
		require.False(t, out.BodyCut)
		require.Len(t, out.Body, maxOutcomeBody)
	}
}
