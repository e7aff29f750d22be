package main

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/relay-dev/relay/internal/testutil"
)

// TestMain removes the binaries the process tests build (relay and
// nats-server), once they are all done with them, and fails a green run
// that left a goroutine behind: every relay run in this process stops by
// cancel plus wait.
func TestMain(m *testing.M) {
	code := m.Run()
	testutil.RemoveBuilds()
	if code == 0 {
		if err := goleak.Find(testutil.IgnoreSpawner()); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
