package ratelimit_test

import (
	"bytes"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/internal/clock"
	"github.com/relay-dev/relay/internal/ratelimit"
	"github.com/relay-dev/relay/internal/testutil"
)

// TestSharedKeepsTheRateOverASlowServer: a relay whose compare-and-sets
// take 60 ms (30 ms each way) still takes tokens at its subscriber's whole
// rate with a backlog, since no refill is lost to a lease's round trip;
// at 240 ms it takes one lease per round trip. Either way it takes no more
// than burst + rate × T + one lease. What the host gave is measured in the
// same run: a writer on the same proxied server, one compare-and-set after
// another, each worth a lease.
func TestSharedKeepsTheRateOverASlowServer(t *testing.T) {
	t.Parallel()
	for _, delay := range []time.Duration{30 * time.Millisecond, 120 * time.Millisecond} {
		t.Run(delay.String(), func(t *testing.T) {
			t.Parallel()
			const rate, burst = 100, 100
			span := 3 * time.Second
			n := testutil.StartRelayNATS(t)
			proxy := testutil.StartLatencyProxy(t, strings.TrimPrefix(n.URL, "nats://"), delay)
			js, err := jetstream.New(testutil.Connect(t, proxy.URL()))
			if err != nil {
				t.Fatal(err)
			}
			s := newShared(t, via(t, n, proxy), clock.Real, ratelimit.Options{CalibrateEvery: 30 * time.Second})
			id := subID(t)
			l := ratelimit.Limit{Rate: rate, Burst: burst}
			ctx := testutil.Context(t)

			trips := make(chan int, 1)
			kv, err := js.KeyValue(ctx, "relay_ratelimit")
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			go func() {
				rev, err := kv.Create(ctx, "trips", []byte("0"))
				done := 0
				for err == nil && time.Since(start) < span {
					if rev, err = kv.Update(ctx, "trips", []byte("0"), rev); err == nil {
						done++
					}
				}
				trips <- done
			}()

			var granted []time.Time
			for time.Since(start) < span {
				d, err := s.Reserve(ctx, id, l)
				if err != nil {
					t.Fatal(err)
				}
				if d.Verdict == ratelimit.Go {
					granted = append(granted, time.Now())
					continue
				}
				time.Sleep(d.Wait)
			}
			lease := ratelimit.LeaseSize(rate, l)
			done := <-trips
			elapsed := granted[len(granted)-1].Sub(granted[0]).Seconds()
			allowed := min(burst+rate*elapsed, float64(lease*done))
			t.Logf("%d granted in %.2fs; %d round trips of %v each allow %.0f",
				len(granted), elapsed, done, (span / time.Duration(max(done, 1))).Round(time.Millisecond), allowed)
			// Three quarters: the limiter sleeps between its round trips
			// (the wait each answer gives), which a loaded host lengthens,
			// where the writer does not. Beside a second suite, a 120 ms
			// run took 10 leases to the writer's 12 round trips (0.83).
			if float64(len(granted)) < 0.75*allowed {
				t.Fatalf("%d granted, less than 75%% of the %.0f the rate and the round trips allow", len(granted), allowed)
			}
			for i := range granted {
				for j := i; j < len(granted); j++ {
					window := granted[j].Sub(granted[i]).Seconds()
					if over := float64(j-i+1) - (float64(burst+lease) + rate*window); over > 0 {
						t.Fatalf("%d granted in %.3fs: %.1f over burst + rate × T + a lease", j-i+1, window, over)
					}
				}
			}
		})
	}
}

// TestSharedCapHoldsBesideASlowRelay: a relay whose compare-and-sets take
// 240 ms (its leases come after their window, and are spent late) beside
// one whose take a millisecond: together they stay within
// burst + rate × T + one lease.
func TestSharedCapHoldsBesideASlowRelay(t *testing.T) {
	t.Parallel()
	const rate, burst = 100, 20
	n := testutil.StartRelayNATS(t)
	proxy := testutil.StartLatencyProxy(t, strings.TrimPrefix(n.URL, "nats://"), 120*time.Millisecond)
	opts := ratelimit.Options{CalibrateEvery: 30 * time.Second}
	slow := newShared(t, via(t, n, proxy), clock.Real, opts)
	fast := newShared(t, n, clock.Real, opts)
	id := subID(t)
	l := ratelimit.Limit{Rate: rate, Burst: burst}
	ctx := testutil.Context(t)

	var mu sync.Mutex
	var granted []time.Time
	var each [2]int
	span := 4 * time.Second
	start := time.Now()
	var wg sync.WaitGroup
	for i, s := range []*ratelimit.Shared{slow, fast} {
		wg.Go(func() {
			for time.Since(start) < span {
				d, err := s.Reserve(ctx, id, l)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Verdict == ratelimit.Go {
					mu.Lock()
					granted = append(granted, time.Now())
					each[i]++
					mu.Unlock()
					continue
				}
				time.Sleep(d.Wait)
			}
		})
	}
	wg.Wait()
	slices.SortFunc(granted, func(a, b time.Time) int { return a.Compare(b) })
	lease := ratelimit.LeaseSize(rate, l)
	t.Logf("%d granted in %v: %d by the slow relay, %d by the fast one", len(granted), span, each[0], each[1])
	worst := 0.0
	for i := range granted {
		for j := i; j < len(granted); j++ {
			window := granted[j].Sub(granted[i]).Seconds()
			worst = max(worst, float64(j-i+1)-(float64(burst+lease)+rate*window))
		}
	}
	if worst > 0 {
		t.Fatalf("a window held %.1f more than burst + rate × T + a lease", worst)
	}
}

