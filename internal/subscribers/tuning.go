package subscribers

import "time"

// The tuning of the live view ([Live]), in one table: how it folds a burst
// of writes, and when it decides that its watch of the bucket has fallen
// behind for good. None of them costs anything while the view is current:
// the timers run only while it is behind the bucket, while a snapshot of
// changes folded is pending, or while a watch that could not be started
// waits to be tried again.
const (
	// maxBatch bounds how many queued changes are folded before the watch
	// goroutine looks at its timers again.
	maxBatch = 1024
	// publishGap is the least time between two snapshots while more
	// changes are on their way (the watch says how many): a snapshot
	// copies every subscriber, so at 100,000 of them one per batch would
	// cost more than the changes it folds. A view that has caught up
	// publishes at once, and so does one that has folded the revision a
	// [Live.Sync] waits for: the fan-out's wait is bounded, the gap not.
	publishGap = 250 * time.Millisecond
	// publishCostShare keeps the snapshots of a long burst to about
	// 1/publishCostShare of the watch goroutine's time: the gap between
	// two grows to publishCostShare times what the last one cost to build.
	publishCostShare = 8
	// checkEvery is how often, while the view is behind, it checks that
	// its watch still makes progress.
	checkEvery = time.Second
	// resyncAfter is how long the view may stay behind with nothing
	// arriving from its watch before it watches again from the last
	// revision it holds: a watch that dropped messages (a slow consumer)
	// or whose consumer is gone delivers nothing more, and nats.go's own
	// recovery waits for a heartbeat it may never get.
	resyncAfter = 3 * time.Second
	// resyncRetry is the first wait before a watch that could not be
	// started (during a NATS outage, say) is tried again; each failure
	// doubles it, up to resyncRetryMax.
	resyncRetry    = time.Second
	resyncRetryMax = 30 * time.Second
	// BehindTolerance is how long the view may be behind the bucket before
	// the relay says so: /readyz answers 503 and one warning is logged
	// ([Live.Lagging]). A burst of writes puts it behind for a moment; the
	// fan-out holds the events meanwhile (see package fanout).
	BehindTolerance = 5 * time.Second
	// removedTimeout bounds the read of [Store.Removed]: the lanes ask it
	// with a context that does not end, and a reply lost on the way would
	// hold that lookup, and every later one of the same id, for ever.
	removedTimeout = 5 * time.Second
)
