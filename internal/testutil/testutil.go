// Package testutil starts the real parts relay's tests run against: an
// in-process nats-server with JetStream, the relay streams on it, and a
// connection, all torn down when the test ends.
package testutil

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/streams"
)

// NATS is a running test server with a client connection to it.
type NATS struct {
	Server *server.Server
	URL    string
	Conn   *nats.Conn
	JS     jetstream.JetStream
}

// StartNATS starts a JetStream-enabled nats-server on a random loopback port,
// storing in a temporary directory, and connects to it. The server, the
// connection and the files go away when the test ends.
func StartNATS(t testing.TB) *NATS {
	t.Helper()
	return StartNATSWith(t, nil)
}

// StartNATSWith is [StartNATS] with the server's options changed by set
// first (nil: none), such as the JetStreamMaxStore of an operator's small
// `jetstream { max_file_store }`.
func StartNATSWith(t testing.TB, set func(*server.Options)) *NATS {
	t.Helper()
	opts := &server.Options{
		Host:      "127.0.0.1",
		Port:      server.RANDOM_PORT,
		JetStream: true,
		StoreDir:  t.TempDir(),
		NoLog:     true,
		NoSigs:    true,
	}
	if set != nil {
		set(opts)
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("testutil: new server: %v", err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		t.Fatal("testutil: nats-server not ready")
	}
	t.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	nc := Connect(t, srv.ClientURL())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("testutil: jetstream: %v", err)
	}
	return &NATS{Server: srv, URL: srv.ClientURL(), Conn: nc, JS: js}
}

// StartRelayNATS is StartNATS with the relay streams and buckets created, as
// `relay run` creates them.
func StartRelayNATS(t testing.TB) *NATS {
	t.Helper()
	n := StartNATS(t)
	if err := streams.Ensure(Context(t), n.JS, streams.Options{}); err != nil {
		t.Fatalf("testutil: ensure streams: %v", err)
	}
	return n
}

// Connect opens a client connection that is closed when the test ends.
func Connect(t testing.TB, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1))
	if err != nil {
		t.Fatalf("testutil: connect %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// Context returns a context cancelled when the test ends, bounded so that a
// stuck test fails with a message instead of hanging the suite.
func Context(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// Eventually polls cond until it holds, failing the test with msg if it
// does not within a generous bound. It waits on a condition, never for a
// fixed time, so it is no substitute for a sleep that makes a test pass.
func Eventually(t testing.TB, cond func() bool, msg string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("testutil: condition not met: "+msg, args...)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
