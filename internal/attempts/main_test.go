package attempts

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails a green run that left a goroutine behind: Run returns
// when its context ends.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
