package ratelimit_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relay-dev/relay/internal/clock"
	"github.com/relay-dev/relay/internal/ratelimit"
	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

// newShared opens a Shared limiter on n driven by clk.
func newShared(t *testing.T, n *testutil.NATS, clk clock.Clock, opts ratelimit.Options) *ratelimit.Shared {
	t.Helper()
	opts.Clock = clk
	if opts.CalibrateEvery == 0 {
		// The fake clock is the time here: re-reading the server's would
		// pull it back to the real one.
		opts.CalibrateEvery = -1
	}
	s, err := ratelimit.NewShared(testutil.Context(t), n.JS, opts)
	if err != nil {
		t.Fatalf("NewShared: %v", err)
	}
	follow(t, s)
	return s
}

// follow runs s.Follow until the test ends, as `relay run` does.
func follow(t *testing.T, s *ratelimit.Shared) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Follow(ctx, nil)
	}()
	t.Cleanup(func() { cancel(); <-done })
	testutil.Eventually(t, s.Following, "the limiter's watch did not start")
}

// subID turns the test's name into a valid subscriber id.
func subID(t *testing.T) string {
	id := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			return r
		}
		return '_'
	}, t.Name())
	if len(id) > 64 {
		id = id[len(id)-64:]
	}
	return id
}

// entry decodes the subscriber's relay_ratelimit entry.
func entry(t *testing.T, n *testutil.NATS, id string) ratelimit.State {
	t.Helper()
	ctx := testutil.Context(t)
	kv, err := n.JS.KeyValue(ctx, streams.RateLimitBucket)
	if err != nil {
		t.Fatalf("bucket: %v", err)
	}
	e, err := kv.Get(ctx, id)
	if err != nil {
		t.Fatalf("entry %s: %v", id, err)
	}
	var st ratelimit.State
	if err := json.Unmarshal(e.Value(), &st); err != nil {
		t.Fatalf("entry %s: %q: %v", id, e.Value(), err)
	}
	return st
}

// reserve is Reserve that fails the test on an error.
func reserve(t *testing.T, s *ratelimit.Shared, id string, l ratelimit.Limit) ratelimit.Decision {
	t.Helper()
	d, err := s.Reserve(testutil.Context(t), id, l)
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	return d
}

// observe is Observe that fails the test on an error.
func observe(t *testing.T, s *ratelimit.Shared, id string, l ratelimit.Limit, r ratelimit.Result) {
	t.Helper()
	if err := s.Observe(testutil.Context(t), id, l, r); err != nil {
		t.Fatalf("Observe(%+v): %v", r, err)
	}
}

// emptied reports a decision that says the bucket is empty, as opposed to a
// Token hold after lost compare-and-sets, which asks to retry within 10 ms.
func emptied(d ratelimit.Decision) bool {
	return d.Verdict == ratelimit.Token && d.Wait >= 10*time.Millisecond
}

// drain reserves until the bucket is empty and returns the Go decisions.
// The clock stands still, so nothing is refilled meanwhile.
func drain(t *testing.T, s *ratelimit.Shared, id string, l ratelimit.Limit) (int, ratelimit.Decision) {
	t.Helper()
	gos := 0
	for {
		d := reserve(t, s, id, l)
		switch {
		case d.Verdict == ratelimit.Go:
			gos++
		case emptied(d):
			return gos, d
		case d.Verdict != ratelimit.Token:
			t.Fatalf("draining: %+v", d)
		}
		if gos > 1_000_000 {
			t.Fatalf("draining: %d Go decisions and the bucket still not empty", gos)
		}
	}
}

func near(got, want, tolerance time.Duration) bool {
	return got >= want-tolerance && got <= want+tolerance
}

// TestNewSharedWithoutBucket proves that a server without the
// relay_ratelimit bucket is reported as ErrBucket, not as a limiter that
// lets everything through.
func TestNewSharedWithoutBucket(t *testing.T) {
	t.Parallel()
	n := testutil.StartNATS(t)
	_, err := ratelimit.NewShared(testutil.Context(t), n.JS, ratelimit.Options{})
	if !errors.Is(err, ratelimit.ErrBucket) {
		t.Fatalf("NewShared without the bucket: %v, want ErrBucket", err)
	}
}

