package cli

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/relay-dev/relay/internal/testutil"
)

// testSecret is a valid whsec_ secret (32 bytes).
const testSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// env is a running relay on its own NATS server, and the binary to run its
// commands with.
type env struct {
	t    *testing.T
	bin  string
	nats string
	dir  string
}

// startEnv starts a NATS server and a built relay run against it, allowed
// to deliver to loopback, and waits until it is ready.
func startEnv(t *testing.T) *env {
	t.Helper()
	bin := testutil.Build(t, "github.com/relay-dev/relay/cmd/relay")
	n := testutil.StartNATS(t)
	e := &env{t: t, bin: bin, nats: n.URL, dir: t.TempDir()}
	addr := testutil.FreeAddr(t)
	testutil.StartBuiltRelay(t, bin, addr, "run", "--nats", n.URL, "--metrics", addr, "--lanes", "2", "--allow-private-targets")
	return e
}

// result is what one command printed and how it exited.
type result struct {
	args           []string
	stdout, stderr string
	code           int
}

// run runs the built relay with args against the env's NATS.
func (e *env) run(args ...string) result {
	e.t.Helper()
	return runBin(e.t, e.bin, []string{"NATS_URL=" + e.nats}, args...)
}

// must is run, failing the test unless the command exits 0.
func (e *env) must(args ...string) result {
	e.t.Helper()
	r := e.run(args...)
	if r.code != 0 {
		e.t.Fatalf("relay %s: exit %d\n%s%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r
}

func runBin(t *testing.T, bin string, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("relay %s: %v", strings.Join(args, " "), err)
	}
	return result{args: args, stdout: out.String(), stderr: errb.String(), code: code}
}
