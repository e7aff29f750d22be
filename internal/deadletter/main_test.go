package deadletter

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind, such as
// the message iterator of a List that did not stop.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
