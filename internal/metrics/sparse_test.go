package metrics

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// series gathers reg and returns the value of each series of its one
// family, by subscriber.
func series(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			out[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
		}
	}
	return out
}

// A sparse gauge shows a subscriber while it has a value, then 0 for the
// linger (so a graph shows the drop), then nothing; one that keepZero
// refuses (a removed subscriber) goes at once.
func TestSparseGaugeLingersAtZeroThenGoes(t *testing.T) {
	t.Parallel()
	vec := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "relay_test_gauge", Help: "A gauge."}, []string{"subscriber"})
	reg := prometheus.NewRegistry()
	reg.MustRegister(vec)
	g := newSparse(vec, "", time.Minute)
	all := func(string) bool { return true }
	t0 := time.Unix(1_000_000, 0)

	g.set(t0, map[string]float64{"a": 3, "b": 1}, all)
	if got := series(t, reg); len(got) != 2 || got["a"] != 3 || got["b"] != 1 {
		t.Fatalf("series %v, want a=3 b=1", got)
	}
	g.set(t0.Add(time.Second), map[string]float64{"b": 1}, all)
	if got := series(t, reg); len(got) != 2 || got["a"] != 0 {
		t.Errorf("series %v once a emptied, want a=0 b=1", got)
	}
	g.set(t0.Add(30*time.Second), map[string]float64{"b": 1}, all)
	if got := series(t, reg); len(got) != 2 {
		t.Errorf("series %v within the linger, want a=0 b=1", got)
	}
	g.set(t0.Add(62*time.Second), map[string]float64{}, all)
	if got := series(t, reg); len(got) != 1 || got["b"] != 0 {
		t.Errorf("series %v after a's linger, want b=0", got)
	}
	g.set(t0.Add(63*time.Second), map[string]float64{}, func(string) bool { return false })
	if got := series(t, reg); len(got) != 0 {
		t.Errorf("series %v of subscribers that are gone, want none", got)
	}
}
