package ratelimit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/streams"
)

// Reset ends a subscriber's Retry-After pause and closes its circuit, as
// `relay sub resume` does once its receiver is fixed: without it an open
// circuit holds every delivery until its cool-down (up to MaxCooldown)
// ends and a probe succeeds. It clears the pause, the open circuit, a
// claimed probe, the failures shown and the run of cool-downs in the
// subscriber's entry, compare-and-set, and keeps its tokens and adaptive
// rate. Every relay learns of it from its watch (see [Shared.Follow]): its
// lanes send again at once, and its count of failures starts afresh (see
// [subscriber.circuitChanged]). It returns the entry as it was; a missing
// bucket or key has nothing to reset and returns the zero State.
func Reset(ctx context.Context, js jetstream.JetStream, id string) (State, error) {
	kv, err := js.KeyValue(ctx, streams.RateLimitBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return State{}, nil
	}
	if err != nil {
		return State{}, fmt.Errorf("%w: %w", ErrBucket, err)
	}
	for {
		e, err := kv.Get(ctx, id)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return State{}, nil
		}
		if err != nil {
			return State{}, fmt.Errorf("%w: reading %s: %w", ErrBucket, id, err)
		}
		var was State
		if err := json.Unmarshal(e.Value(), &was); err != nil {
			// Not ours (written by hand): the limiter starts such an
			// entry over from a full bucket anyway.
			return State{}, nil
		}
		st := was
		st.PausedUntil, st.OpenUntil, st.ProbeUntil = time.Time{}, time.Time{}, time.Time{}
		st.Failures, st.Opens = 0, 0
		if st == was {
			return was, nil
		}
		raw, err := json.Marshal(st)
		if err != nil {
			return State{}, err
		}
		_, err = kv.Update(ctx, id, raw, e.Revision())
		if isRevisionMismatch(err) {
			continue // a relay's lease or outcome got in between
		}
		if err != nil {
			return State{}, fmt.Errorf("%w: writing %s: %w", ErrBucket, id, err)
		}
		return was, nil
	}
}
