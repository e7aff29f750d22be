//go:build !linux

package main

import (
	"errors"
	"os/exec"
	"time"
)

// ownProcess does nothing here: the relays and the receiver process are
// stopped by this program on exit and on Ctrl-C, but the relays outlive it
// if it is killed (the receiver process ends by itself then, as its stdin
// closes).
func ownProcess(*exec.Cmd) {}

// memory needs /proc/<pid>/status (Linux).
func memory(int) (rss, hwm int64, err error) {
	return 0, 0, errors.New("reading a process's RSS needs Linux's /proc")
}

// cpuTime needs /proc/<pid>/stat (Linux).
func cpuTime(int) (time.Duration, error) {
	return 0, errors.New("reading a process's CPU time needs Linux's /proc")
}

// cpuModel is read from Linux's /proc/cpuinfo only: empty here.
func cpuModel() string { return "" }

// openFDs needs /proc/<pid>/fd (Linux).
func openFDs(int) (int, error) {
	return 0, errors.New("counting a process's file descriptors needs Linux's /proc")
}
