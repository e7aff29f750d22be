package deliver

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestIdleConnsCoverWhatIsInFlight: a round of requests to one host, all in
// flight at once, followed by a second round reuses every connection of the
// first when the pool is sized to what is in flight, and opens new ones
// when it is smaller, which is what left thousands of sockets in TIME_WAIT
// with many subscribers behind one host.
func TestIdleConnsCoverWhatIsInFlight(t *testing.T) {
	t.Parallel()
	const inFlight = 150
	for _, tt := range []struct {
		name     string
		pool     int
		reuseAll bool
	}{
		{"pool sized to what is in flight", inFlight, true},
		{"pool smaller", 16, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var opened atomic.Int64
			var mu sync.Mutex
			arrived, release := 0, make(chan struct{})
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				mu.Lock()
				wait := release
				if arrived++; arrived%inFlight == 0 {
					// All of this round are in flight: let them go.
					close(release)
					release = make(chan struct{})
				}
				mu.Unlock()
				select {
				case <-wait:
				case <-time.After(10 * time.Second):
				}
				w.WriteHeader(http.StatusNoContent)
			}))
			srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
				if s == http.StateNew {
					opened.Add(1)
				}
			}
			srv.Start()
			t.Cleanup(srv.Close)
			c := newTestClient(t, WithIdleConns(tt.pool))
			round := func() {
				var wg sync.WaitGroup
				for range inFlight {
					wg.Go(func() {
						out := c.Send(context.Background(), Request{URL: srv.URL, ID: "evt", Body: []byte("{}"), Timeout: 20 * time.Second})
						if out.Class != Delivered {
							t.Errorf("outcome %v", out)
						}
					})
				}
				wg.Wait()
			}
			round()
			first := opened.Load()
			round()
			again := opened.Load() - first
			if tt.reuseAll && again != 0 {
				t.Fatalf("the second round opened %d connections, want 0 (the first opened %d)", again, first)
			}
			if !tt.reuseAll && again == 0 {
				t.Fatalf("the second round opened no connection with a pool of %d for %d in flight", tt.pool, inFlight)
			}
		})
	}
}
