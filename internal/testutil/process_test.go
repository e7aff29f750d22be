package testutil_test

import (
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/relay-dev/relay/internal/testutil"
)

func TestProcessKillReapsAndStopSignals(t *testing.T) {
	t.Parallel()
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep command")
	}
	p := testutil.StartProcess(t, exec.Command(sleep, "60"))
	p.Kill()
	select {
	case <-p.Exited():
	default:
		t.Fatal("Kill returned before the process was reaped")
	}
	if p.Err() == nil {
		t.Fatal("a killed process reports a clean exit")
	}
	p.Kill() // a second Kill does nothing

	q := testutil.StartProcess(t, exec.Command(sleep, "60"))
	if err := q.Stop(os.Interrupt, 30*time.Second); err == nil {
		t.Fatal("sleep stopped by SIGINT reports a clean exit")
	}
}

func TestWithinReportsWhetherTheConditionHeld(t *testing.T) {
	t.Parallel()
	n := 0
	if !testutil.Within(time.Minute, func() bool { n++; return n == 3 }) {
		t.Fatal("Within gave up on a condition that held")
	}
	if testutil.Within(20*time.Millisecond, func() bool { return false }) {
		t.Fatal("Within reported a condition that never held")
	}
}
