// Package docs runs, with the built relay and the nats CLI, every command
// block of README.md and docs/recipes.md as a reader pastes it, and checks
// what the README says of the largest event.
package docs

import (
	"os"
	"testing"

	"github.com/relay-dev/relay/internal/testutil"
)

// TestMain removes the relay binary once every test is done with it, and
// fails a green run that left a goroutine behind.
func TestMain(m *testing.M) { os.Exit(testutil.RunBuilt(m)) }
