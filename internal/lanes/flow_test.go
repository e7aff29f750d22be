package lanes_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/deadletter"
	"github.com/relay-dev/relay/internal/ratelimit"
	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

// TestCapHoldsAcrossRelays runs one and then three relays against one
// subscriber with a backlog: in every window of length T, the requests that
// reach the subscriber from all relays together stay within
// burst + rate × T + one lease (plus one for the arrival that closes a
// window, measured at the receiver), and the backlog drains near the rate.
// The receiver shares the process with the relays: a window's arrivals are
// judged against the time the host gave it (see checkCapWithSlack).
func TestCapHoldsAcrossRelays(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		relays  int
		cluster bool
	}{{1, false}, {3, false}, {3, true}} {
		name := fmt.Sprintf("%d relays", tt.relays)
		if tt.cluster {
			name += " on a 3-node cluster"
		}
		relays := tt.relays
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			const rate, burst, backlog = 50, 5, 150
			start := setup
			if tt.cluster {
				start = setupCluster
			}
			b := start(t)
			sub := b.put(t, subscribers.Subscriber{ID: "capped", Rate: rate, Burst: burst})
			b.enqueue(t, sub, 4, backlog)
			b.flush(t)
			stalls := testutil.WatchStalls(t)
			for range relays {
				b.startLanes(t, 4)
			}
			b.waitSettled(t)
			if n := b.arr.count("capped"); n != backlog {
				t.Fatalf("%d requests, want %d", n, backlog)
			}
			lease := ratelimit.LeaseSize(rate, ratelimit.Limit{Rate: rate, Burst: burst})
			checkCapWithSlack(t, b.arr, stalls, "capped", rate, burst, lease)
			at := b.arr.times("capped")
			span := at[len(at)-1].Sub(at[0]).Seconds()
			achieved := float64(backlog-burst) / span
			t.Logf("%d relays: %d requests in %.2fs after the burst: %.1f/s of %d/s (%.0f%%)",
				relays, backlog-burst, span, achieved, rate, 100*achieved/rate)
		})
	}
}

// checkCapWithSlack is checkCap with a lease of slack, as docs/delivery-rules.md allows.
// The arrivals are stamped by a receiver in the test's process: a stall of
// the process holds back the first arrival of a window and lets the others
// come bunched after it, so a window is judged as long as it was plus the
// longest stall the process had in it, or in the second before it.
func checkCapWithSlack(t *testing.T, arr *arrivals, stalls *testutil.Stalls, id string, rate float64, burst, lease int) {
	t.Helper()
	at := arr.times(id)
	worst, worstRaw := 0.0, 0.0
	var worstLate, rawLate time.Duration
	for i := range at {
		for j := i; j < len(at); j++ {
			window := at[j].Sub(at[i]).Seconds()
			raw := float64(j-i+1) - (float64(burst+lease) + rate*window + 1)
			if raw <= 0 {
				continue
			}
			late := stalls.Late(at[i].Add(-time.Second), at[j])
			if raw > worstRaw {
				worstRaw, rawLate = raw, late
			}
			if over := raw - rate*late.Seconds(); over > worst {
				worst, worstLate = over, late
			}
		}
	}
	if worstRaw > 0 {
		t.Logf("%s: a window held %.1f requests more than burst + rate × T + a lease as stamped; the process ran up to %v late in it",
			id, worstRaw, rawLate.Round(time.Millisecond))
	}
	if worst > 0 {
		t.Fatalf("%s: a window held %.1f requests more than burst + rate × T + a lease, counting the %v the process ran late in it", id, worst, worstLate.Round(time.Millisecond))
	}
}

