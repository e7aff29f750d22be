// Package subscriberview tests, end to end with the built relay, that a
// subscriber added right after a burst of 100,000 subscriber writes gets
// the next event: every relay's view of the subscribers catches up, and
// none copies an event with a view behind the bucket.
package subscriberview

import (
	"os"
	"testing"

	"github.com/relay-dev/relay/internal/testutil"
)

// TestMain removes the relay binary once every test is done with it, and
// fails a green run that left a goroutine behind.
func TestMain(m *testing.M) { os.Exit(testutil.RunBuilt(m)) }
