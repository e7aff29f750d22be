package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/testutil"
)

// startEmbeddedRelay starts `relay run` in process on its embedded server,
// storing in data and listening on listen, and waits until it is ready. It
// is stopped (as by SIGTERM) when the test ends, and must then exit 0.
func startEmbeddedRelay(t *testing.T, data, listen string, extra ...string) *runningRelay {
	t.Helper()
	addr := testutil.FreeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	r := &runningRelay{stderr: &testutil.Buffer{}, cancel: cancel, done: make(chan int, 1)}
	args := append([]string{"run", "--data", data, "--listen", listen, "--metrics", addr, "--lanes", "4",
		"--allow-private-targets"}, extra...)
	go func() { r.done <- run(ctx, args, io.Discard, r.stderr) }()
	t.Cleanup(func() {
		if code := r.stop(); code != 0 {
			t.Errorf("relay run exited %d: %s", code, r.stderr.String())
		}
	})
	testutil.Eventually(t, func() bool {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, "relay on %s never ready: %s", data, r.stderr)
	return r
}

// TestDataLockRefusesASecondRelay: two relay run on one --data would both
// store there, and the first one's subscribers would be lost. The second
// exits 1 at once with one line naming the directory and the process that
// holds it.
func TestDataLockRefusesASecondRelay(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	startEmbeddedRelay(t, data, testutil.FreeAddr(t))

	start := time.Now()
	code, _, stderr := relayCmd(t, "run", "--data", data, "--listen", testutil.FreeAddr(t), "--metrics", "")
	took := time.Since(start)
	require.Equal(t, exitFailure, code, stderr)
	require.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %s", stderr)
	require.Contains(t, stderr, data)
	// The holder is this test's process: the first relay runs in it.
	require.Contains(t, stderr, "process "+strconv.Itoa(os.Getpid()))
	require.Less(t, took, 5*time.Second, "the second relay waited before it refused")
	lock, err := os.ReadFile(filepath.Join(data, "relay.lock"))
	require.NoError(t, err)
	require.Equal(t, strconv.Itoa(os.Getpid()), strings.TrimSpace(string(lock)), "the lock file names its holder")
}

// TestDataUnusableOrListenInUseFailsAtOnce: a --data relay cannot use, or a
// --listen address another process holds, is named in a one-line error and
// exit 1 at once, not after the server's readiness timeout.
func TestDataUnusableOrListenInUseFailsAtOnce(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "a-file")
	require.NoError(t, os.WriteFile(file, []byte("x"), 0o600))
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = taken.Close() })

	for _, tt := range []struct {
		name, data, listen string
		want               []string
	}{
		{"data is a file", file, "", []string{file, "not a directory"}},
		{"data under a file", filepath.Join(file, "data"), "", []string{filepath.Join(file, "data"), "not a directory"}},
		{"listen in use", t.TempDir(), taken.Addr().String(), []string{taken.Addr().String(), "address already in use"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			listen := tt.listen
			if listen == "" {
				listen = testutil.FreeAddr(t)
			}
			start := time.Now()
			code, _, stderr := relayCmd(t, "run", "--data", tt.data, "--listen", listen, "--metrics", "")
			took := time.Since(start)
			require.Equal(t, exitFailure, code, stderr)
			require.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %s", stderr)
			for _, w := range tt.want {
				require.Contains(t, stderr, w)
			}
			require.Less(t, took, 5*time.Second, "relay waited before it said why it cannot start")
		})
	}
}

// TestEmbeddedRestartResumesTheBacklogAtOnce stops a relay on its embedded
// server mid-backlog (as SIGTERM does) and starts it again on the same
// --data: the backlog the stopped relay handed back is delivered at once,
// not after the ack wait. The hand-back must outlive the server: the
// embedded server stops with the relay, and a hand-back it kept only in
// memory would be forgotten, leaving every handed-back delivery to wait out
// its ack wait (60 s here) after the restart.
func TestEmbeddedRestartResumesTheBacklogAtOnce(t *testing.T) {
	t.Parallel()
	const (
		events   = 1000
		answered = 200
		ackWait  = 60 * time.Second
	)
	data := t.TempDir()
	listen := testutil.FreeAddr(t)
	url := "nats://" + listen
	rcv := newCrashSink(t)
	args := []string{"--ack-wait", ackWait.String(), "--shutdown-timeout", "500ms"}

	// Added while a relay runs, the subscriber is known to the next one as
	// it starts: every event published then is for it.
	setup := startEmbeddedRelay(t, data, listen, args...)
	mustRelay(t, "sub", "add", "busy", "--nats", url, "--url", rcv.URL, "--secret", testSecret,
		"--rate", "0", "--max-in-flight", "64")
	require.Zero(t, setup.stop(), setup.stderr.String())

	rcv.holdAfter(answered)
	first := startEmbeddedRelay(t, data, listen, args...)
	nc := testutil.Connect(t, url)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ids := make([]string, events)
	for i := range ids {
		ids[i] = fmt.Sprintf("evt-%04d", i)
		publish(t, js, "x", ids[i], []byte(`{}`))
	}
	testutil.Eventually(t, func() bool { return rcv.heldCount() > 0 && fannedOut(testutil.Context(t), js) },
		"the first relay did not reach its %d-th delivery", answered)
	require.Zero(t, first.stop(), first.stderr.String())
	stoppedAt := rcv.deliveredCount()

	rcv.answerAll()
	restart := time.Now()
	startEmbeddedRelay(t, data, listen, args...)
	within := testutil.Within(ackWait/3, func() bool { return len(rcv.missing(ids)) == 0 })
	took := time.Since(restart)
	require.True(t, within, "%d of %d events still missing %v after the restart: the hand-back waited out the %v ack wait",
		len(rcv.missing(ids)), events, took.Round(time.Millisecond), ackWait)
	t.Logf("stopped after %d deliveries; the other %d arrived %v after the restart",
		stoppedAt, events-stoppedAt, took.Round(time.Millisecond))
}