// TestSharedLateLeaseYieldsToAPauseItsWatchHasNotShown: a relay's lease
// is answered after its window (a starved host, a slow link), and another
// relay stored a pause between that lease's write and its answer, while
// the first relay's watch is further behind still. With none of the
// subscriber's updates shown, the late lease sends nothing: it waits for
// the watch to show its own write, and its window closes first, and the
// next compare-and-set finds the pause. With its own write shown and the
// pause not (the bound: a relay learns of a pause through its watch), it
// sends at most what is left of the lease, then holds. A proxy holds back
// the answer for longer than a lease, and the watch's updates until the
// end.
func TestSharedLateLeaseYieldsToAPauseItsWatchHasNotShown(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		held   func(payload []byte) bool
		allows int // requests the late lease may still let go
	}{
		"every update held": {func([]byte) bool { return true }, 0},
		"the pause held": {func(payload []byte) bool { return bytes.Contains(payload, []byte(`"paused_until"`)) },
			ratelimit.LeaseSize(100, ratelimit.Limit{Rate: 100, Burst: 100})},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			lateLeaseBehindAPause(t, tc.held, tc.allows)
		})
	}
}

// lateLeaseBehindAPause runs TestSharedLateLeaseYieldsToAPauseItsWatchHasNotShown
// with the watch's updates of the subscriber that held accepts held back,
// and allows that many requests let go after the pause was stored.
func lateLeaseBehindAPause(t *testing.T, held func(payload []byte) bool, allows int) {
	n := testutil.StartRelayNATS(t)
	gate := testutil.StartGateProxy(t, strings.TrimPrefix(n.URL, "nats://"))
	opts := ratelimit.Options{CalibrateEvery: 30 * time.Second}
	late := newShared(t, via(t, n, gate), clock.Real, opts)
	other := newShared(t, n, clock.Real, opts)
	id := subID(t)
	l := ratelimit.Limit{Rate: 100, Burst: 100}
	ctx := testutil.Context(t)
	kv, err := n.JS.KeyValue(ctx, "relay_ratelimit")
	if err != nil {
		t.Fatal(err)
	}

	gate.Hold("answers", func(frame []byte) bool { return bytes.Contains(frame, []byte(`"stream":"KV_relay_ratelimit"`)) })
	gate.Hold("watch", func(frame []byte) bool {
		line, payload, _ := bytes.Cut(frame, []byte("\n"))
		fields := bytes.Fields(line)
		return len(fields) > 1 && string(fields[1]) == "$KV.relay_ratelimit."+id && held(payload)
	})
	t.Cleanup(func() { gate.Release("answers"); gate.Release("watch") })
	first := make(chan ratelimit.Decision, 1)
	go func() {
		d, err := late.Reserve(ctx, id, l)
		if err != nil {
			t.Error(err)
		}
		first <- d
	}()
	var written time.Time
	testutil.Eventually(t, func() bool {
		_, err := kv.Get(ctx, id)
		written = time.Now()
		return err == nil
	}, "the late relay's lease was not written")
	// A pause far longer than the test: no request within it is due.
	observe(t, other, id, l, ratelimit.Result{PauseFor: time.Hour})
	// The lease was asked for before its write was seen stored: its
	// answer, let go a lease after that, comes after its window.
	time.Sleep(time.Until(written.Add(ratelimit.LeaseTTL + 10*time.Millisecond)))
	gate.Release("answers")

	d := <-first
	sent := 0
	for asked := 1; d.Verdict != ratelimit.Paused; asked++ {
		if d.Verdict == ratelimit.Go {
			if sent++; sent > allows {
				t.Errorf("decision %d: request %d let go by a lease a pause had overtaken (at most %d)", asked, sent, allows)
			}
		}
		if asked > 10_000 {
			t.Fatalf("the late relay never saw the pause: %+v", d)
		}
		time.Sleep(d.Wait)
		d = reserve(t, late, id, l)
	}
}

