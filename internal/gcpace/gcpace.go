// Package gcpace sets how often the Go garbage collector runs in relay run.
//
// With Go's default (GOGC=100) a collection starts when the heap has grown by
// as much as was live after the last one. relay's live heap is small (tens
// of MB: the subscriber view, the lanes' queues, the NATS buffers) while
// every delivery leaves a few KB of garbage, so at thousands of deliveries
// a second it collects dozens of times a second, each collection with its
// pauses, for a heap that would cost little to let grow. The pacer gives
// the heap a floor of headroom instead: after each collection it sets the
// next one to come after max(live, Headroom) of new allocation. A small heap
// grows by at most Headroom between collections (far fewer of them, the
// same work each); a heap of Headroom or more is paced exactly as Go's
// default paces it. So relay's memory grows by at most Headroom over Go's
// default, and not at all once its live heap is that large.
//
// The percent is set after every collection, from the heap that collection
// found live, so a heap that grows fast (10,000 subscribers loaded at once)
// never runs on a percent set for a smaller one.
//
// An operator's GOGC or GOMEMLIMIT is left alone: the pacer only runs when
// neither is set.
package gcpace

import (
	"context"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
)

// Headroom is the least a heap may grow between two collections: what relay
// adds, at most, to its memory over Go's default pacing.
const Headroom = 64 << 20

// maxPercent bounds the GC percent of a nearly empty heap, whose headroom is
// then under Headroom (a heap of 4 MB grows by 40 MB).
const maxPercent = 1000

// LiveMetric is the runtime metric of the heap the last collection found
// live.
const LiveMetric = "/gc/heap/live:bytes"

// Percent is the GC percent that gives a heap of live bytes its next
// collection after max(live, headroom) bytes of new allocation: 100 for a
// heap of headroom or more, up to maxPercent for a small one.
func Percent(live, headroom uint64) int {
	if live == 0 {
		return maxPercent
	}
	if live >= headroom {
		return 100
	}
	return int(min(headroom*100/live, maxPercent))
}

// Wanted reports whether the pacer should run: only when the operator set
// neither GOGC nor GOMEMLIMIT, whose choice wins.
func Wanted(getenv func(string) string) bool {
	return getenv("GOGC") == "" && getenv("GOMEMLIMIT") == ""
}

// pacing is set while a Run paces the process: the percent is the
// process's, so a second Run at the same time (two relays in one test
// binary) only waits.
var pacing atomic.Bool

// sentinel is garbage whose cleanup runs after the collection that found
// it so: large enough, and with a pointer, to be an object of its own
// (cleanups of tiny objects may never run).
type sentinel struct {
	_ *byte
	_ [16]byte
}

// Run sets the GC percent after every collection until ctx ends, then
// restores the percent it found.
func Run(ctx context.Context) {
	if !pacing.CompareAndSwap(false, true) {
		<-ctx.Done()
		return
	}
	defer pacing.Store(false)
	prev := debug.SetGCPercent(100)
	defer debug.SetGCPercent(prev)
	collected := make(chan struct{}, 1)
	var arm func()
	arm = func() {
		runtime.AddCleanup(new(sentinel), func(struct{}) {
			select {
			case collected <- struct{}{}:
			default:
			}
			if ctx.Err() == nil {
				arm()
			}
		}, struct{}{})
	}
	arm()
	sample := []metrics.Sample{{Name: LiveMetric}}
	set := 100
	for {
		select {
		case <-ctx.Done():
			return
		case <-collected:
		}
		metrics.Read(sample)
		if sample[0].Value.Kind() != metrics.KindUint64 {
			continue
		}
		if p := Percent(sample[0].Value.Uint64(), Headroom); p != set {
			debug.SetGCPercent(p)
			set = p
		}
	}
}
