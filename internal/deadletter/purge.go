package deadletter

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/streams"
)

// Count returns how many DLQ entries f selects. A filter of subscriber and
// reason alone is counted by the server from its subject index, without
// reading an entry; any other is a headers-only [Scan].
func Count(ctx context.Context, js jetstream.JetStream, f Filter) (uint64, error) {
	if err := f.validate(); err != nil {
		return 0, err
	}
	if f.bySubject() {
		n, _, err := subjectCount(ctx, js, f.Subject())
		return n, err
	}
	var n uint64
	err := Scan(ctx, js, f, func(Entry) error {
		n++
		return nil
	})
	if errors.Is(err, ErrMalformedEntry) {
		err = nil // not entries relay would purge
	}
	return n, err
}

// subjectCount is how many messages of the DLQ stream a subject filter
// holds, and the stream's last sequence when they were counted.
func subjectCount(ctx context.Context, js jetstream.JetStream, subject string) (n, last uint64, err error) {
	stream, err := js.Stream(ctx, streams.DLQ)
	if err != nil {
		return 0, 0, fmt.Errorf("opening stream %s (relay run creates it): %w", streams.DLQ, err)
	}
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		return 0, 0, fmt.Errorf("counting %s: %w", subject, err)
	}
	for _, c := range info.State.Subjects {
		n += c
	}
	return n, info.State.LastSeq, nil
}

// Purge removes the DLQ entries f selects for good and returns how many it
// removed. A filter of subscriber and reason alone is one server-side purge
// of its subject up to the last entry counted, whatever the number of
// entries, so that a dead letter stored meanwhile is neither removed nor
// counted; it removes whatever the subject holds, malformed messages too.
// Any other filter removes the entries a [Scan] selects one by one, and
// leaves alone messages that are not DLQ copies relay could have written.
func Purge(ctx context.Context, js jetstream.JetStream, f Filter) (uint64, error) {
	if err := f.validate(); err != nil {
		return 0, err
	}
	stream, err := js.Stream(ctx, streams.DLQ)
	if err != nil {
		return 0, fmt.Errorf("opening stream %s (relay run creates it): %w", streams.DLQ, err)
	}
	if f.bySubject() {
		n, last, err := subjectCount(ctx, js, f.Subject())
		if err != nil || n == 0 {
			return 0, err
		}
		if err := stream.Purge(ctx, jetstream.WithPurgeSubject(f.Subject()), jetstream.WithPurgeSequence(last+1)); err != nil {
			return 0, fmt.Errorf("purging %s: %w", f.Subject(), err)
		}
		return n, nil
	}
	var n uint64
	err = Scan(ctx, js, f, func(e Entry) error {
		if err := remove(ctx, stream, e.DLQSeq); err != nil {
			return fmt.Errorf("removing DLQ sequence %d: %w", e.DLQSeq, err)
		}
		n++
		return nil
	})
	if errors.Is(err, ErrMalformedEntry) {
		err = nil
	}
	return n, err
}
