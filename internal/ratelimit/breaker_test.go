package ratelimit

import (
	"math/rand/v2"
	"testing"
	"time"
)

// run feeds a fresh window of the default breaker requests at rate a
// second, each failing with probability p, from rng, and returns the
// request (from 1) that opened the circuit, 0 if none did.
func run(rng *rand.Rand, rate, requests int, p float64) int {
	b := Breaker{}.WithDefaults(DefaultConsecutive)
	span := b.bucketSpan()
	var w window
	for i := range requests {
		at := time.Duration(i) * time.Second / time.Duration(rate)
		w.add(int64(at/span), span, b, rng.Float64() < p)
		if w.trips(b) {
			return i + 1
		}
	}
	return 0
}

// TestBreakerRuleByMeasure holds the defaults to what they were chosen by
// (see DefaultMinRequests): on a seeded random receiver, whatever the
// wall-clock pace of the host, since the window is fed times by hand.
func TestBreakerRuleByMeasure(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(55, 1))
	for start := range 5000 {
		if at := run(rng, 1000, 300, 0.2); at != 0 {
			t.Fatalf("20 %% failures at 1,000/s: start %d opened the circuit at request %d", start, at)
		}
	}
	if at := run(rng, 1000, 3_600_000, 0.2); at != 0 {
		t.Fatalf("20 %% failures at 1,000/s: an hour opened the circuit at request %d", at)
	}
	most := 0
	for start := range 1000 {
		at := run(rng, 1000, 1000, 0.6)
		if at == 0 {
			t.Fatalf("60 %% failures at 1,000/s: start %d never opened the circuit in a second", start)
		}
		most = max(most, at)
	}
	t.Logf("60 %% failures at 1,000/s: opened by request %d at the latest of 1,000 starts", most)
	if at := run(rng, 1000, 1000, 1); at != BusyRun*DefaultConsecutive {
		t.Errorf("every request failing at 1,000/s opened the circuit at request %d, want %d", at, BusyRun*DefaultConsecutive)
	}
	if at := run(rng, 1, 100, 1); at != DefaultConsecutive {
		t.Errorf("every request failing at 1/s opened the circuit at request %d, want %d", at, DefaultConsecutive)
	}
}

// TestBreakerOpensAfterAHealthySpell: a receiver that goes down after ten
// seconds of successes at 1,000/s opens the circuit within a run of
// BusyRun × Consecutive failures, not after the window's ten thousand
// successes are outnumbered.
func TestBreakerOpensAfterAHealthySpell(t *testing.T) {
	t.Parallel()
	b := Breaker{}.WithDefaults(DefaultConsecutive)
	span := b.bucketSpan()
	var w window
	i := 0
	add := func(failed bool) bool {
		at := time.Duration(i) * time.Millisecond
		i++
		w.add(int64(at/span), span, b, failed)
		return w.trips(b)
	}
	for range 10_000 {
		if add(false) {
			t.Fatal("a success opened the circuit")
		}
	}
	for n := 1; ; n++ {
		if add(true) {
			if n != BusyRun*b.Consecutive {
				t.Fatalf("opened at failure %d, want %d", n, BusyRun*b.Consecutive)
			}
			return
		}
	}
}

// TestWindowDegradesAndRecovers proves the AIMD of the requests in flight:
// a receiver failing 45 % (above DegradeFrom of the 50 % share, below the
// share) is halved once a bucket down to DegradeFloor of --max-in-flight;
// one failing 20 % is never slowed; once the failures stop, the share in
// flight climbs back by DegradeStep a bucket to all of it.
func TestWindowDegradesAndRecovers(t *testing.T) {
	t.Parallel()
	b := Breaker{}.WithDefaults(DefaultConsecutive)
	span := b.bucketSpan()
	rng := rand.New(rand.NewPCG(55, 2))
	feed := func(w *window, from, seconds int, p float64, each func(second int)) {
		for i := from * 1000; i < (from+seconds)*1000; i++ {
			at := time.Duration(i) * time.Millisecond
			w.add(int64(at/span), span, b, rng.Float64() < p)
			if i%1000 == 999 && each != nil {
				each(i / 1000)
			}
		}
	}
	var calm window
	feed(&calm, 0, 60, 0.2, func(second int) {
		if got := calm.inFlight(16); got != 16 {
			t.Fatalf("20 %% failures: %d of 16 in flight at second %d, want all", got, second)
		}
	})
	var w window
	feed(&w, 0, 10, 0.45, nil)
	if got := w.inFlight(16); got != 4 {
		t.Fatalf("45 %% failures for 10 s: %d of 16 in flight, want DegradeFloor's 4", got)
	}
	if w.trips(b) {
		t.Fatal("45 % failures opened the circuit")
	}
	last := w.inFlight(16)
	feed(&w, 10, 30, 0, func(int) {
		if got := w.inFlight(16); got < last {
			t.Fatalf("recovering: %d in flight after %d", got, last)
		}
		last = w.inFlight(16)
	})
	if got := w.inFlight(16); got != 16 {
		t.Fatalf("30 s without failures: %d of 16 in flight, want all", got)
	}
}

// TestWindowRecoversAfterAQuietSpell: a window degraded by failures and
// then told nothing for a while is judged, at its next outcome, on what
// the buckets held as each ended, not on failures long past: after twenty
// quiet buckets it is back to all of --max-in-flight, not halved again.
func TestWindowRecoversAfterAQuietSpell(t *testing.T) {
	t.Parallel()
	b := Breaker{}.WithDefaults(DefaultConsecutive)
	span := b.bucketSpan()
	rng := rand.New(rand.NewPCG(55, 3))
	var w window
	for i := range 10_000 {
		at := time.Duration(i) * time.Millisecond
		w.add(int64(at/span), span, b, rng.Float64() < 0.45)
	}
	if got := w.inFlight(16); got != 4 {
		t.Fatalf("45 %% failures for 10 s: %d of 16 in flight, want DegradeFloor's 4", got)
	}
	w.add(w.head+2*WindowBuckets, span, b, false)
	if got := w.inFlight(16); got != 16 {
		t.Fatalf("after %d buckets without an outcome: %d of 16 in flight, want all", 2*WindowBuckets, got)
	}
}

// TestThinBreakerIgnoresARunAmongSuccesses: a subscriber busy over the
// cluster is thin on each of its relays (12 requests a second over three
// relays, 4 on each); a receiver failing 20 % at random runs into five
// failures in a row there every few minutes, which must not open the
// circuit while the window holds four times as many successes. One that
// fails everything still opens it at its Consecutive-th failure.
func TestThinBreakerIgnoresARunAmongSuccesses(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(55, 4))
	if at := run(rng, 4, 4*3600, 0.2); at != 0 {
		t.Fatalf("20 %% failures at 4/s: an hour opened the circuit at request %d", at)
	}
	if at := run(rng, 4, 100, 1); at != DefaultConsecutive {
		t.Errorf("every request failing at 4/s opened the circuit at request %d, want %d", at, DefaultConsecutive)
	}
}
