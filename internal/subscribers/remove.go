package subscribers

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/internal/timeliness"
	"github.com/relay-dev/relay/streams"
)

// Dropped is what [Remove] dropped of a removed subscriber's deliveries,
// or what [Waiting] found it would.
type Dropped struct {
	Queued    uint64 `json:"queued"`
	Parked    uint64 `json:"parked"`
	Scheduled uint64 `json:"scheduled"`
}

// Total is every delivery counted.
func (d Dropped) Total() uint64 { return d.Queued + d.Parked + d.Scheduled }

// ErrWaiting means a removal not forced found deliveries waiting for the
// subscriber: removing it would drop them. The error is a [*WaitingError].
var ErrWaiting = errors.New("deliveries wait")

// WaitingError says how many deliveries a removal would drop. Its message
// says nothing of how to force it: `relay sub rm` says --yes, the API
// force=true.
type WaitingError struct {
	ID string
	Dropped
}

// Error is the one line, without the way to force the removal.
func (e *WaitingError) Error() string {
	return fmt.Sprintf("subscriber %s has %d deliveries waiting (%d queued, %d parked, %d scheduled)",
		e.ID, e.Total(), e.Queued, e.Parked, e.Scheduled)
}

// Unwrap returns [ErrWaiting].
func (e *WaitingError) Unwrap() error { return ErrWaiting }

// NotAllDroppedError means a subscriber was removed but not all its
// deliveries were dropped: removing it again, forced, drops the rest.
type NotAllDroppedError struct {
	ID  string
	Err error
}

func (e *NotAllDroppedError) Error() string {
	return fmt.Sprintf("subscriber %s removed, but its queued deliveries were not all dropped (remove it again, forced, to drop them): %v", e.ID, e.Err)
}

func (e *NotAllDroppedError) Unwrap() error { return e.Err }

// Removed is what [Remove] did.
type Removed struct {
	Dropped
	// Timeliness is the error of dropping its deadline counts, nil when
	// they went: only figures, so failing fails nothing else.
	Timeliness error `json:"-"`
}

// Remove removes subscriber id and drops its deliveries (see
// [queueSubjects]): dropped, not dead-lettered. Forced, it drops what a
// removal whose purge failed left of a subscriber already gone. Unless force, a subscriber
// with deliveries waiting is left as it is, with a [*WaitingError]. Its
// deadline counts go too, so that a subscriber added again under this id
// starts from nothing.
func Remove(ctx context.Context, js jetstream.JetStream, s *Store, id string, force bool) (Removed, error) {
	if err := ValidateID(id); err != nil {
		return Removed{}, err
	}
	if !force {
		if _, err := s.Get(ctx, id); err != nil && !errors.Is(err, ErrCorrupt) {
			return Removed{}, err
		}
		w, err := Waiting(ctx, js, id)
		if err != nil {
			return Removed{}, err
		}
		if w.Total() > 0 {
			return Removed{}, &WaitingError{ID: id, Dropped: w}
		}
	}
	// Forced again after a purge that failed, it finds no subscriber and
	// finishes the purge.
	gone := s.Delete(ctx, id)
	if gone != nil && !(force && errors.Is(gone, ErrNotFound)) {
		return Removed{}, gone
	}
	// Its deliveries have nowhere to go any more; leaving them would hold
	// stream space for ever. What a relay holds, or brings back later, it
	// drops as well (its subscriber was removed), never as a dead letter.
	n, err := purgeQueues(ctx, js, id)
	if err != nil {
		return Removed{Dropped: n}, &NotAllDroppedError{ID: id, Err: err}
	}
	if gone != nil && n.Total() == 0 {
		return Removed{}, gone
	}
	return Removed{Dropped: n, Timeliness: forgetTimeliness(ctx, js, id)}, nil
}

// queueSubjects are the subjects that hold a subscriber's deliveries: those
// queued on its lane or waiting in its overflow (deliveries.*.<id>), those
// parked for a retry (retries.wait.<id>.> and retries.due.<id>), and those
// scheduled until their Relay-Deliver-At (retries.at.<id>.>), with the
// count of [Dropped] each adds to.
func queueSubjects(id string, d *Dropped) []struct {
	stream, subject string
	count           *uint64
} {
	return []struct {
		stream, subject string
		count           *uint64
	}{
		{streams.Deliveries, streams.SubscriberDeliveries(id), &d.Queued},
		{streams.Retries, streams.RetryWaitPrefix + id + ".>", &d.Parked},
		{streams.Retries, streams.RetryDuePrefix + id, &d.Parked},
		{streams.Retries, streams.RetryAtPrefix + id + ".>", &d.Scheduled},
	}
}

// Waiting counts a subscriber's deliveries without dropping any.
func Waiting(ctx context.Context, js jetstream.JetStream, id string) (Dropped, error) {
	var d Dropped
	for _, q := range queueSubjects(id, &d) {
		stream, err := js.Stream(ctx, q.stream)
		if err != nil {
			return d, err
		}
		info, err := stream.Info(ctx, jetstream.WithSubjectFilter(q.subject))
		if err != nil {
			return d, err
		}
		for _, c := range info.State.Subjects {
			*q.count += c
		}
	}
	return d, nil
}

// purgeQueues drops a removed subscriber's deliveries (see
// [queueSubjects]), which would otherwise come back when due to be
// dropped by a relay one by one. It returns how many of each it dropped.
func purgeQueues(ctx context.Context, js jetstream.JetStream, id string) (Dropped, error) {
	var d Dropped
	for _, q := range queueSubjects(id, &d) {
		n, err := purgeSubjects(ctx, js, q.stream, q.subject)
		*q.count += n
		if err != nil {
			return d, err
		}
	}
	return d, nil
}

// forgetTimeliness deletes a removed subscriber's deadline counts. A
// cluster whose relays predate the relay_timeliness bucket has none to
// delete.
func forgetTimeliness(ctx context.Context, js jetstream.JetStream, id string) error {
	kv, err := js.KeyValue(ctx, streams.TimelinessBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("opening KV bucket %s: %w", streams.TimelinessBucket, err)
	}
	return timeliness.Delete(ctx, kv, id)
}

// purgeSubjects purges a subject filter from a stream and says how many
// messages it held.
func purgeSubjects(ctx context.Context, js jetstream.JetStream, name, filter string) (uint64, error) {
	stream, err := js.Stream(ctx, name)
	if err != nil {
		return 0, err
	}
	before, err := stream.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return 0, err
	}
	var n uint64
	for _, c := range before.State.Subjects {
		n += c
	}
	if n == 0 {
		return 0, nil
	}
	return n, stream.Purge(ctx, jetstream.WithPurgeSubject(filter))
}
