package main

import (
	"os"
	"testing"

	"github.com/relay-dev/relay/internal/testutil"
)

// TestMain removes the binaries the process tests build (relay and
// nats-server), once they are all done with them, and fails a green run
// that left a goroutine behind: every relay run in this process stops by
// cancel plus wait.
func TestMain(m *testing.M) { os.Exit(testutil.RunBuilt(m)) }
