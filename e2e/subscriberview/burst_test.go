package subscriberview

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/internal/fanout"
	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

// testSecret is a valid whsec_ secret (32 bytes).
const testSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// TestSubscriberAddedAfterABurstGetsItsEvent: burstSize subscriber records
// (100,000 with -tags scale) are written straight to the bucket as fast as JetStream takes them, under
// one relay and under three; then a subscriber is added as `relay sub add`
// adds it, and an event published for it at once. It is delivered, by
// whichever relay fans it out, and every relay ends ready with a current
// view. Before the view caught up by itself and the fan-out held events
// back, a relay copied the event with the view it had, which lacked the new
// subscriber: its copy was lost for good.
//
// With -tags scale a run may take up to burstTimeout (10 minutes), as long
// as go test's default timeout: run it with -timeout 30m.
func TestSubscriberAddedAfterABurstGetsItsEvent(t *testing.T) {
	t.Parallel()
	bin := testutil.Build(t, "github.com/relay-dev/relay/cmd/relay")
	for _, relays := range []int{1, 3} {
		t.Run(fmt.Sprintf("%d relays", relays), func(t *testing.T) {
			t.Parallel()
			burst(t, bin, relays)
		})
	}
}

func burst(t *testing.T, bin string, relays int) {
	n := testutil.StartRelayNATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), burstTimeout)
	t.Cleanup(cancel)
	var got atomic.Int64
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { got.Add(1) }))
	t.Cleanup(rcv.Close)
	var metrics []string
	for i := range relays {
		metrics = append(metrics, startRelay(t, bin, n.URL, fmt.Sprintf("relay-%d", i)))
	}
	for _, addr := range metrics {
		testutil.Eventually(t, func() bool { return testutil.HTTPStatus(addr+"/readyz") == http.StatusOK }, "relay at %s not ready", addr)
	}

	size := burstSize
	start := time.Now()
	writeBurst(ctx, t, n.JS, size)
	written := time.Since(start)

	store, err := subscribers.Open(ctx, n.JS)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Put(ctx, subscribers.Subscriber{ID: "probe", URL: rcv.URL + "/probe", Secrets: []string{testSecret}, Events: []string{"probe.*"}}); err != nil {
		t.Fatal(err)
	}
	added := time.Now()
	if _, err := n.JS.Publish(ctx, fanout.SubjectPrefix+"probe.x", []byte(`{}`), jetstream.WithMsgID("probe-1")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(90 * time.Second)
	for got.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the event for the subscriber added after %d writes was not delivered in 90 s", size)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("%d relays: %d records written in %.1fs; the probe added then got its event %.1fs later",
		relays, size, written.Seconds(), time.Since(added).Seconds())
	for _, addr := range metrics {
		testutil.Eventually(t, func() bool { return testutil.HTTPStatus(addr+"/readyz") == http.StatusOK }, "relay at %s not ready after the burst", addr)
		// A view may still be folding the last of the burst: current soon.
		testutil.Eventually(t, func() bool {
			v, ok := testutil.SeriesValue(testutil.Scrape(t, addr), "relay_subscribers_view_behind")
			return ok && v == 0
		}, "relay at %s: its view of the subscribers is not current", addr)
		resyncs, _ := testutil.SeriesValue(testutil.Scrape(t, addr), "relay_subscribers_view_resyncs_total")
		t.Logf("relay at %s: %v resyncs", addr, resyncs)
	}
}

// writeBurst writes size subscriber records straight to the bucket's
// subjects with async publishes, as fast as JetStream takes them, and
// returns once every one is stored.
func writeBurst(ctx context.Context, t *testing.T, js jetstream.JetStream, size int) {
	t.Helper()
	for i := range size {
		id := "bulk" + strconv.Itoa(i)
		data, err := json.Marshal(subscribers.Subscriber{ID: id, URL: "https://hooks.example.com/" + id,
			Secrets: []string{testSecret}, Events: []string{"bulk" + strconv.Itoa(i) + ".*"}})
		if err != nil {
			t.Fatal(err)
		}
		for {
			_, err := js.PublishAsync("$KV."+streams.SubscribersBucket+"."+id, data)
			if err == nil {
				break
			}
			select {
			case <-js.PublishAsyncComplete():
			case <-ctx.Done():
				t.Fatalf("writing the burst: %v", err)
			}
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		t.Fatal("the burst was not stored")
	}
}

// startRelay starts the built relay against url, serving its metrics on a
// free port, and returns their base URL. It is stopped when the test ends.
func startRelay(t *testing.T, bin, url, name string) string {
	t.Helper()
	addr := testutil.FreeAddr(t)
	log, err := os.CreateTemp(t.TempDir(), name+"-*.log")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "run", "--nats", url, "--metrics", addr, "--lanes", "4", "--allow-private-targets")
	cmd.Stdout, cmd.Stderr = log, log
	p := testutil.StartProcess(t, cmd)
	t.Cleanup(func() {
		if err := p.Stop(syscall.SIGTERM, 30*time.Second); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if t.Failed() {
			out, _ := os.ReadFile(log.Name())
			t.Logf("%s logged:\n%s", name, testutil.Tail(string(out), 4000))
		}
	})
	return "http://" + addr
}
