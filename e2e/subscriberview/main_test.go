// Package subscriberview tests, end to end with the built relay, that a
// subscriber added right after a burst of 100,000 subscriber writes gets
// the next event: every relay's view of the subscribers catches up, and
// none copies an event with a view behind the bucket.
package subscriberview

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/relay-dev/relay/internal/testutil"
)

// TestMain removes the relay binary once every test is done with it, and
// fails a green run that left a goroutine behind.
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