// TestRetryAfterPausesTheSubscriberOnEveryRelay: one 429 with Retry-After: 2
// stops every relay's traffic to that subscriber for 2 s (requests already on
// the wire, and what relays send before they learn of it within a lease,
// excepted), while another subscriber on the same relays goes on at full
// speed. The held messages are neither sent twice nor charged an attempt.
func TestRetryAfterPausesTheSubscriberOnEveryRelay(t *testing.T) {
	t.Parallel()
	const backlog = 150
	b := setup(t)
	paused := b.put(t, subscribers.Subscriber{ID: "paused", Rate: 100, Burst: 10, MaxAttempts: 2, MaxInFlight: 4})
	other := b.put(t, subscribers.Subscriber{ID: "other", MaxInFlight: 4})
	var pausedAt atomic.Int64
	b.arr.answer("paused", func(n int, w http.ResponseWriter) {
		if n == 30 {
			pausedAt.Store(time.Now().UnixNano())
			w.Header().Set("Retry-After", "2")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	// The other subscriber is slowed by its receiver, so that it is still
	// busy during the whole pause.
	b.arr.answer("other", func(n int, w http.ResponseWriter) {
		time.Sleep(20 * time.Millisecond)
		w.WriteHeader(http.StatusOK)
	})
	b.enqueue(t, paused, 4, backlog)
	b.enqueue(t, other, 4, 400)
	b.flush(t)
	stored := watchPauseStored(t, b, "paused")
	stalls := testutil.WatchStalls(t)
	for range 3 {
		b.startLanes(t, 4)
	}
	// Every event delivered (the one answered 429 twice), then nothing more.
	testutil.Eventually(t, func() bool { return b.arr.count("paused") > backlog && b.arr.count("other") >= 400 },
		"%d requests for the paused subscriber's %d events, %d of 400 for the other", b.arr.count("paused"), backlog, b.arr.count("other"))
	b.waitSettled(t)

	start := time.Unix(0, pausedAt.Load())
	end := start.Add(2 * time.Second)
	// Requests that were on the wire, or sent on a lease taken before the
	// pause was stored, may come within one lease of its store: the relay
	// that drew the 429 stores the pause by compare-and-set (after any race
	// it loses to a lease of another relay), and the others learn of it
	// through their watch. On a loaded machine the store itself can come
	// well after the 429, so the bound runs from it.
	storedAt := stored()
	t.Logf("the pause was stored %v after the 429", storedAt.Sub(start).Round(time.Millisecond))
	// A process the host did not run for a while (the relays and the
	// receiver share it) sends what it decided before the pause, and
	// receives it, that much later: the bound counts what the host gave.
	late := stalls.Late(start, storedAt.Add(ratelimit.LeaseTTL+50*time.Millisecond))
	learned := storedAt.Add(ratelimit.LeaseTTL + 50*time.Millisecond + late)
	var during, otherDuring int
	var offsets []string
	for _, at := range b.arr.times("paused") {
		if at.After(learned) && at.Before(end) {
			during++
			offsets = append(offsets, at.Sub(storedAt).Round(time.Millisecond).String())
		}
	}
	if during > 0 {
		t.Logf("the process ran up to %v late around the pause; requests within it at %v after its store", late.Round(time.Millisecond), offsets)
	}
	for _, at := range b.arr.times("other") {
		if at.After(start) && at.Before(end) {
			otherDuring++
		}
	}
	t.Logf("during the 2 s pause: %d requests to the paused subscriber, %d to the other", during, otherDuring)
	if during != 0 {
		t.Fatalf("%d requests reached the paused subscriber during its pause", during)
	}
	if otherDuring == 0 {
		t.Fatal("the other subscriber got nothing while its neighbour was paused")
	}
	if n := b.arr.count("paused"); n != backlog+1 {
		seen := map[string]int{}
		for _, id := range b.arr.webhookIDs("paused") {
			seen[id]++
		}
		var missing, twice []string
		for i := range backlog {
			id := fmt.Sprintf("paused-%d", i)
			switch seen[id] {
			case 0:
				missing = append(missing, id)
			case 1:
			default:
				twice = append(twice, id)
			}
		}
		t.Fatalf("%d requests for %d events and one 429 (missing %v, more than once %v)", n, backlog, missing, twice)
	}
	if dead, _ := deadletter.List(testutil.Context(t), b.n.JS, deadletter.Filter{}, 0); len(dead) != 0 {
		t.Fatalf("held messages were charged attempts: %+v", dead)
	}
}

// TestHangingSubscriberNeverStallsItsLane: a subscriber whose endpoint hangs
// has a backlog far larger than its lane's MaxAckPending, queued ahead of a
// lane-mate's few messages on the one lane they share. Its messages beyond
// what it may hold are parked, not NAKed, so they free their slots and the
// lane-mate's messages get through.
func TestHangingSubscriberNeverStallsItsLane(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.maxAckPending = 100
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) })
	stuck := b.put(t, subscribers.Subscriber{ID: "stuck", MaxInFlight: 2, Timeout: subscribers.Duration(time.Second)})
	mate := b.put(t, subscribers.Subscriber{ID: "mate"})
	b.arr.answer("stuck", func(_ int, w http.ResponseWriter) { <-hang })
	b.enqueue(t, stuck, 1, 1000)
	b.enqueue(t, mate, 1, 10)
	b.flush(t)
	b.startLanes(t, 1)
	testutil.Eventually(t, func() bool { return b.arr.count("mate") == 10 },
		"the lane-mate of a hanging subscriber got %d of 10", b.arr.count("mate"))
}