// TestSecondSignalEndsRelayAtOnce runs the built binary with a request that
// hangs (and a 30 s --shutdown-timeout): the first signal starts a clean
// stop that waits for it; the second ends the process at once with 128 +
// the signal's number, after handing back what it held: a relay started
// again on the same --data delivers it at once, not after the ack wait.
func TestSecondSignalEndsRelayAtOnce(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		sig  syscall.Signal
		code int
	}{{syscall.SIGINT, 130}, {syscall.SIGTERM, 143}} {
		t.Run(tt.sig.String(), func(t *testing.T) {
			t.Parallel()
			const ackWait = 60 * time.Second
			bin := buildRelay(t)
			data := t.TempDir()
			listen := testutil.FreeAddr(t)
			url := "nats://" + listen
			rcv := newCrashSink(t)
			rcv.holdAfter(0)
			logs := &testutil.Buffer{}
			cmd := exec.Command(bin, "run", "--data", data, "--listen", listen, "--metrics", "", "--lanes", "4",
				"--allow-private-targets", "--ack-wait", ackWait.String(), "--shutdown-timeout", "30s")
			cmd.Stderr = logs
			p := testutil.StartProcess(t, cmd)
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("relay's log:\n%s", logs)
				}
			})

			var nc *nats.Conn
			testutil.Eventually(t, func() bool {
				var err error
				nc, err = nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
				return err == nil
			}, "relay's embedded server never accepted connections")
			t.Cleanup(nc.Close)
			js, err := jetstream.New(nc)
			require.NoError(t, err)
			testutil.Eventually(t, func() bool {
				_, err := js.Consumer(testutil.Context(t), "EVENTS", "fanout")
				return err == nil
			}, "relay never created its fan-out consumer")
			mustRelay(t, "sub", "add", "hangs", "--nats", url, "--url", rcv.URL, "--secret", testSecret, "--timeout", "5m")
			// The running relay takes the subscriber up within a second:
			// publish until a request hangs.
			var ids []string
			testutil.Eventually(t, func() bool {
				if rcv.heldCount() > 0 {
					return true
				}
				id := fmt.Sprintf("evt-%d", len(ids))
				publishUntilAcked(t, js, "x", id, []byte(`{}`))
				ids = append(ids, id)
				time.Sleep(100 * time.Millisecond)
				return rcv.heldCount() > 0
			}, "no request reached the receiver")

			require.NoError(t, cmd.Process.Signal(tt.sig))
			testutil.Eventually(t, func() bool { return strings.Contains(logs.String(), "relay stopping") },
				"the first signal did not start the stop")
			select {
			case <-p.Exited():
				t.Fatalf("relay exited on the first signal while a request hung: %v", p.Err())
			default:
			}
			require.NoError(t, cmd.Process.Signal(tt.sig))
			select {
			case <-p.Exited():
			case <-time.After(10 * time.Second):
				t.Fatal("relay still runs 10s after the second signal")
			}
			var exit *exec.ExitError
			require.True(t, errors.As(p.Err(), &exit), "exit: %v", p.Err())
			require.Equal(t, tt.code, exit.ExitCode())

			rcv.answerAll()
			startEmbeddedRelay(t, data, listen, "--ack-wait", ackWait.String())
			require.True(t, testutil.Within(ackWait/3, func() bool { return len(rcv.missing(ids)) == 0 }),
				"%d of %d events not delivered after the restart: the second signal did not hand them back", len(rcv.missing(ids)), len(ids))
		})
	}
}