// TestSharedUnlimitedStopsWhenItsWatchIsNotKnownFresh: an unlimited
// subscriber asks the bucket nothing, so a relay whose watch is held back
// would renew its leases for ever while another relay has paused the
// subscriber. Its leases are renewed only while a check proves the watch
// fresh: past FreshFor and a lease after the pause was stored it sends
// nothing, and once its watch shows the pause it holds for it. The clock
// is the test's; the watch's updates of the subscriber are held back by a
// proxy.
func TestSharedUnlimitedStopsWhenItsWatchIsNotKnownFresh(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	gate := testutil.StartGateProxy(t, strings.TrimPrefix(n.URL, "nats://"))
	fake := newFake()
	behind := newShared(t, via(t, n, gate), fake, ratelimit.Options{})
	other := newShared(t, n, fake, ratelimit.Options{})
	id := subID(t)
	l := ratelimit.Limit{}
	wantGo(t, "before the pause", reserve(t, behind, id, l))

	gate.Hold("watch", func(frame []byte) bool {
		line, _, _ := bytes.Cut(frame, []byte("\n"))
		fields := bytes.Fields(line)
		return len(fields) > 1 && string(fields[1]) == "$KV.relay_ratelimit."+id
	})
	released := false
	release := func() {
		if !released {
			released = true
			gate.Release("watch")
		}
	}
	t.Cleanup(release)
	observe(t, other, id, l, ratelimit.Result{PauseFor: time.Hour})

	// Step through the bound in quarters of a lease: the relay that cannot
	// see the pause may send until then, never after.
	bound := ratelimit.FreshFor + ratelimit.LeaseTTL
	for at := time.Duration(0); at <= bound+time.Second; at += ratelimit.LeaseTTL / 4 {
		d := reserve(t, behind, id, l)
		if d.Verdict == ratelimit.Go && at > bound {
			t.Fatalf("%v after the pause was stored, with the watch held back: a request let go", at)
		}
		fake.Advance(ratelimit.LeaseTTL / 4)
	}
	release()
	testutil.Eventually(t, func() bool {
		d := reserve(t, behind, id, l)
		if d.Verdict == ratelimit.Go {
			t.Fatal("a request let go once the watch showed the pause")
		}
		return d.Verdict == ratelimit.Paused
	}, "the relay never held for the pause its watch showed")
}

// via is n as a relay reaches it through proxy.
func via(t *testing.T, n *testutil.NATS, proxy *testutil.LatencyProxy) *testutil.NATS {
	t.Helper()
	js, err := jetstream.New(testutil.Connect(t, proxy.URL()))
	if err != nil {
		t.Fatal(err)
	}
	return &testutil.NATS{Server: n.Server, URL: proxy.URL(), JS: js}
}

// TestPauseLastsItsWholeRetryAfterOnEveryRelay: a relay whose estimate of
// the server's clock is late (its calibration's answer took 200 ms to come
// back) stores a Retry-After pause that lasts the whole Retry-After on a
// relay whose estimate is close: the pause is stored from the latest the
// server's time can be, not from the estimate. Stored from the estimate, it
// ended about 100 ms early there.
func TestPauseLastsItsWholeRetryAfterOnEveryRelay(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	proxy := testutil.StartLatencyProxy(t, strings.TrimPrefix(n.URL, "nats://"), 100*time.Millisecond)
	late := newShared(t, via(t, n, proxy), clock.Real, ratelimit.Options{CalibrateEvery: time.Hour})
	near := newShared(t, n, clock.Real, ratelimit.Options{CalibrateEvery: time.Hour})
	id := subID(t)
	l := ratelimit.Limit{Rate: 100, Burst: 10}
	reserve(t, near, id, l) // the entry exists
	// The late relay knows the entry already, as a relay sending to the
	// subscriber does: its pause is written without a read first.
	testutil.Eventually(t, func() bool { return reserve(t, late, id, l).Verdict == ratelimit.Go },
		"the late relay never got a token")

	answered := time.Now() // the 429 came back no earlier than this
	observe(t, late, id, l, ratelimit.Result{PauseFor: 2 * time.Second, Throttled: true})
	var d ratelimit.Decision
	testutil.Eventually(t, func() bool {
		d = reserve(t, near, id, l)
		return d.Verdict == ratelimit.Paused
	}, "the pause never reached the other relay")
	ends := time.Now().Add(d.Wait)
	t.Logf("the other relay holds until %v after the 429's answer", ends.Sub(answered).Round(time.Millisecond))
	if want := answered.Add(2 * time.Second); ends.Before(want) {
		t.Fatalf("the pause ends %v early on the other relay", want.Sub(ends).Round(time.Millisecond))
	}
}
