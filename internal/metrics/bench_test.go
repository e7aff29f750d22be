package metrics_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/relay-dev/relay/internal/metrics"
)

// BenchmarkRecordADelivery is what one delivery costs the metrics with
// 10,000 subscribers seen: its copy, its attempt, its 2xx and its stages. It stays the
// same whatever the number of subscribers (a map lookup and atomic adds, no
// label hashing once a subscriber's series are bound) and allocates nothing.
func BenchmarkRecordADelivery(b *testing.B) {
	m := metrics.New()
	ids := make([]string, 10_000)
	for i := range ids {
		ids[i] = fmt.Sprintf("tenant-%05d-hooks", i)
		m.Copied(ids[i])
		m.Attempt(ids[i], "delivered", time.Millisecond)
		m.Delivered(ids[i], time.Now(), time.Now())
	}
	published := time.Now()
	stages := metrics.Stages{Published: published, Copied: published.Add(time.Millisecond),
		Received: published.Add(2 * time.Millisecond), Sent: published.Add(3 * time.Millisecond),
		Answered: published.Add(4 * time.Millisecond)}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		id := ids[i%len(ids)]
		m.Copied(id)
		m.Attempt(id, "delivered", time.Millisecond)
		m.Delivered(id, published, published)
		m.Stages(stages)
		i++
	}
}
