package testutil

import "time"

// Within polls cond until it holds or d has passed, and reports whether it
// held. It is Eventually for a caller that must say more than a fixed
// message when the condition fails (the state at the deadline), or that
// stops waiting on a second condition (a child process that exited).
func Within(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}
