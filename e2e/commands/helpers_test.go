package commands

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/internal/fanout"
	"github.com/relay-dev/relay/internal/status"
	"github.com/relay-dev/relay/internal/testutil"
)

// testSecret is a valid whsec_ secret (32 bytes).
const testSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// lanes is the --lanes of every relay a test starts, which relay status
// is told as well.
const lanes = "4"

// relayBin is the built relay.
func relayBin(t *testing.T) string {
	t.Helper()
	return testutil.Build(t, "github.com/relay-dev/relay/cmd/relay")
}

// relayCmd runs the built relay with args and returns its exit code,
// stdout and stderr.
func relayCmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, relayBin(t), args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return exit.ExitCode(), out.String(), errOut.String()
	case err != nil:
		t.Fatalf("relay %v: %v", args, err)
	}
	return 0, out.String(), errOut.String()
}

// mustRelay runs the built relay and fails the test unless it exits 0.
func mustRelay(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errOut := relayCmd(t, args...)
	if code != 0 {
		t.Fatalf("relay %v: exit %d\nstdout: %s\nstderr: %s", args, code, out, errOut)
	}
	return out
}

// startRelay starts `relay run` against url, and returns its metrics
// address (http://host:port) once it is ready. It is stopped with SIGTERM
// when the test ends, and its log shown if the test failed.
func startRelay(t *testing.T, url, name string, extra ...string) string {
	t.Helper()
	addr := testutil.FreeAddr(t)
	log, err := os.CreateTemp(t.TempDir(), name+"-*.log")
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"run", "--nats", url, "--metrics", addr, "--lanes", lanes, "--allow-private-targets"}, extra...)
	cmd := exec.Command(relayBin(t), args...)
	cmd.Stdout, cmd.Stderr = log, log
	p := testutil.StartProcess(t, cmd)
	t.Cleanup(func() {
		if err := p.Stop(syscall.SIGTERM, 30*time.Second); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if t.Failed() {
			out, _ := os.ReadFile(log.Name())
			if len(out) > 6000 {
				out = out[len(out)-6000:]
			}
			t.Logf("%s logged:\n%s", name, out)
		}
	})
	metrics := "http://" + addr
	testutil.Eventually(t, func() bool { return testutil.HTTPStatus(metrics+"/readyz") == http.StatusOK }, "%s not ready", name)
	return metrics
}

// metricsText is the /metrics page of a relay.
func metricsText(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get(addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	if _, err := b.ReadFrom(resp.Body); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// sink is a receiver that answers with the status it is set to, and
// counts the requests it got.
type sink struct {
	*httptest.Server
	mu     sync.Mutex
	answer int
	ids    []string
}

func newSink(t *testing.T, answer int) *sink {
	s := &sink{answer: answer}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.ids = append(s.ids, r.Header.Get("webhook-id"))
		code := s.answer
		s.mu.Unlock()
		w.WriteHeader(code)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *sink) set(code int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.answer = code
}

func (s *sink) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ids)
}

// publish publishes n events of type typ with ids prefix-0…prefix-(n-1).
func publish(t *testing.T, js jetstream.JetStream, typ, prefix string, n int) {
	t.Helper()
	ctx := testutil.Context(t)
	for i := range n {
		if _, err := js.Publish(ctx, fanout.SubjectPrefix+typ, []byte(`{}`), jetstream.WithMsgID(fmt.Sprintf("%s-%d", prefix, i))); err != nil {
			t.Fatal(err)
		}
	}
}

// statusOf is relay status's row of the subscriber id.
func statusOf(t *testing.T, url, id string) status.Subscriber {
	t.Helper()
	var rows []status.Subscriber
	if err := json.Unmarshal([]byte(mustRelay(t, "status", "--nats", url, "--json", "--lanes", lanes)), &rows); err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.ID == id {
			return r
		}
	}
	t.Fatalf("relay status shows no subscriber %s", id)
	return status.Subscriber{}
}