// TestLongOutageDeadLettersNothing runs an outage of an hour scaled down a
// thousand times (retry-base 5 ms, retry-max 3.6 s, breaker cool-downs from
// 5 ms to 0.9 s, the endpoint down for 3.6 s) with the default 12 attempts:
// the open breaker holds the queue without spending attempts, so when the
// endpoint comes back every event is delivered and none is dead-lettered.
func TestLongOutageDeadLettersNothing(t *testing.T) {
	t.Parallel()
	const events = 40
	b := setup(t)
	b.limits = ratelimit.Options{Cooldown: 5 * time.Millisecond, MaxCooldown: 900 * time.Millisecond}
	sub := b.put(t, subscribers.Subscriber{ID: "down", RetryBase: subscribers.Duration(5 * time.Millisecond),
		RetryMax: subscribers.Duration(3600 * time.Millisecond)})
	var up atomic.Bool
	var during, ok atomic.Int64
	b.arr.answer("down", func(_ int, w http.ResponseWriter) {
		if !up.Load() {
			during.Add(1)
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		ok.Add(1)
		w.WriteHeader(http.StatusOK)
	})
	b.enqueue(t, sub, 4, events)
	b.flush(t)
	b.startLanes(t, 4)
	<-time.After(3600 * time.Millisecond) // the outage itself
	up.Store(true)
	// Settled with no dead letter: every event was acked, which only a 2xx
	// does.
	b.waitSettled(t)
	t.Logf("%d requests during the outage for %d events", during.Load(), events)
	if dead, _ := deadletter.List(testutil.Context(t), b.n.JS, deadletter.Filter{}, 0); len(dead) != 0 {
		t.Fatalf("%d events dead-lettered by an outage shorter than the retry schedule", len(dead))
	}
	if ok.Load() != events {
		t.Fatalf("%d deliveries after the outage for %d events", ok.Load(), events)
	}
}

// watchPauseStored follows the subscriber's entry in the rate-limit bucket
// from now on, and returns what reports the server's time of the first
// entry that holds a pause (failing the test if none came).
func watchPauseStored(t *testing.T, b *bundle, id string) func() time.Time {
	t.Helper()
	ctx := testutil.Context(t)
	kv, err := b.n.JS.KeyValue(ctx, streams.RateLimitBucket)
	require.NoError(t, err)
	w, err := kv.Watch(ctx, id, jetstream.UpdatesOnly())
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Stop() })
	var at atomic.Int64
	go func() {
		for e := range w.Updates() {
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			var st ratelimit.State
			if json.Unmarshal(e.Value(), &st) == nil && st.PausedUntil.After(e.Created()) {
				at.CompareAndSwap(0, e.Created().UnixNano())
			}
		}
	}()
	return func() time.Time {
		t.Helper()
		testutil.Eventually(t, func() bool { return at.Load() != 0 }, "no pause stored for %s", id)
		return time.Unix(0, at.Load())
	}
}
