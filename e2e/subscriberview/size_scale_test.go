//go:build scale

package subscriberview

import "time"

// burstSize is how many subscriber records the burst writes with -tags
// scale: the 100,000 of a platform moving its customers' endpoints at once.
const burstSize = 100_000

// burstTimeout bounds one run of the test: writing 100,000 records takes
// minutes under -race on a loaded host.
const burstTimeout = 10 * time.Minute
