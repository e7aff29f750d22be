package main

import (
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// The growth over the last half of a soak is a least-squares line's rise
// over that half: the first half (the warm-up) does not count, a steady
// climb shows whole, and a sawtooth of collections around a flat level
// counts as flat, whichever tooth the last sample falls on.
func TestLastHalfGrowth(t *testing.T) {
	t.Parallel()
	span := 100 * time.Second
	series := func(f func(s float64) float64) []point {
		var pts []point
		for s := 0; s <= 100; s += 5 {
			pts = append(pts, point{at: time.Duration(s) * time.Second, v: f(float64(s))})
		}
		return pts
	}
	tests := []struct {
		name       string
		pts        []point
		growth     float64
		mean       float64
		n          int
		flatWithin float64 // |growth| at most this, instead of growth exactly
	}{
		{"a climb during the warm-up only", series(func(s float64) float64 { return min(s, 50) * 10 }), 0, 500, 11, 0},
		{"a steady climb", series(func(s float64) float64 { return 100 + 2*s }), 100, 250, 11, 0},
		{"a sawtooth around 300", series(func(s float64) float64 {
			if int(s/5)%2 == 0 {
				return 280
			}
			return 320
		}), 0, 0, 11, 10},
		{"nothing in the last half", []point{{at: time.Second, v: 5}}, 0, 0, 0, 0},
		{"one point in it", []point{{at: time.Second, v: 5}, {at: 80 * time.Second, v: 7}}, 0, 7, 1, 0},
		{"after the span: the drain does not count", append(series(func(float64) float64 { return 50 }),
			point{at: 130 * time.Second, v: 500}), 0, 50, 11, 0},
	}
	for _, tt := range tests {
		growth, mean, n := lastHalfGrowth(tt.pts, span)
		if n != tt.n {
			t.Errorf("%s: %d points in the last half, want %d", tt.name, n, tt.n)
		}
		if tt.flatWithin > 0 {
			if math.Abs(growth) > tt.flatWithin {
				t.Errorf("%s: growth %.2f, want within ±%.0f", tt.name, growth, tt.flatWithin)
			}
			continue
		}
		if math.Abs(growth-tt.growth) > 1e-9 || math.Abs(mean-tt.mean) > 1e-9 {
			t.Errorf("%s: growth %.2f, mean %.2f; want %.2f, %.2f", tt.name, growth, mean, tt.growth, tt.mean)
		}
	}
}

// The soak's targets are judged from its figures: the flaky subscriber
// loses nothing (what it neither got nor has waiting is lost, its dead
// letters among them, never counted twice), its circuit never opens (an event or a read of
// the gauge is enough), the RSS is flat within 5 % of its mean, the
// healthy one's p99 is at most twice its p99 alone.
func TestSoakTargets(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	r := soakResult{
		published: 1000,
		subs:      []soakSub{{id: "h", role: "healthy", received: 1000}, {id: "f", role: "flaky", received: 990, waiting: 10}},
		rssGrowth: 4, rssMean: 100,
	}
	r.alone.l.p50, r.alone.l.p99 = 2*ms, 5*ms
	r.beside.l.p50, r.beside.l.p99 = 3*ms, 10*ms
	if r.lost() != 0 || !r.circuitNeverOpened() || !r.rssFlat() {
		t.Errorf("lost %d, circuit never opened %v, RSS flat %v: want 0, true, true", r.lost(), r.circuitNeverOpened(), r.rssFlat())
	}
	if r.p99Ratio() != 2 || r.p50Ratio() != 1.5 {
		t.Errorf("p99 ratio %.2f, p50 ratio %.2f; want 2, 1.5", r.p99Ratio(), r.p50Ratio())
	}
	r.subs[1].waiting, r.subs[1].dead = 2, 8
	if got := r.lost(); got != 8 {
		t.Errorf("8 neither received nor waiting, the 8 dead: lost %d, want 8", got)
	}
	r.subs[1].dead = 3
	if got := r.lost(); got != 8 {
		t.Errorf("8 neither received nor waiting, 3 of them dead: lost %d, want 8", got)
	}
	r.circuitSeen = 1
	if r.circuitNeverOpened() {
		t.Error("a read of the gauge that found the circuit open: its circuit never opened, want opened")
	}
	r.circuitSeen, r.circuitOpened = 0, 1
	if r.circuitNeverOpened() {
		t.Error("a relay.circuit.opened: its circuit never opened, want opened")
	}
	r.rssGrowth = 6
	if r.rssFlat() {
		t.Error("6 % growth over the last half: flat, want not")
	}
	if got := ratioOf(ms, 0); got != 0 {
		t.Errorf("a ratio to zero is %v, want 0", got)
	}
	table := soakTable(r)
	for _, want := range []string{"| the flaky subscriber loses nothing | 8 of 1,000 lost", "| the healthy lane-mate's p99 ≤ 2× alone | 2.00 | met |"} {
		if !strings.Contains(table, want) {
			t.Errorf("the table lacks %q:\n%s", want, table)
		}
	}
}

// The receiver misbehaves as a webhook's URL asks, for the soak's flaky
// and slow subscribers: fail=1 answers 500 and records a failure, not an
// arrival; delay answers 204 after it; a plain URL answers 204 at once.
func TestRecorderFailsAndDelaysAsItsURLSays(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(newRecorder())
	defer srv.Close()
	post := func(path, hook string) int {
		req, err := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("webhook-id", hook)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := post("/flaky?fail=1", "a"); got != http.StatusInternalServerError {
		t.Errorf("fail=1: %d, want 500", got)
	}
	if got := post("/flaky?fail=0", "b"); got != http.StatusNoContent {
		t.Errorf("fail=0: %d, want 204", got)
	}
	if got := post("/slow?delay=1ms", "c"); got != http.StatusNoContent {
		t.Errorf("delay=1ms: %d, want 204", got)
	}
	rcv := &receiver{URL: srv.URL, proc: &receiverProc{client: srv.Client(), fail: func(err error) { t.Error(err) }}}
	if s := rcv.snapshot("flaky"); s.requests != 2 || s.failed != 1 || s.distinct != 1 {
		t.Errorf("flaky: %d requests, %d failed, %d distinct; want 2, 1, 1", s.requests, s.failed, s.distinct)
	}
	if s := rcv.snapshot("slow"); s.requests != 1 || s.failed != 0 || s.distinct != 1 {
		t.Errorf("slow: %d requests, %d failed, %d distinct; want 1, 0, 1", s.requests, s.failed, s.distinct)
	}
}
