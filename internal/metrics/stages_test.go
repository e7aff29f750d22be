package metrics_test

import (
	"math"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/relay-dev/relay/internal/metrics"
	"github.com/relay-dev/relay/internal/testutil"
)

// Each stage is the time between two of a delivery's moments; a stage
// with an unknown end is left out, and one that comes out negative (two
// machines' clocks) counts as zero rather than as nothing.
func TestStages(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 3, 7, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	stages := []string{metrics.StageFanout, metrics.StagePickup, metrics.StageQueue, metrics.StageRequest}
	tests := []struct {
		name string
		in   metrics.Stages
		// want is each stage's recorded seconds, in the order of stages;
		// NaN: not recorded.
		want [4]float64
	}{
		{
			name: "every moment known",
			in:   metrics.Stages{Published: ms(0), Copied: ms(1), Received: ms(3), Sent: ms(6), Answered: ms(10)},
			want: [4]float64{0.001, 0.002, 0.003, 0.004},
		},
		{
			name: "no copy time: the two stages it ends and starts are left out",
			in:   metrics.Stages{Published: ms(0), Received: ms(3), Sent: ms(6), Answered: ms(10)},
			want: [4]float64{math.NaN(), math.NaN(), 0.003, 0.004},
		},
		{
			name: "no publication time (a copy published by hand)",
			in:   metrics.Stages{Copied: ms(1), Received: ms(3), Sent: ms(6), Answered: ms(10)},
			want: [4]float64{math.NaN(), 0.002, 0.003, 0.004},
		},
		{
			name: "the server's clock ahead of the relay's",
			in:   metrics.Stages{Published: ms(0), Copied: ms(5), Received: ms(3), Sent: ms(6), Answered: ms(10)},
			want: [4]float64{0.005, 0, 0.003, 0.004},
		},
		{
			name: "nothing known",
			want: [4]float64{math.NaN(), math.NaN(), math.NaN(), math.NaN()},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := metrics.New()
			m.Stages(tt.in)
			fams, err := m.Registry.Gather()
			if err != nil {
				t.Fatal(err)
			}
			byName := make(map[string]*dto.MetricFamily, len(fams))
			for _, f := range fams {
				byName[f.GetName()] = f
			}
			for i, stage := range stages {
				var h *dto.Histogram
				for _, s := range byName["relay_delivery_stage_seconds"].GetMetric() {
					if testutil.HasLabels(s, "stage", stage) {
						h = s.GetHistogram()
					}
				}
				if h == nil {
					t.Fatalf("no series for stage %s", stage)
				}
				if math.IsNaN(tt.want[i]) {
					if h.GetSampleCount() != 0 {
						t.Errorf("stage %s recorded %d samples, want none", stage, h.GetSampleCount())
					}
					continue
				}
				if h.GetSampleCount() != 1 || math.Abs(h.GetSampleSum()-tt.want[i]) > 1e-9 {
					t.Errorf("stage %s: %d samples summing to %v s, want one of %v s", stage, h.GetSampleCount(), h.GetSampleSum(), tt.want[i])
				}
			}
		})
	}
}
