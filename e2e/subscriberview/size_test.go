//go:build !scale

package subscriberview

import "time"

// burstSize is how many subscriber records the burst writes: 10,000 here,
// which every run of the tests can afford under -race on a small host;
// 100,000 with -tags scale (see size_scale_test.go).
const burstSize = 10_000

// burstTimeout bounds one run of the test.
const burstTimeout = 3 * time.Minute
