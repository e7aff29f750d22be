package fanout_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind, such as
// a fan-out whose Run returned while its ack goroutine or pull iterator kept
// running.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
