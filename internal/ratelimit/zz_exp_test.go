package ratelimit_test

import (
	"testing"
	"time"

	"github.com/relay-dev/relay/internal/clock"
	"github.com/relay-dev/relay/internal/ratelimit"
	"github.com/relay-dev/relay/internal/testutil"
)

func TestZZExp(t *testing.T) {
	n := testutil.StartRelayNATS(t)
	ctx := testutil.Context(t)
	for _, rate := range []float64{10, 100, 1000} {
		fake := clock.NewFake(time.Now())
		s, err := ratelimit.NewShared(ctx, n.JS, ratelimit.Options{Clock: fake})
		if err != nil {
			t.Fatal(err)
		}
		l := ratelimit.Limit{Rate: rate, Burst: int(rate)}
		id := "sub" + time.Now().Format("150405.000000")
		id = "s" + string(rune('a'+int(rate)%26))
		gos := 0
		start := time.Now()
		step := time.Millisecond
		for el := time.Duration(0); el < 10*time.Second; el += step {
			for {
				d, err := s.Reserve(ctx, id, l)
				if err != nil {
					t.Fatal(err)
				}
				if d.Hold != ratelimit.Go {
					break
				}
				gos++
			}
			fake.Advance(step)
		}
		t.Logf("rate %v gos %d cap %v stats %+v real %v", rate, gos, float64(l.Burst)+rate*10, s.Stats(), time.Since(start))
	}
}