// TestSharedBurstIsTakenInLeases proves, with time standing still, that a
// subscriber gets exactly the whole leases its bucket holds and not one
// request more, then a Token hold with the wait for the next lease; and that
// each lease costs one compare-and-set.
func TestSharedBurstIsTakenInLeases(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	tests := []struct {
		rate  float64
		burst int
		gos   int // whole leases in the burst
	}{
		{0.01, 20, 20},
		{1, 1, 1},
		{10, 10, 10},
		{100, 100, 100},
		{100, 255, 250}, // 25 leases of 10; the 5 left are not a lease
		{1000, 1000, 1000},
		{5000, 5000, 5000},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("rate %v burst %d", tt.rate, tt.burst), func(t *testing.T) {
			t.Parallel()
			l := ratelimit.Limit{Rate: tt.rate, Burst: tt.burst}
			id := subID(t)
			s := newShared(t, n, clock.NewFake(time.Now()), ratelimit.Options{})
			gos, last := drain(t, s, id, l)
			lease := ratelimit.LeaseSize(tt.rate, l)
			if gos != tt.gos {
				t.Errorf("%d Go decisions from a full bucket, want %d", gos, tt.gos)
			}
			left := float64(tt.burst - tt.gos)
			if want := ratelimit.WaitFor(left, lease, tt.rate); !near(last.Wait, want, time.Millisecond) {
				t.Errorf("empty bucket: %+v, want a Token hold of %v", last, want)
			}
			if st := entry(t, n, id); st.Tokens != left {
				t.Errorf("entry holds %v tokens, want %v", st.Tokens, left)
			}
			if w := s.Stats().Writes; w != int64(tt.gos/lease) {
				t.Errorf("%d writes for %d leases of %d", w, tt.gos/lease, lease)
			}
		})
	}
}

// TestSharedWritesPerRequest proves the lease economy: at 100 requests a
// second and more, a Go decision costs at most 0.1 KV writes.
func TestSharedWritesPerRequest(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	for _, rate := range []float64{10, 100, 1000, 5000} {
		t.Run(fmt.Sprintf("rate %v", rate), func(t *testing.T) {
			t.Parallel()
			l := ratelimit.Limit{Rate: rate, Burst: 2 * int(rate)}
			s := newShared(t, n, clock.NewFake(time.Now()), ratelimit.Options{})
			gos, _ := drain(t, s, subID(t), l)
			st := s.Stats()
			per := float64(st.Writes) / float64(gos)
			t.Logf("rate %v: %d Go, %+v: %.3f writes per request", rate, gos, st, per)
			if rate >= 100 && per > 0.1 {
				t.Errorf("%.3f KV writes per request, want at most 0.1", per)
			}
			if st.Conflicts != 0 {
				t.Errorf("%d conflicts with a single relay", st.Conflicts)
			}
		})
	}
}

