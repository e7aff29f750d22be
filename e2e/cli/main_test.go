// Package cli tests, with the built relay against a running one, what an
// operator reads: every command's output fits 100 columns unless --wide,
// its messages say one thing one way, and an event is found by the id its
// receiver saw.
package cli

import (
	"os"
	"testing"

	"github.com/relay-dev/relay/internal/testutil"
)

// TestMain removes the relay binary once every test is done with it, and
// fails a green run that left a goroutine behind.
func TestMain(m *testing.M) { os.Exit(testutil.RunBuilt(m)) }
