package testutil

import (
	"os/exec"
	"syscall"
)

// dieWithParent asks the kernel to SIGKILL the child when the test binary
// dies. (Strictly, when the OS thread that started it exits; the Go runtime
// does not end its threads unless a goroutine exits while locked to one,
// which nothing starting a process here does.)
func dieWithParent(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
