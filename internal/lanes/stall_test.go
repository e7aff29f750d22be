package lanes

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sourcegraph/conc"
	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/clock"
	"github.com/relay-dev/relay/internal/metrics"
	"github.com/relay-dev/relay/internal/testutil"
)

// lockedBuffer is a log's output, written by the watch and read by the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *lockedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *lockedBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// TestStalledLaneIsReportedOnce: a lane whose scheduler holds a delivery
// with its loop not running (a wake-up lost), nothing in flight and nothing
// sent is reported once it has stood still for stallAfter: once per stall,
// counted in relay_lane_stalls_total and logged with the scheduler's state
// and the goroutines. A wait its subscriber explains (a token, a pause, a
// request slot) is not a stall, however long; a request sent ends one.
func TestStalledLaneIsReportedOnce(t *testing.T) {
	t.Parallel()
	fake := clock.NewFake(time.Now())
	m := metrics.New()
	var out lockedBuffer
	log := slog.New(slog.NewTextHandler(&out, nil))
	l := &lane{cfg: Config{Clock: fake, Metrics: m, Logger: log}, log: log, scheds: make(map[string]*scheduler)}
	s := newScheduler(l, "stuck")
	s.mu.Lock()
	s.queue = []delivery{{seq: 1}}
	s.syncLocked() // held: busy, as the lane's own paths mark it
	s.mu.Unlock()
	l.scheds[s.id] = s

	ctx, cancel := context.WithCancel(context.Background())
	var wg conc.WaitGroup
	wg.Go(func() { l.watchStalls(ctx) })
	defer func() {
		cancel()
		wg.Wait()
	}()
	// tick moves the clock by a look of the watch, once it waits for it,
	// and returns once it has looked.
	tick := func(n int) {
		for range n {
			testutil.Eventually(t, func() bool { return fake.Waiters() == 1 }, "the watch does not wait for its next look")
			fake.Advance(stallCheckEvery)
		}
		testutil.Eventually(t, func() bool { return fake.Waiters() == 1 }, "the watch does not wait for its next look")
	}
	stalls := func() int {
		fams, err := m.Registry.Gather()
		require.NoError(t, err)
		for _, f := range fams {
			if f.GetName() == "relay_lane_stalls_total" {
				return int(f.GetMetric()[0].GetCounter().GetValue())
			}
		}
		t.Fatal("no relay_lane_stalls_total")
		return 0
	}
	looks := int(2 * stallAfter / stallCheckEvery)

	l.waiting.Add(1) // its subscriber waits for a token
	tick(looks)
	require.Zero(t, stalls(), "a wait for a token is not a stall")
	l.waiting.Add(-1)

	tick(looks)
	require.Equal(t, 1, stalls(), "one stall, reported once")
	logged := out.String()
	require.Equal(t, 1, strings.Count(logged, "lane stalled"), logged)
	require.Contains(t, logged, "stuck: held=1 in_flight=0 running=false")
	require.Contains(t, logged, "goroutine ")

	l.begin() // a request: the lane moves again
	tick(1)
	l.end()
	tick(looks)
	require.Equal(t, 2, stalls(), "a stall after the lane moved again is another")
}
