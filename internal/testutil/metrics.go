package testutil

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Scrape reads base+"/metrics" over HTTP and parses it as Prometheus does.
func Scrape(t testing.TB, base string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	return fams
}

// SeriesValue is the value of the series of name whose labels include the
// pairs given (name, value, name, value…; a histogram's sample count), and
// whether there is one.
func SeriesValue(fams map[string]*dto.MetricFamily, name string, pairs ...string) (float64, bool) {
	for _, m := range fams[name].GetMetric() {
		if !HasLabels(m, pairs...) {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount()), true
		case m.Untyped != nil:
			return m.GetUntyped().GetValue(), true
		}
	}
	return 0, false
}

// BucketCount is the cumulative count of the bucket with upper bound le of
// the histogram of name whose labels include pairs, and whether there is
// one.
func BucketCount(fams map[string]*dto.MetricFamily, name string, le float64, pairs ...string) (float64, bool) {
	for _, m := range fams[name].GetMetric() {
		if !HasLabels(m, pairs...) || m.Histogram == nil {
			continue
		}
		for _, b := range m.GetHistogram().GetBucket() {
			if b.GetUpperBound() == le {
				return float64(b.GetCumulativeCount()), true
			}
		}
	}
	return 0, false
}

// HasLabels reports whether m has every label of pairs (name, value, name,
// value…).
func HasLabels(m *dto.Metric, pairs ...string) bool {
	for i := 0; i+1 < len(pairs); i += 2 {
		found := false
		for _, l := range m.GetLabel() {
			found = found || (l.GetName() == pairs[i] && l.GetValue() == pairs[i+1])
		}
		if !found {
			return false
		}
	}
	return true
}

// PutJSON stores v as JSON under key in the KV bucket, as a relay writes
// its entries (a relay_ratelimit state, a subscriber).
func PutJSON(t testing.TB, js jetstream.JetStream, bucket, key string, v any) {
	t.Helper()
	ctx := Context(t)
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, key, raw); err != nil {
		t.Fatal(err)
	}
}
