package testutil

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// Process is a child process a test started and may kill, such as the real
// relay binary in a crash test.
type Process struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error // the Wait result; written before done is closed
}

// StartProcess starts cmd and reaps it in the background. Where the OS
// allows it (Linux), the child is killed if the test binary dies, so a test
// that panics or times out leaves no process behind; in any case it is
// killed when the test ends.
func StartProcess(t testing.TB, cmd *exec.Cmd) *Process {
	t.Helper()
	dieWithParent(cmd)
	if cmd.WaitDelay == 0 {
		// Wait also waits for the goroutines copying the child's output;
		// bound that, should the output pipe outlive the child.
		cmd.WaitDelay = 10 * time.Second
	}
	if err := start(cmd); err != nil {
		t.Fatalf("testutil: start %s: %v", cmd.Path, err)
	}
	p := &Process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(p.Kill)
	return p
}

// Exited is closed once the process has exited and been reaped.
func (p *Process) Exited() <-chan struct{} { return p.done }

// Err is how the process exited (nil for status 0); it blocks until then.
func (p *Process) Err() error {
	<-p.done
	return p.err
}

// Kill kills the process with SIGKILL, as `kill -9` does, and returns once
// it has been reaped: its sockets are closed and its ports are free.
// Killing a process that has exited does nothing.
func (p *Process) Kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Stop sends sig and waits up to d for the process to exit. It returns how
// the process exited, or an error if it still runs after d (it is then
// killed).
func (p *Process) Stop(sig os.Signal, d time.Duration) error {
	if err := p.cmd.Process.Signal(sig); err != nil {
		select {
		case <-p.done:
			return p.err
		default:
			return fmt.Errorf("testutil: signal %v: %w", sig, err)
		}
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-p.done:
		return p.err
	case <-timer.C:
		p.Kill()
		return fmt.Errorf("testutil: %s still running %s after %v", p.cmd.Path, d, sig)
	}
}

// IgnoreSpawner is the goleak option that leaves out the goroutine which
// starts child processes on Linux: it lives as long as the test binary, by
// design (see spawnLoop).
func IgnoreSpawner() goleak.Option {
	return goleak.IgnoreTopFunction("github.com/relay-dev/relay/internal/testutil.spawnLoop")
}

// StartBuiltRelay runs the built relay bin with args (a relay run whose
// --metrics is metrics), its output in a log file of the test's, until the
// test ends, when it is stopped as by SIGTERM and must exit cleanly; the
// end of its log is shown when the test failed. It returns once the
// relay's /readyz answers 200.
func StartBuiltRelay(t testing.TB, bin, metrics string, args ...string) {
	t.Helper()
	log, err := os.CreateTemp(t.TempDir(), "relay-*.log")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	p := StartProcess(t, cmd)
	t.Cleanup(func() {
		if err := p.Stop(syscall.SIGTERM, 30*time.Second); err != nil {
			t.Errorf("relay run: %v", err)
		}
		if t.Failed() {
			out, _ := os.ReadFile(log.Name())
			t.Logf("relay run logged:\n%s", Tail(string(out), 4000))
		}
	})
	Eventually(t, func() bool { return HTTPStatus("http://"+metrics+"/readyz") == http.StatusOK }, "relay run not ready")
}
