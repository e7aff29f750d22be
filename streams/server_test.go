package streams_test

import (
	"net"
	"net/url"
	"regexp"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

// TestLocalURLReachesTheServerWhereverItListens: relay run dials its
// embedded server at LocalURL, so it must be dialable whatever --listen
// says, an address on every interface included.
func TestLocalURLReachesTheServerWhereverItListens(t *testing.T) {
	t.Parallel()
	for _, listen := range []string{"127.0.0.1:0", "0.0.0.0:0", "[::]:0"} {
		t.Run(listen, func(t *testing.T) {
			t.Parallel()
			srv, err := streams.StartServer(streams.ServerConfig{Listen: listen, DataDir: t.TempDir()})
			if err != nil {
				t.Skipf("no server on %s here: %v", listen, err)
			}
			t.Cleanup(func() {
				srv.Shutdown()
				srv.WaitForShutdown()
			})
			got, err := streams.LocalURL(srv)
			if err != nil {
				t.Fatal(err)
			}
			u, err := url.Parse(got)
			if err != nil {
				t.Fatalf("LocalURL = %q: %v", got, err)
			}
			if ip := net.ParseIP(u.Hostname()); ip == nil || !ip.IsLoopback() || u.Port() == "0" || u.Port() == "" {
				t.Fatalf("LocalURL = %q, want a loopback address and the port the server took", got)
			}
			testutil.Connect(t, got)
		})
	}
}

// The embedded server's service user answers a request on its inbox, as
// nats.go's Request (the nats CLI's nats req) asks, and is refused the
// publish of an answer to any other reply subject a request names: to
// relay's streams and buckets nothing is stored. A client without
// credentials may still do everything (nats pub events.x), one with
// credentials the server does not know is refused, and the service user
// cannot connect from outside the process.
func TestEmbeddedServiceUserAnswersOnlyOnInboxes(t *testing.T) {
	t.Parallel()
	const password = "service-password"
	srv, err := streams.StartServer(streams.ServerConfig{Listen: "127.0.0.1:0", DataDir: t.TempDir(), ServicePassword: password})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	addr, err := streams.LocalURL(srv)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testutil.Context(t)
	asker := testutil.Connect(t, addr)
	js, err := jetstream.New(asker)
	if err != nil {
		t.Fatal(err)
	}
	if err := streams.Ensure(ctx, js, streams.Options{}); err != nil {
		t.Fatalf("a client without credentials cannot create the streams: %v", err)
	}
	if _, err := js.Publish(ctx, "events.order.paid", []byte(`{}`)); err != nil {
		t.Fatalf("a client without credentials cannot publish an event: %v", err)
	}

	refused := make(chan string, 16)
	svc, err := nats.Connect("", nats.InProcessServer(srv), nats.UserInfo(streams.ServiceUser, password),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if m := regexp.MustCompile(`Publish to "([^"]+)"`).FindStringSubmatch(err.Error()); m != nil {
				refused <- m[1]
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	sub, err := svc.Subscribe("relay.api.sub.test", func(m *nats.Msg) { _ = m.Respond([]byte("answer")) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := svc.Flush(); err != nil {
		t.Fatal(err)
	}

	answer, err := asker.Request("relay.api.sub.test", []byte(`{}`), 10*time.Second)
	if err != nil || string(answer.Data) != "answer" {
		t.Fatalf("no answer on the asker's inbox: %v", err)
	}
	hostile := []string{"retries.wait.victim.x", "bodies.1", "events.x", "events.relay.x", "$KV.relay_refill.x", "dlq.victim.x"}
	for _, reply := range hostile {
		if err := asker.PublishRequest("relay.api.sub.test", reply, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]bool{}
	for range hostile {
		select {
		case s := <-refused:
			got[s] = true
		case <-ctx.Done():
			t.Fatalf("refused only %v of %v", got, hostile)
		}
	}
	for _, reply := range hostile {
		if !got[reply] {
			t.Fatalf("the answer to %s was not refused (refused: %v)", reply, got)
		}
	}
	for name, want := range map[string]uint64{streams.Events: 1, streams.Retries: 0, streams.Bodies: 0, streams.DLQ: 0,
		"KV_" + streams.RefillBucket: 0} {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs != want {
			t.Fatalf("%s holds %d messages, want %d", name, info.State.Msgs, want)
		}
	}

	if nc, err := nats.Connect(addr, nats.UserInfo(streams.ServiceUser, password), nats.MaxReconnects(0)); err == nil {
		nc.Close()
		t.Fatal("the service user connected from outside the process")
	}
	// Credentials the server does not know are refused, not ignored.
	if nc, err := nats.Connect(addr, nats.Token("some-token"), nats.MaxReconnects(0)); err == nil {
		nc.Close()
		t.Fatal("a client with a token the server does not know connected")
	}
}
