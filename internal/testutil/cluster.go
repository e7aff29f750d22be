package testutil

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/streams"
)

// Cluster is a running 3-node JetStream cluster on loopback ports.
type Cluster struct {
	Servers []*server.Server
	// URLs are the client URLs, one per node.
	URLs []string
}

// StartCluster starts a 3-node JetStream cluster on loopback, waits until it
// has a meta leader, and shuts it down when the test ends.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	const size = 3
	ports := make([]int, size)
	for i := range ports {
		ports[i] = freeTCPPort(t)
	}
	routes := make([]*url.URL, size)
	for i, p := range ports {
		routes[i] = &url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", p)}
	}
	c := &Cluster{}
	for i := range size {
		opts := &server.Options{
			ServerName: fmt.Sprintf("n%d", i+1),
			Host:       "127.0.0.1",
			Port:       server.RANDOM_PORT,
			JetStream:  true,
			StoreDir:   t.TempDir(),
			NoLog:      true,
			NoSigs:     true,
			Cluster: server.ClusterOpts{
				Name: "relay-test",
				Host: "127.0.0.1",
				Port: ports[i],
			},
			Routes: routes,
		}
		srv, err := server.NewServer(opts)
		if err != nil {
			t.Fatalf("testutil: cluster node %d: %v", i+1, err)
		}
		srv.Start()
		t.Cleanup(func() {
			srv.Shutdown()
			srv.WaitForShutdown()
		})
		c.Servers = append(c.Servers, srv)
	}
	for i, srv := range c.Servers {
		if !srv.ReadyForConnections(10 * time.Second) {
			t.Fatalf("testutil: cluster node %d not ready", i+1)
		}
		c.URLs = append(c.URLs, srv.ClientURL())
	}
	waitJetStream(t, c.URLs)
	return c
}

// ConnectJS connects to one node of the cluster.
func (c *Cluster) ConnectJS(t testing.TB, node int) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc := Connect(t, c.URLs[node])
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// StartRelayCluster is StartCluster with the relay streams and buckets
// created with three replicas.
func StartRelayCluster(t testing.TB) *Cluster {
	t.Helper()
	c := StartCluster(t)
	_, js := c.ConnectJS(t, 0)
	Eventually(t, func() bool {
		return streams.Ensure(Context(t), js, streams.Options{Replicas: 3}) == nil
	}, "relay streams not created on the cluster")
	return c
}

// freeTCPPort is a port for a cluster node: outside the ephemeral range (see
// [FreeAddr]), so that no connection of a parallel test takes it first.
func freeTCPPort(t testing.TB) int {
	t.Helper()
	_, port, err := net.SplitHostPort(FreeAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
