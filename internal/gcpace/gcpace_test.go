package gcpace_test

import (
	"context"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"

	"github.com/relay-dev/relay/internal/gcpace"
	"github.com/relay-dev/relay/internal/testutil"
)

func TestPercent(t *testing.T) {
	t.Parallel()
	const mb = 1 << 20
	for _, tt := range []struct {
		name string
		live uint64
		want int
	}{
		{"nothing live yet: the bound", 0, 1000},
		{"a few MB: the bound, not GBs", 2 * mb, 1000},
		{"16 MB grows by 64", 16 * mb, 400},
		{"32 MB grows by 64", 32 * mb, 200},
		{"just under the headroom", 63 * mb, 101},
		{"at the headroom: Go's default", 64 * mb, 100},
		{"above it: Go's default", 512 * mb, 100},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := gcpace.Percent(tt.live, gcpace.Headroom); got != tt.want {
				t.Errorf("Percent(%d MB) = %d, want %d", tt.live/mb, got, tt.want)
			}
		})
	}
}

func TestWantedOnlyWithoutTheOperatorsSetting(t *testing.T) {
	t.Parallel()
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	if !gcpace.Wanted(env(nil)) {
		t.Error("nothing set: the pacer should run")
	}
	if gcpace.Wanted(env(map[string]string{"GOGC": "200"})) {
		t.Error("GOGC set: the operator's choice wins")
	}
	if gcpace.Wanted(env(map[string]string{"GOMEMLIMIT": "1GiB"})) {
		t.Error("GOMEMLIMIT set: the operator's choice wins")
	}
}

// TestRunSetsThePercentAfterEachCollection runs the pacer, collects, and
// waits for the percent to be what the live heap calls for; then it stops
// the pacer and finds the percent it started from. Not parallel: the
// percent is the process's.
func TestRunSetsThePercentAfterEachCollection(t *testing.T) {
	before := debug.SetGCPercent(137)
	t.Cleanup(func() { debug.SetGCPercent(before) })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); gcpace.Run(ctx) }()

	sample := []metrics.Sample{{Name: gcpace.LiveMetric}, {Name: "/gc/gogc:percent"}}
	// Each look collects; the pacer sets the percent once the collection's
	// cleanup has run.
	testutil.Eventually(t, func() bool {
		runtime.GC()
		metrics.Read(sample)
		want := gcpace.Percent(sample[0].Value.Uint64(), gcpace.Headroom)
		return want != 137 && int(sample[1].Value.Uint64()) == want
	}, "the percent never followed the live heap")
	cancel()
	<-done
	metrics.Read(sample)
	if got := sample[1].Value.Uint64(); got != 137 {
		t.Errorf("after Run the percent is %d, want the 137 it found", got)
	}
}
