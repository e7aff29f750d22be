package timeliness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/streams"
)

// Counts is one subscriber's value in the relay_timeliness bucket, the sum
// over every relay: the format `relay status` and the nats CLI read.
type Counts struct {
	// Met counts deliveries with a deadline that the subscriber accepted
	// (a 2xx) before it passed.
	Met uint64 `json:"met"`
	// Missed counts deliveries dead-lettered because their deadline had
	// passed when they reached their lane, or a retry would have landed
	// after it: those the subscriber did not get in time, and never will.
	Missed uint64 `json:"missed"`
}

// InTime returns the share of the counted deliveries that met their
// deadline, Met/(Met+Missed), and false when nothing was counted: a
// subscriber whose events carry no deadline has no ratio, which is not the
// same as a ratio of 0.
func (c Counts) InTime() (float64, bool) {
	total := c.Met + c.Missed
	if total == 0 {
		return 0, false
	}
	return float64(c.Met) / float64(total), true
}

// add returns the sum of c and d.
func (c Counts) add(d Counts) Counts {
	return Counts{Met: c.Met + d.Met, Missed: c.Missed + d.Missed}
}

// zero reports whether nothing is counted.
func (c Counts) zero() bool { return c.Met == 0 && c.Missed == 0 }

// Decode reads a relay_timeliness value. It is the one place the format is
// parsed, so that the relays that write it and `relay status` that reads it
// cannot disagree; a value that is not Counts (written around relay) is an
// error wrapping [ErrCorrupt].
func Decode(value []byte) (Counts, error) {
	var c Counts
	if err := json.Unmarshal(value, &c); err != nil {
		return Counts{}, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return c, nil
}

// Read returns the counts stored for subscriber, the sum over every relay
// of what they have flushed; zero counts when it has none. It is one get,
// for a caller that needs one subscriber; `relay status` reads every key in
// batches instead.
func Read(ctx context.Context, kv jetstream.KeyValue, subscriber string) (Counts, error) {
	e, err := kv.Get(ctx, subscriber)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Counts{}, nil
	}
	if err != nil {
		return Counts{}, fmt.Errorf("timeliness: reading the counts of %s in %s: %w", subscriber, streams.TimelinessBucket, err)
	}
	c, err := Decode(e.Value())
	if err != nil {
		return Counts{}, fmt.Errorf("timeliness: the counts of %s in %s: %w", subscriber, streams.TimelinessBucket, err)
	}
	return c, nil
}

// Delete removes the counts of subscriber, for `relay sub rm`: a subscriber
// added again later under the same id starts from nothing instead of
// inheriting its predecessor's figures. A subscriber without counts is not
// an error, and costs a read but no write, so that removing subscribers
// that never had a deadline leaves no delete marker in the bucket.
func Delete(ctx context.Context, kv jetstream.KeyValue, subscriber string) error {
	if _, err := kv.Get(ctx, subscriber); errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	} else if err != nil {
		return fmt.Errorf("timeliness: reading the counts of %s in %s: %w", subscriber, streams.TimelinessBucket, err)
	}
	if err := kv.Delete(ctx, subscriber); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("timeliness: deleting the counts of %s in %s: %w", subscriber, streams.TimelinessBucket, err)
	}
	return nil
}
