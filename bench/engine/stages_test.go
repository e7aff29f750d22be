package main

import (
	"math"
	"testing"
	"time"
)

// The percentiles of a run's stages come from the difference of two
// scrapes, interpolated within a bucket as Prometheus' histogram_quantile
// does: what was counted before the run does not count.
func TestStageQuantiles(t *testing.T) {
	t.Parallel()
	les := []float64{0.001, 0.002, 0.005, math.Inf(1)}
	before := stageHist{count: 100, sum: 0.05, les: les, cum: []uint64{100, 100, 100, 100}}
	// The run adds 100: 50 under 1 ms, 40 in (1, 2] ms, 9 in (2, 5] ms, 1 over.
	after := stageHist{count: 200, sum: 0.05 + 0.2, les: les, cum: []uint64{150, 190, 199, 200}}
	run := after.minus(before)
	tests := []struct {
		q    float64
		want time.Duration
	}{
		{0.25, 500 * time.Microsecond}, // 25 of the first bucket's 50, from 0
		{0.5, time.Millisecond},        // the first bucket's top
		{0.7, 1500 * time.Microsecond}, // 20 of the second's 40
		{0.99, 5 * time.Millisecond},   // the third's top
		{0.995, 5 * time.Millisecond},  // in +Inf: the highest finite bound
		{0.01, 20 * time.Microsecond},  // 1 of 50, from 0
	}
	for _, tt := range tests {
		if got := run.quantile(tt.q); (got - tt.want).Abs() > time.Microsecond {
			t.Errorf("quantile(%v) = %v, want %v", tt.q, got, tt.want)
		}
	}
	figs := stageFigures(map[string]stageHist{"fanout": before}, map[string]stageHist{"fanout": after})
	if len(figs) != 1 || figs[0].count != 100 || (figs[0].mean-2*time.Millisecond).Abs() > time.Microsecond {
		t.Errorf("figures = %+v, want one stage of 100 with a mean of 2 ms", figs)
	}
	if got := (stageHist{}).quantile(0.5); got != 0 {
		t.Errorf("the quantile of an empty histogram is %v, want 0", got)
	}
}

// A relay started again between the two scrapes counts from zero: its
// counts after are the run's, never a wrapped difference.
func TestStageMinusAfterRestart(t *testing.T) {
	t.Parallel()
	les := []float64{0.001, math.Inf(1)}
	before := stageHist{count: 100, sum: 1, les: les, cum: []uint64{90, 100}}
	after := stageHist{count: 10, sum: 0.005, les: les, cum: []uint64{10, 10}}
	d := after.minus(before)
	if d.count != 10 || d.cum[0] != 10 || d.cum[1] != 10 {
		t.Errorf("after a restart: %+v, want the 10 counted after it", d)
	}
}
