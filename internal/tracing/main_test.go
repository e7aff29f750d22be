package tracing

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails a green run that left a goroutine behind: a tracer's
// Shutdown stops its exporter and closes its connections.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
