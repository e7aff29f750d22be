package subscribers

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind, such as
// a Live watch that did not stop with its context.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
