package main

import (
	"context"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/sourcegraph/conc"
)

// hurryGrace is how long, after a second SIGINT or SIGTERM, the process
// waits for relay run's quick hand-back (what it holds NAKed, its requests
// in flight abandoned, the embedded server stopped) before it exits anyway.
const hurryGrace = 2 * time.Second

// stopSignals owns the process's SIGINT and SIGTERM. The first cancels the
// context the commands run under: relay run stops cleanly, finishing or
// handing back its deliveries. The second ends the process at once, with
// exit code 128 + the signal's number (130 for SIGINT, 143 for SIGTERM), as
// a shell reports a process a signal ended: relay run is told to hurry
// (see withHurry) and given at most hurryGrace to hand back what it holds.
type stopSignals struct {
	ch chan os.Signal
	// stop is the first signal's: the graceful stop.
	stop context.CancelFunc
	// hurry is the second signal's.
	hurry context.CancelFunc
	// done is closed when the command has returned: no exit is forced then.
	done     chan struct{}
	doneOnce sync.Once
	watcher  conc.WaitGroup
	// exit ends the process (os.Exit).
	exit func(code int)

	mu     sync.Mutex
	second os.Signal
}

// watchStopSignals starts watching SIGINT and SIGTERM. The context it
// returns ends on the first; it carries the second (see hurryOf).
func watchStopSignals(parent context.Context, exit func(code int)) (context.Context, *stopSignals) {
	ctx, stop := context.WithCancel(parent)
	hurry, hurryNow := context.WithCancel(context.WithoutCancel(parent))
	s := &stopSignals{ch: make(chan os.Signal, 2), stop: stop, hurry: hurryNow, done: make(chan struct{}), exit: exit}
	signal.Notify(s.ch, os.Interrupt, syscall.SIGTERM)
	s.watcher.Go(s.watch)
	return withHurry(ctx, hurry), s
}

func (s *stopSignals) watch() {
	for n := 0; ; n++ {
		var sig os.Signal
		select {
		case sig = <-s.ch:
		case <-s.done:
			return
		}
		if n == 0 {
			s.stop()
			continue
		}
		s.mu.Lock()
		s.second = sig
		s.mu.Unlock()
		s.stop()
		s.hurry()
		t := time.NewTimer(hurryGrace)
		select {
		case <-s.done:
			t.Stop()
		case <-t.C:
			s.exit(exitCode(sig))
		}
		return
	}
}

// code is the exit code of a command that returned code: 128 + the second
// signal's number if one came.
func (s *stopSignals) code(code int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.second != nil {
		return exitCode(s.second)
	}
	return code
}

// close stops watching, once the command has returned.
func (s *stopSignals) close() {
	s.doneOnce.Do(func() { close(s.done) })
	s.watcher.Wait()
	signal.Stop(s.ch)
	s.stop()
	s.hurry()
}

// exitCode is a shell's code for a process ended by sig.
func exitCode(sig os.Signal) int {
	if n, ok := sig.(syscall.Signal); ok {
		return 128 + int(n)
	}
	return exitFailure
}

// hurryKey is the context key of the second signal's context.
type hurryKey struct{}

// withHurry makes hurry, done on a second signal, reachable from the
// context a command runs under (cobra hands commands only a context).
func withHurry(ctx, hurry context.Context) context.Context {
	return context.WithValue(ctx, hurryKey{}, hurry)
}

// hurryOf is the context a second signal ends; one never done when ctx
// carries none (tests that run commands in process).
func hurryOf(ctx context.Context) context.Context {
	if h, ok := ctx.Value(hurryKey{}).(context.Context); ok {
		return h
	}
	return context.Background()
}
