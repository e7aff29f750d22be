package testutil

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ServerProcess is a nats-server running as a process of its own, the
// binary of the nats-server module relay is built against: the fault tests
// kill it with SIGKILL and start it again on the same ports and files, as an
// operator's node would die and come back.
type ServerProcess struct {
	t    testing.TB
	Name string
	// URL is the node's client URL.
	URL  string
	conf string
	log  *Buffer

	mu   sync.Mutex
	proc *Process
}

// NATSServerBinary builds the nats-server of go.mod once per test binary.
func NATSServerBinary(t testing.TB) string {
	t.Helper()
	return Build(t, "github.com/nats-io/nats-server/v2")
}

// StartServerProcess starts one JetStream nats-server process with file
// storage on a loopback port.
func StartServerProcess(t testing.TB) *ServerProcess {
	t.Helper()
	addr := FreeAddr(t)
	conf := fmt.Sprintf("server_name: n1\nlisten: %q\njetstream { store_dir: %q }\n", addr, t.TempDir())
	s := newServerProcess(t, "n1", "nats://"+addr, conf)
	s.Start()
	waitJetStream(t, []string{s.URL})
	return s
}

// ClusterProcesses is a 3-node JetStream cluster of nats-server processes.
type ClusterProcesses struct {
	Nodes []*ServerProcess
}

// StartClusterProcesses starts a 3-node JetStream cluster of nats-server
// processes on loopback ports and waits until it has a meta leader.
func StartClusterProcesses(t testing.TB) *ClusterProcesses {
	t.Helper()
	const size = 3
	clients := make([]string, size)
	routes := make([]string, size)
	for i := range size {
		clients[i] = FreeAddr(t)
		routes[i] = FreeAddr(t)
	}
	var routeURLs []string
	for _, r := range routes {
		routeURLs = append(routeURLs, fmt.Sprintf("%q", "nats://"+r))
	}
	c := &ClusterProcesses{}
	for i := range size {
		name := fmt.Sprintf("n%d", i+1)
		conf := fmt.Sprintf(`server_name: %s
listen: %q
jetstream { store_dir: %q }
cluster {
  name: relay-faults
  listen: %q
  routes: [%s]
}
`, name, clients[i], t.TempDir(), routes[i], strings.Join(routeURLs, ", "))
		s := newServerProcess(t, name, "nats://"+clients[i], conf)
		s.Start()
		c.Nodes = append(c.Nodes, s)
	}
	waitJetStream(t, c.URLs())
	return c
}

// URLs are the client URLs of every node.
func (c *ClusterProcesses) URLs() []string {
	urls := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		urls[i] = n.URL
	}
	return urls
}

// Node is the node named name (n1, n2, n3), or nil.
func (c *ClusterProcesses) Node(name string) *ServerProcess {
	for _, n := range c.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

func newServerProcess(t testing.TB, name, url, conf string) *ServerProcess {
	t.Helper()
	path := filepath.Join(t.TempDir(), name+".conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	return &ServerProcess{t: t, Name: name, URL: url, conf: path, log: &Buffer{}}
}

// Start starts the node, or starts it again after Kill or Stop, with the
// same configuration, ports and files.
func (s *ServerProcess) Start() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	cmd := exec.Command(NATSServerBinary(s.t), "-c", s.conf)
	cmd.Stdout = s.log
	cmd.Stderr = s.log
	s.proc = StartProcess(s.t, cmd)
	proc := s.proc
	// The port may be held for a moment by the node's last life.
	if !Within(15*time.Second, func() bool {
		select {
		case <-proc.Exited():
			s.t.Fatalf("testutil: nats-server %s exited before accepting connections (%v):\n%s", s.Name, proc.Err(), s.log.String())
		default:
		}
		nc, err := nats.Connect(s.URL, nats.Timeout(time.Second))
		if err != nil {
			return false
		}
		nc.Close()
		return true
	}) {
		s.t.Fatalf("testutil: nats-server %s not accepting connections at %s:\n%s", s.Name, s.URL, s.log.String())
	}
}

// Kill kills the node with SIGKILL, as `kill -9` does.
func (s *ServerProcess) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		s.proc.Kill()
	}
}

// Stop stops the node with SIGTERM, as an operator's restart does.
func (s *ServerProcess) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		if err := s.proc.Stop(syscall.SIGTERM, 30*time.Second); err != nil {
			s.t.Logf("testutil: nats-server %s: %v", s.Name, err)
		}
	}
}

// waitJetStream waits until JetStream answers through the given URLs: on a
// cluster, until it has a meta leader.
func waitJetStream(t testing.TB, urls []string) {
	t.Helper()
	nc := Connect(t, strings.Join(urls, ","))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(Context(t), time.Second)
		defer cancel()
		_, err := js.AccountInfo(ctx)
		return err == nil
	}, "nats-server processes at %v: JetStream not ready", urls)
	nc.Close()
}