// TestSharedRelaysContendWithinTheBurst proves the compare-and-set: two and
// three relays (one with a host clock an hour fast, one an hour slow) taking
// tokens at once from one subscriber get together exactly the bucket's
// content, never a token twice, and a lost race is never an error.
func TestSharedRelaysContendWithinTheBurst(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	for _, tt := range []struct {
		relays int
		l      ratelimit.Limit
	}{
		{2, ratelimit.Limit{Rate: 0.01, Burst: 150}}, // a write per request
		{3, ratelimit.Limit{Rate: 0.01, Burst: 150}},
		{2, ratelimit.Limit{Rate: 100, Burst: 600}}, // leases of 10
		{3, ratelimit.Limit{Rate: 100, Burst: 600}},
	} {
		t.Run(fmt.Sprintf("%d relays rate %v", tt.relays, tt.l.Rate), func(t *testing.T) {
			t.Parallel()
			id := subID(t)
			start := time.Now()
			relays := make([]*ratelimit.Shared, tt.relays)
			for i := range relays {
				skew := time.Duration(i%3-1) * time.Hour
				relays[i] = newShared(t, n, clock.NewFake(start.Add(skew)), ratelimit.Options{})
			}
			counts := make([]int, tt.relays)
			var wg sync.WaitGroup
			errs := make(chan error, tt.relays)
			for i, s := range relays {
				wg.Go(func() {
					ctx := testutil.Context(t)
					for {
						d, err := s.Reserve(ctx, id, tt.l)
						if err != nil {
							errs <- err
							return
						}
						if d.Verdict == ratelimit.Go {
							counts[i]++
						} else if emptied(d) {
							return
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Errorf("a lost race surfaced as an error: %v", err)
			}
			total, conflicts := 0, int64(0)
			for i, s := range relays {
				total += counts[i]
				conflicts += s.Stats().Conflicts
			}
			t.Logf("%d relays: %v Go decisions, %d conflicts", tt.relays, counts, conflicts)
			if total != tt.l.Burst {
				t.Errorf("%d Go decisions in all from a bucket of %d", total, tt.l.Burst)
			}
		})
	}
}

// TestSharedKilledRelayLosesItsLease proves that a relay dropped with a
// lease in hand takes those tokens with it: the relay that goes on never
// gets them again, so the total stays within the bucket.
func TestSharedKilledRelayLosesItsLease(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	l := ratelimit.Limit{Rate: 1000, Burst: 1000}
	id := subID(t)
	fake := newFake()
	killed := newShared(t, n, fake, ratelimit.Options{})
	if d := reserve(t, killed, id, l); d.Verdict != ratelimit.Go {
		t.Fatalf("first request: %+v", d)
	}
	// killed now holds a lease of 100 with 99 unspent; it is never used again.
	survivor := newShared(t, n, fake, ratelimit.Options{})
	gos, _ := drain(t, survivor, id, l)
	lease := ratelimit.LeaseSize(l.Rate, l)
	// The fake clock stood still while the server's did not: the survivor
	// sees the real time the host took since (see skew) as time in which
	// the bucket refilled, at the rate.
	want := l.Burst - lease + 1
	refilled := int(l.Rate * (skew(fake) - crossRelay).Seconds())
	if total := 1 + gos; total < want || total > want+refilled+1 {
		t.Errorf("%d Go decisions in all, want %d (the bucket less the killed relay's unspent lease), or up to %d more refilled in the %v the host took",
			total, want, refilled+1, skew(fake)-crossRelay)
	}
}

// TestSharedUnreadableEntryStartsFull proves that an entry written by hand
// that is not relay's JSON does not stall the subscriber: it counts as a
// full bucket and is overwritten.
func TestSharedUnreadableEntryStartsFull(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	ctx := testutil.Context(t)
	id := subID(t)
	kv, err := n.JS.KeyValue(ctx, streams.RateLimitBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, id, []byte("not json")); err != nil {
		t.Fatal(err)
	}
	l := ratelimit.Limit{Rate: 10, Burst: 4}
	s := newShared(t, n, clock.NewFake(time.Now()), ratelimit.Options{})
	if gos, _ := drain(t, s, id, l); gos != 4 {
		t.Errorf("%d Go decisions after a hand-written entry, want the burst of 4", gos)
	}
	if st := entry(t, n, id); st.Tokens != 0 {
		t.Errorf("entry %+v, want an empty bucket", st)
	}
}

// capRelay is one relay in a run of the cap over time.
type capRelay struct {
	s   *ratelimit.Shared
	clk *clock.Fake
}

// runCap has the relays send to id as fast as they may over span of fake
// time: at each instant they take turns, one Reserve each, until none gets
// a Go (the relay that goes first changes after every instant with a Go);
// then every clock moves on by the shortest wait asked for (1 ms to 10 ms).
// It returns the Go decisions of each relay.
func runCap(t *testing.T, relays []capRelay, id string, l ratelimit.Limit, span time.Duration) []int {
	t.Helper()
	var clocks []*clock.Fake
	for _, r := range relays {
		if !slices.Contains(clocks, r.clk) {
			clocks = append(clocks, r.clk)
		}
	}
	counts := make([]int, len(relays))
	first := 0
	for elapsed := time.Duration(0); elapsed < span; {
		step := 10 * time.Millisecond
		before := slices.Clone(counts)
		for going := true; going; {
			going = false
			for k := range relays {
				i := (first + k) % len(relays)
				d := reserve(t, relays[i].s, id, l)
				if d.Verdict == ratelimit.Go {
					counts[i]++
					going = true
					continue
				}
				step = min(step, d.Wait)
			}
		}
		if !slices.Equal(before, counts) {
			first = (first + 1) % len(relays)
		}
		step = max(step, time.Millisecond)
		for _, c := range clocks {
			c.Advance(step)
		}
		elapsed += step
	}
	return counts
}

// checkCap fails the test if gos requests in span exceed
// burst + rate × span + one lease, and, when full is set, if the requests
// beyond the burst fall short of 95% of rate × span.
func checkCap(t *testing.T, gos int, l ratelimit.Limit, span time.Duration, full bool) {
	t.Helper()
	lease := ratelimit.LeaseSize(l.Rate, l)
	budget := l.Rate * span.Seconds()
	limit := float64(l.Burst) + budget + float64(lease)
	sustained := float64(gos - l.Burst)
	t.Logf("rate %v burst %d over %v: %d Go, cap %.0f (%.1f%% of the cap); beyond the burst %.1f%% of rate × T",
		l.Rate, l.Burst, span, gos, limit, 100*float64(gos)/limit, 100*sustained/budget)
	if float64(gos) > limit {
		t.Errorf("%d requests in %v, more than burst + rate × T + a lease = %.0f", gos, span, limit)
	}
	if full && sustained < 0.95*budget {
		t.Errorf("%.0f requests beyond the burst in %v, less than 95%% of rate × T = %.0f", sustained, span, budget)
	}
}

// TestSharedCapOverTime proves the rate rule for one relay: over 10 s of
// fake time with a backlog, at most burst + rate × T + one lease requests
// go, and beyond the burst at least 95% of rate × T; a lease costs one
// write, at most 0.1 a request from 100/s on.
func TestSharedCapOverTime(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	for _, rate := range []float64{10, 100, 1000} {
		t.Run(fmt.Sprintf("rate %v", rate), func(t *testing.T) {
			t.Parallel()
			l := ratelimit.Limit{Rate: rate, Burst: int(rate)}
			fake := clock.NewFake(time.Now())
			s := newShared(t, n, fake, ratelimit.Options{})
			gos := runCap(t, []capRelay{{s, fake}}, subID(t), l, 10*time.Second)
			checkCap(t, gos[0], l, 10*time.Second, true)
			st := s.Stats()
			if per := float64(st.Writes) / float64(gos[0]); rate >= 100 && per > 0.1 {
				t.Errorf("%.3f KV writes per request, want at most 0.1", per)
			}
		})
	}
}

// TestSharedCapAcrossRelaysOverTime proves the rate rule summed over two
// relays sharing a clock and three relays with their own clocks (skewed by
// an hour either way) advanced together: the sum stays within the cap and
// lost races never surface as errors.
func TestSharedCapAcrossRelaysOverTime(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	const span = 10 * time.Second
	l := ratelimit.Limit{Rate: 100, Burst: 100}
	t.Run("two relays one clock", func(t *testing.T) {
		t.Parallel()
		fake := clock.NewFake(time.Now())
		relays := []capRelay{
			{newShared(t, n, fake, ratelimit.Options{}), fake},
			{newShared(t, n, fake, ratelimit.Options{}), fake},
		}
		gos := runCap(t, relays, subID(t), l, span)
		t.Logf("per relay: %v", gos)
		checkCap(t, gos[0]+gos[1], l, span, true)
	})
	t.Run("three relays skewed clocks", func(t *testing.T) {
		t.Parallel()
		now := time.Now()
		var relays []capRelay
		for _, skew := range []time.Duration{-time.Hour, 0, time.Hour} {
			fake := clock.NewFake(now.Add(skew))
			relays = append(relays, capRelay{newShared(t, n, fake, ratelimit.Options{}), fake})
		}
		gos := runCap(t, relays, subID(t), l, span)
		t.Logf("per relay: %v", gos)
		checkCap(t, gos[0]+gos[1]+gos[2], l, span, true)
	})
}

// TestSharedCapAfterAKilledRelay proves the rate rule when a relay is
// killed with a lease in hand and another carries on: the lost lease is
// never spent twice, so the total stays within the cap.
func TestSharedCapAfterAKilledRelay(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	const span = 10 * time.Second
	l := ratelimit.Limit{Rate: 1000, Burst: 1000}
	id := subID(t)
	fake := clock.NewFake(time.Now())
	killed := newShared(t, n, fake, ratelimit.Options{})
	if d := reserve(t, killed, id, l); d.Verdict != ratelimit.Go {
		t.Fatalf("first request: %+v", d)
	}
	survivor := newShared(t, n, fake, ratelimit.Options{})
	gos := runCap(t, []capRelay{{survivor, fake}}, id, l, span)
	checkCap(t, 1+gos[0], l, span, false)
}

// TestSharedHostClockAheadMintsNoTokens proves the claim of the package
// documentation that a relay's clock can only make it grant fewer tokens,
// never more: a relay whose clock jumps a second ahead of the server's (an
// NTP step; a fake clock advanced by hand) may find at most a second's worth
// of refill, not a fresh second's worth at every compare-and-set.
func TestSharedHostClockAheadMintsNoTokens(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	l := ratelimit.Limit{Rate: 10, Burst: 10}
	id := subID(t)
	fake := clock.NewFake(time.Now())
	s := newShared(t, n, fake, ratelimit.Options{})
	if gos, _ := drain(t, s, id, l); gos != l.Burst {
		t.Fatalf("%d Go from a full bucket of %d", gos, l.Burst)
	}
	fake.Advance(time.Second)
	gos := 0
	for range 200 {
		if reserve(t, s, id, l).Verdict == ratelimit.Go {
			gos++
		}
	}
	allowed := int(l.Rate*1) + ratelimit.LeaseSize(l.Rate, l)
	t.Logf("a clock one second ahead: %d Go in 200 requests at a standstill", gos)
	if gos > allowed {
		t.Errorf("%d Go decisions after the clock moved 1 s, at most %d allowed", gos, allowed)
	}
}
