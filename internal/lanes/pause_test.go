package lanes_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/clock"
	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/internal/testutil"
)

// TestOperatorsPauseHoldsWithoutARequest: a subscriber paused by an operator
// gets no request while paused, its deliveries wait in overflow, and a
// pause with an end is over by itself: the lanes' sweep finds the backlog
// and delivers it, with no change of the subscriber to wake them (in relay
// run the janitor's rewrite wakes them at once). A resumed subscriber's
// backlog is delivered too.
func TestOperatorsPauseHoldsWithoutARequest(t *testing.T) {
	t.Parallel()
	const queued = 50
	b := setup(t)
	until := time.Now().Add(time.Second)
	timed := b.put(t, subscribers.Subscriber{ID: "timed", Paused: true, PausedUntil: until})
	held := b.put(t, subscribers.Subscriber{ID: "held", Paused: true})
	b.enqueue(t, timed, 4, queued)
	b.enqueue(t, held, 4, queued)
	b.flush(t)
	b.startLanes(t, 4)

	testutil.Eventually(t, func() bool { return b.overflowed(t, "held") == queued },
		"%d of %d in overflow", b.overflowed(t, "held"), queued)
	testutil.Eventually(t, func() bool { return b.arr.count("timed") == queued },
		"%d of %d delivered after the pause ended", b.arr.count("timed"), queued)
	for _, at := range b.arr.times("timed") {
		require.False(t, at.Before(until), "a request at %v, before the pause ended at %v", at, until)
	}
	require.Zero(t, b.arr.count("held"), "a pause without an end holds until resume")

	_, err := b.store.Resume(testutil.Context(t), "held")
	require.NoError(t, err)
	testutil.Eventually(t, func() bool { return b.arr.count("held") == queued },
		"%d of %d delivered after resume", b.arr.count("held"), queued)
	b.waitSettled(t)
}

// TestOperatorsHourLongPauseEndsByTheLanesClock crosses an operator's pause
// of an hour on the lanes' injected clock: while the clock stands inside the
// pause, everything of the subscriber waits in overflow and no request is
// made; once the clock passes its end, the sweep (which runs on the same
// clock) finds the backlog and all of it is delivered, without a change of
// the subscriber to wake the lanes.
func TestOperatorsHourLongPauseEndsByTheLanesClock(t *testing.T) {
	t.Parallel()
	const queued = 20
	b := setup(t)
	fake := clock.NewFake(time.Now())
	b.clock = fake
	later := b.put(t, subscribers.Subscriber{ID: "later", Paused: true, PausedUntil: fake.Now().Add(time.Hour)})
	b.enqueue(t, later, 4, queued)
	b.flush(t)
	b.startLanes(t, 4)

	testutil.Eventually(t, func() bool { return b.overflowed(t, "later") == queued },
		"%d of %d in overflow", b.overflowed(t, "later"), queued)
	require.Zero(t, b.arr.count("later"), "a request inside the pause")

	fake.Advance(time.Hour)
	// Each look moves the clock by a sweep's interval, so that the sweep
	// and the loops' waits run as they would in that time.
	testutil.Eventually(t, func() bool {
		fake.Advance(2 * time.Second)
		return b.arr.count("later") == queued
	}, "%d of %d delivered after the pause ended", b.arr.count("later"), queued)
	b.waitSettled(t)
}
