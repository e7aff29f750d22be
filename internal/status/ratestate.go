package status

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/relay-dev/relay/internal/ratelimit"
	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/streams"
)

// kvBatch is how many entries of a bucket one direct get asks for: 10,000
// subscribers' relay_ratelimit entries (a few hundred bytes each) come in
// ten requests.
const kvBatch = 1000

// kvEntry is a bucket's value for a subscriber and the server's time it was
// written, from which a token bucket refills.
type kvEntry struct {
	value   []byte
	written time.Time
}

// rateEntries reads the relay_ratelimit entries whose keys match key (a
// subscriber id, or "*" for all), by subscriber id: see
// [reader.bucketEntries].
func (r *reader) rateEntries(ctx context.Context, key string) (map[string]kvEntry, error) {
	return r.bucketEntries(ctx, streams.RateLimitBucket, key)
}

// bucketEntries reads the entries of bucket whose keys match key (a
// subscriber id, or "*" for all), by subscriber id. A relay bucket keeps
// one value a key, so its stream holds one message a key, and a batched
// direct get by subject reads them all in order, kvBatch a request: a
// report of 10,000 subscribers costs ten reads of the bucket, not 10,000,
// and neither a consumer nor a write. Deleted keys are left out.
func (r *reader) bucketEntries(ctx context.Context, bucket, key string) (map[string]kvEntry, error) {
	prefix := "$KV." + bucket + "."
	out := map[string]kvEntry{}
	from := uint64(1)
	for {
		batchCtx, cancel := context.WithTimeout(ctx, apiTimeout)
		got, done, err := streams.GetBatch(batchCtx, r.nc, "KV_"+bucket, streams.DirectGet{Seq: from, NextBySubj: prefix + key, Batch: kvBatch})
		cancel()
		if err != nil {
			return nil, fmt.Errorf("reading KV bucket %s: %w", bucket, err)
		}
		for _, m := range got {
			id := strings.TrimPrefix(m.Subject, prefix)
			if op := m.Header.Get("KV-Operation"); op == "DEL" || op == "PURGE" {
				delete(out, id)
				continue
			}
			out[id] = kvEntry{value: m.Data, written: m.Time}
		}
		if done || len(got) == 0 {
			return out, nil
		}
		from = got[len(got)-1].Seq + 1
	}
}

// rateState fills the rate-limit fields of row from the subscriber's
// relay_ratelimit entry (nil when it has none), read at the server time now.
func rateState(sub subscribers.Subscriber, e *kvEntry, now time.Time, row *Subscriber) {
	limit := ratelimit.Limit{Rate: sub.Rate, Burst: sub.Burst}
	var st ratelimit.State
	written := now
	full := true
	// No entry: nothing was sent lately (or the entry expired), which the
	// rate limiter reads as a full bucket and a closed breaker. A value
	// that is not a State was written around relay; the rate limiter
	// starts such a subscriber over from a full bucket, and so does the
	// report.
	if e != nil {
		if json.Unmarshal(e.value, &st) == nil {
			written, full = e.written, false
		} else {
			st = ratelimit.State{}
		}
	}
	row.EffectiveRate = ratelimit.EffectiveRate(st, limit)
	if !limit.Unlimited() {
		var tokens float64
		if full {
			// Refill never goes beyond the bucket's capacity, so an
			// unbounded start gives exactly a full bucket.
			tokens = ratelimit.Refill(math.Inf(1), now, now, 0, limit)
		} else {
			tokens = st.TokensAt(written, now, limit)
		}
		tokens = math.Round(tokens*1000) / 1000
		row.Tokens = &tokens
	}
	if st.PausedUntil.After(now) {
		row.PausedUntil = st.PausedUntil.UTC()
	}
	row.Circuit = st.CircuitAt(now)
	row.Failures = st.Failures
}
