package main

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/relay-dev/relay/internal/metrics"
)

// ---- latency: where relay's time goes, from its relay_delivery_stage_seconds ----

// stageNames are the stages of relay_delivery_stage_seconds, in the order
// a delivery passes them.
var stageNames = []string{metrics.StageFanout, metrics.StagePickup, metrics.StageQueue, metrics.StageRequest}

// stageHist is one stage's histogram as scraped: cumulative counts by
// upper bound, as Prometheus exposes them.
type stageHist struct {
	count uint64
	sum   float64
	les   []float64
	cum   []uint64
}

// stageFigure is one stage of the deliveries of a measured run: the
// difference of relay's histogram between a scrape before the run and one
// after it. The mean is exact; the percentiles are interpolated within the
// histogram's buckets (1-2-5 bounds: 1, 2, 5 ms…), as Prometheus'
// histogram_quantile does, so they say which bucket, not the exact value.
type stageFigure struct {
	stage    string
	count    uint64
	mean     time.Duration
	p50, p99 time.Duration
}

// scrapeStages reads relay_delivery_stage_seconds from the relay's
// /metrics at addr, by stage.
func scrapeStages(ctx context.Context, addr string) (map[string]stageHist, error) {
	resp, err := getMetrics(ctx, addr)
	if err != nil {
		return nil, fmt.Errorf("scraping relay_delivery_stage_seconds: %w", err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("scraping relay_delivery_stage_seconds: %w", err)
	}
	out := make(map[string]stageHist, len(stageNames))
	for _, m := range fams["relay_delivery_stage_seconds"].GetMetric() {
		out[stageOf(m)] = histOf(m.GetHistogram())
	}
	return out, nil
}

func stageOf(m *dto.Metric) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == "stage" {
			return l.GetValue()
		}
	}
	return ""
}

func histOf(h *dto.Histogram) stageHist {
	s := stageHist{count: h.GetSampleCount(), sum: h.GetSampleSum()}
	for _, b := range h.GetBucket() {
		s.les = append(s.les, b.GetUpperBound())
		s.cum = append(s.cum, b.GetCumulativeCount())
	}
	return s
}

// minus is what h counted since before; the two must be scrapes of one
// histogram (same bounds). A before that counted more (the relay started
// again in between) counts as nothing.
func (h stageHist) minus(before stageHist) stageHist {
	if before.count > h.count || len(before.cum) != len(h.cum) {
		before = stageHist{}
	}
	d := stageHist{count: h.count - before.count, sum: h.sum - before.sum, les: h.les, cum: make([]uint64, len(h.cum))}
	for i := range h.cum {
		if i < len(before.cum) {
			d.cum[i] = h.cum[i] - min(before.cum[i], h.cum[i])
		} else {
			d.cum[i] = h.cum[i]
		}
	}
	return d
}

// quantile is the q-quantile of h, interpolated linearly within its
// bucket (from 0 for the first), as histogram_quantile does; the highest
// finite bound when it falls in the +Inf bucket.
func (h stageHist) quantile(q float64) time.Duration {
	if h.count == 0 || len(h.les) == 0 {
		return 0
	}
	rank := q * float64(h.count)
	lower, below := 0.0, uint64(0)
	for i, le := range h.les {
		if float64(h.cum[i]) >= rank {
			if math.IsInf(le, 1) {
				return seconds(lower)
			}
			in := h.cum[i] - below
			if in == 0 {
				return seconds(le)
			}
			return seconds(lower + (le-lower)*(rank-float64(below))/float64(in))
		}
		lower, below = le, h.cum[i]
	}
	return seconds(lower)
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// stageFigures is each stage's figures between two scrapes, in the
// stages' order; a stage missing from either scrape is left out.
func stageFigures(before, after map[string]stageHist) []stageFigure {
	var out []stageFigure
	for _, name := range stageNames {
		a, ok := after[name]
		if !ok {
			continue
		}
		d := a.minus(before[name])
		f := stageFigure{stage: name, count: d.count, p50: d.quantile(0.5), p99: d.quantile(0.99)}
		if d.count > 0 {
			f.mean = seconds(d.sum / float64(d.count))
		}
		out = append(out, f)
	}
	return out
}

// stagesLine writes a run's stages on one line: p50 / p99 and the mean,
// in ms.
func stagesLine(figs []stageFigure) string {
	parts := make([]string, 0, len(figs))
	for _, f := range figs {
		parts = append(parts, fmt.Sprintf("%s %.2f / %.1f ms (mean %.2f)", f.stage, ms(f.p50), ms(f.p99), ms(f.mean)))
	}
	return strings.Join(parts, ", ")
}

// stagesAfter scrapes the stages once the relay has recorded n deliveries
// more than before holds (it records a delivery's stages just after its
// answer arrives, so the last few may follow the receiver's count by a
// moment), or after a few seconds with what it has.
func stagesAfter(ctx context.Context, addr string, before map[string]stageHist, n int) (map[string]stageHist, error) {
	return scrapeStagesUntil(ctx, addr, func(cur map[string]stageHist) bool {
		return cur[metrics.StageRequest].count-before[metrics.StageRequest].count >= uint64(n)
	})
}

// settledStages scrapes the stages once the count of requests recorded has
// stopped moving between two scrapes (or after a few seconds): the relay
// records a delivery's stages just after its answer, so the last warm-up
// deliveries may be recorded a moment after the receiver saw them, and
// would count in the measured run.
func settledStages(ctx context.Context, addr string) (map[string]stageHist, error) {
	var prev map[string]stageHist
	return scrapeStagesUntil(ctx, addr, func(cur map[string]stageHist) bool {
		settled := prev != nil && cur[metrics.StageRequest].count == prev[metrics.StageRequest].count
		prev = cur
		return settled
	})
}

// scrapeStagesUntil scrapes the stages every 50 ms until done says so of
// a scrape, and returns that scrape; after 5 s, the last one.
func scrapeStagesUntil(ctx context.Context, addr string, done func(map[string]stageHist) bool) (map[string]stageHist, error) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		cur, err := scrapeStages(ctx, addr)
		if err != nil {
			return nil, err
		}
		if done(cur) || time.Now().After(deadline) {
			return cur, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
