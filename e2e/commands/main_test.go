// Package commands tests, end to end with the built relay, that the
// commands an operator runs in an ordinary week do what they say: an add
// that would replace a subscriber, a resume that must close a circuit, a
// removal that must not page anyone, a rate change, an events pattern that
// matches nothing.
package commands

import (
	"os"
	"testing"

	"github.com/relay-dev/relay/internal/testutil"
)

// TestMain removes the relay binary once every test is done with it, and
// fails a green run that left a goroutine behind.
func TestMain(m *testing.M) { os.Exit(testutil.RunBuilt(m)) }
