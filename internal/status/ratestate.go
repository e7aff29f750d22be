package status

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

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
		next, done, err := r.directBatch(ctx, "KV_"+bucket, prefix+key, from, kvBatch, func(m *nats.Msg, subject string, at time.Time) {
			id := strings.TrimPrefix(subject, prefix)
			if op := m.Header.Get("KV-Operation"); op == "DEL" || op == "PURGE" {
				delete(out, id)
				return
			}
			out[id] = kvEntry{value: m.Data, written: at}
		})
		if err != nil {
			return nil, fmt.Errorf("status: reading KV bucket %s: %w", bucket, err)
		}
		if done {
			return out, nil
		}
		from = next
	}
}

// directGetRequest is the request of a batched direct get.
type directGetRequest struct {
	Seq        uint64 `json:"seq"`
	NextBySubj string `json:"next_by_subj"`
	Batch      int    `json:"batch"`
}

// directBatch sends one batched direct get of up to n messages on subject
// from sequence from on, and gives each to fn with its subject and stored
// time. It returns the sequence to go on from, and done when the subject
// has nothing after what was read.
func (r *reader) directBatch(ctx context.Context, stream, subject string, from uint64, n int, fn func(m *nats.Msg, subject string, at time.Time)) (next uint64, done bool, err error) {
	req, err := json.Marshal(directGetRequest{Seq: from, NextBySubj: subject, Batch: n})
	if err != nil {
		return 0, false, err
	}
	inbox := r.nc.NewRespInbox()
	sub, err := r.nc.SubscribeSync(inbox)
	if err != nil {
		return 0, false, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := r.nc.PublishRequest("$JS.API.DIRECT.GET."+stream, inbox, req); err != nil {
		return 0, false, err
	}
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	next = from
	for read := 0; ; {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return 0, false, err
		}
		if status := m.Header.Get("Status"); status != "" {
			switch status {
			case "204": // end of the batch
				pending, perr := strconv.ParseUint(m.Header.Get("Nats-Num-Pending"), 10, 64)
				return next, perr == nil && pending == 0, nil
			case "404": // nothing on the subject from that sequence on
				return next, true, nil
			}
			return 0, false, fmt.Errorf("%w on %s: status %s %s", ErrDirectGet, subject, status, m.Header.Get("Description"))
		}
		seq, err := strconv.ParseUint(m.Header.Get("Nats-Sequence"), 10, 64)
		if err != nil {
			return 0, false, fmt.Errorf("%w on %s: no sequence", ErrDirectGet, subject)
		}
		at, err := time.Parse(time.RFC3339Nano, m.Header.Get("Nats-Time-Stamp"))
		if err != nil {
			return 0, false, fmt.Errorf("%w on %s: no time stamp", ErrDirectGet, subject)
		}
		fn(m, m.Header.Get("Nats-Subject"), at)
		next = seq + 1
		if read++; read == n {
			// The server still sends its end-of-batch status, which
			// says whether more follow; the next batch asks anyway.
			return next, false, nil
		}
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
