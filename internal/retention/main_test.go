package retention_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind, such as
// a keeper whose Run kept going after its context was cancelled.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
