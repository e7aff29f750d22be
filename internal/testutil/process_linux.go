package testutil

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// dieWithParent asks the kernel to SIGKILL the child when the test binary
// dies. Strictly, when the OS thread that started it exits: so every child
// is started on [spawner]'s thread, which lives as long as the binary.
func dieWithParent(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}

// spawner is one OS thread, locked to its goroutine for the life of the
// test binary, that starts every child process. The Go runtime ends a
// thread of its pool when a goroutine exits while locked to it, and a child
// started from that thread would then be killed by its Pdeathsig, silently,
// before it said a word: a nats-server node that never came up.
var spawner = sync.OnceValue(func() chan<- func() {
	ch := make(chan func())
	go spawnLoop(ch)
	return ch
})

// spawnLoop is the spawner's goroutine. It lives as long as the test
// binary: a goroutine-leak check of a package that starts processes ignores
// it by this name (see [IgnoreSpawner]).
func spawnLoop(ch <-chan func()) {
	runtime.LockOSThread() // never unlocked: the thread must not end
	for f := range ch {
		f()
	}
}

// start starts cmd on the spawner's thread.
func start(cmd *exec.Cmd) error {
	errc := make(chan error, 1)
	spawner() <- func() { errc <- cmd.Start() }
	return <-errc
}
