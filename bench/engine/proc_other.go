//go:build !linux

package main

import (
	"errors"
	"os/exec"
	"time"
)

// ownProcess does nothing here: the relays are stopped by this program on
// exit and on Ctrl-C, but not if it is killed.
func ownProcess(*exec.Cmd) {}

// memory needs /proc/<pid>/status (Linux).
func memory(int) (rss, hwm int64, err error) {
	return 0, 0, errors.New("reading a process's RSS needs Linux's /proc")
}

// cpuTime needs /proc/<pid>/stat (Linux).
func cpuTime(int) (time.Duration, error) {
	return 0, errors.New("reading a process's CPU time needs Linux's /proc")
}
