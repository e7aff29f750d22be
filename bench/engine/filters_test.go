package main

import (
	"encoding/json"
	"testing"
)

// The filters scenario's body is the size asked for, is JSON with the
// fields the filter reads, and the filter is true of it at every size:
// otherwise the run with filters would deliver fewer requests than the one
// without, and the ratio would measure that rather than the filters.
func TestFilterBody(t *testing.T) {
	t.Parallel()
	for _, n := range []int{filterBodyMin, filterBodyMin + 1, 200, 4096, 65536} {
		b, err := filterBody(n)
		if err != nil {
			t.Fatalf("filterBody(%d): %v", n, err)
		}
		if len(b) != n {
			t.Errorf("filterBody(%d) is %d bytes", n, len(b))
		}
		var got struct {
			Status   string         `json:"status"`
			Amount   float64        `json:"amount"`
			Customer map[string]any `json:"customer"`
		}
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("filterBody(%d) is not JSON: %v", n, err)
		}
		if got.Status != "paid" || got.Amount <= 100 || got.Customer == nil {
			t.Errorf("filterBody(%d) = %+v, want status paid, amount over 100 and a customer", n, got)
		}
		if err := checkFilterBody(b); err != nil {
			t.Errorf("filterBody(%d): %v", n, err)
		}
	}
	if b, err := filterBody(filterBodyMin - 1); err == nil {
		t.Errorf("filterBody(%d) = %q, want an error: the fields do not fit", filterBodyMin-1, b)
	}
}

// The check the scenario makes before its first run refuses a body the
// filter is not true of.
func TestCheckFilterBodyRefuses(t *testing.T) {
	t.Parallel()
	for _, body := range []string{
		`{"status":"open","amount":150,"customer":{"id":"c1"}}`,
		`{"status":"paid","amount":100,"customer":{"id":"c1"}}`,
		`{"status":"paid","amount":150}`,
		`not json`,
	} {
		if err := checkFilterBody([]byte(body)); err == nil {
			t.Errorf("checkFilterBody(%s) = nil, want an error", body)
		}
	}
}

// Only the run's growth of relay_filter_evaluations_total counts, and
// every result but matched is one of the others.
func TestFilterEvaluationsMinus(t *testing.T) {
	t.Parallel()
	before := filterEvaluations{matched: 1000, notMatched: 1, notJSON: 2, failed: 3}
	after := filterEvaluations{matched: 31000, notMatched: 1, notJSON: 2, failed: 4}
	d := after.minus(before)
	if d.matched != 30000 || d.others() != 1 || d.total() != 30001 {
		t.Errorf("after − before = %+v (others %d, total %d), want 30,000 matched and 1 other", d, d.others(), d.total())
	}
}
