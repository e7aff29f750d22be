package main

import (
	"strings"
	"testing"
	"time"
)

// Below the latency table, relay is compared with each loop measured just
// before it at the same rate: the difference in milliseconds and the ratio,
// which the machine's noise moves less.
func TestLatencyTableComparesRelayWithEachLoop(t *testing.T) {
	t.Parallel()
	run := func(contender string, p50, p99 time.Duration) latencyRun {
		return latencyRun{contender: contender, server: "in-process", rate: 5000, span: 20 * time.Second, achieved: 5000,
			l: latency{published: 100, arrived: 100, p50: p50, p99: p99, max: 2 * p99}}
	}
	ms := time.Millisecond
	table := latencyTable([]latencyRun{
		run(latencyBaseline, ms/2, 2*ms),
		run(latencyTwoHop, ms, 5*ms),
		run(latencyRelay, 3*ms/2, 6*ms),
	})
	for _, want := range []string{
		"- at 5,000/s, relay − baseline: p50 +1.0 ms, p99 **+4.0** ms; relay ÷ baseline: p50 3.00, p99 **3.00**\n",
		"- at 5,000/s, relay − two-hop: p50 +0.5 ms, p99 **+1.0** ms; relay ÷ two-hop: p50 1.50, p99 **1.20**\n",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("the table lacks %q:\n%s", want, table)
		}
	}
	if got := timesOf(ms, 0); got != "–" {
		t.Errorf("a ratio to zero is %q, want –", got)
	}
}
