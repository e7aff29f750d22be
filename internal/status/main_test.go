package status

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind, such as
// a reader of Collect that outlived its call.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
