package deadletter

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/streams"
)

// DefaultLimit is how many entries [List] returns at most when given no
// limit. Entries are small (headers only), but a DLQ can hold millions after
// a long outage; ten thousand is more than a terminal can show and little
// enough memory for any machine.
const DefaultLimit = 10_000

// listBuffer bounds how many messages the ordered consumer of [List] keeps
// in the client at once.
const listBuffer = 500

// listConsumerIdle is how long the server keeps the ephemeral consumer of a
// [List] that ended without deleting it (its context cancelled, the
// connection lost).
const listConsumerIdle = time.Minute

// Filter selects DLQ entries by subscriber and reason. An empty field matches
// everything, so the zero Filter selects the whole DLQ.
type Filter struct {
	// Subscriber is the subscriber id to select, or "" for all.
	Subscriber string
	// Reason is the reason to select, or "" for all.
	Reason Reason
}

// Subject returns the DLQ filter subject that selects f's entries:
// dlq.<subscriber or *>.<reason or *>. The server does the filtering, so a
// narrow filter reads only the entries it selects.
func (f Filter) Subject() string {
	sub, reason := f.Subscriber, string(f.Reason)
	if sub == "" {
		sub = "*"
	}
	if reason == "" {
		reason = "*"
	}
	return "dlq." + sub + "." + reason
}

// validate reports a field of f that would change the meaning of its
// subject (a dot or a wildcard in a subscriber id, an unknown reason).
func (f Filter) validate() error {
	if f.Subscriber != "" {
		if err := subscribers.ValidateID(f.Subscriber); err != nil {
			return fmt.Errorf("%w: subscriber: %v", ErrInvalidFilter, err)
		}
	}
	if f.Reason != "" && !f.Reason.Valid() {
		return fmt.Errorf("%w: reason %q: valid reasons are %s", ErrInvalidFilter, f.Reason, reasonList())
	}
	return nil
}

// List returns the DLQ entries f selects, oldest first (in DLQ stream order),
// and an empty, non-nil slice when there are none.
//
// It reads with an ordered consumer filtered on [Filter.Subject] that
// delivers headers only: the server does the filtering, messages come in
// batches rather than one request each, and the bodies (up to the maximum
// event size each) never reach the client; Size comes from the server's
// Nats-Msg-Size header. It never waits for messages to arrive: it returns at
// once when the DLQ stream is empty or the consumer starts with nothing
// pending, and stops at the message after which the consumer reports nothing
// pending. Entries dead-lettered while it reads may or may not be included.
// The consumer is deleted before List returns; if that fails, the server
// removes it after a minute of inactivity.
//
// At most limit entries are returned, [DefaultLimit] when limit is 0 or less,
// so that a huge DLQ cannot exhaust memory. Past the limit, List returns the
// oldest limit entries together with an error wrapping [ErrTruncated] that
// says how many more matched; narrow the filter to see the others.
//
// A message that is not a DLQ copy relay could have written is left out, and
// List returns the others with an error wrapping [ErrMalformedEntry] that
// names the first such DLQ sequence and counts the rest. When the error
// wraps only [ErrTruncated] and [ErrMalformedEntry], the entries are valid.
// An invalid f returns an error wrapping [ErrInvalidFilter].
func List(ctx context.Context, js jetstream.JetStream, f Filter, limit int) ([]Entry, error) {
	if err := f.validate(); err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = DefaultLimit
	}
	stream, err := js.Stream(ctx, streams.DLQ)
	if err != nil {
		return nil, fmt.Errorf("deadletter: opening stream %s (relay run creates it): %w", streams.DLQ, err)
	}
	entries := []Entry{}
	if info := stream.CachedInfo(); info != nil && info.State.Msgs == 0 {
		return entries, nil
	}
	oc, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects:    []string{f.Subject()},
		HeadersOnly:       true,
		InactiveThreshold: listConsumerIdle,
		MaxResetAttempts:  3,
	})
	if err != nil {
		return nil, fmt.Errorf("deadletter: reading stream %s: %w", streams.DLQ, err)
	}
	defer deleteConsumer(ctx, js, oc)
	if info := oc.CachedInfo(); info != nil && info.NumPending == 0 {
		return entries, nil
	}
	it, err := oc.Messages(jetstream.PullMaxMessages(min(limit, listBuffer)))
	if err != nil {
		return nil, fmt.Errorf("deadletter: reading stream %s: %w", streams.DLQ, err)
	}
	defer it.Stop()

	var (
		malformed []error
		pending   uint64
	)
	for {
		msg, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			return nil, fmt.Errorf("deadletter: reading stream %s: %w", streams.DLQ, err)
		}
		meta, err := msg.Metadata()
		if err != nil {
			return nil, fmt.Errorf("deadletter: reading stream %s: %w", streams.DLQ, err)
		}
		e, err := EntryFromMsg(msg.Subject(), msg.Headers(), msg.Data(), meta.Sequence.Stream)
		if err != nil {
			malformed = append(malformed, err)
		} else {
			if e.DeadAt.IsZero() {
				// Relay always sets Relay-Dead-At; for a copy that lacks it,
				// the time JetStream stored it is the next best thing.
				e.DeadAt = meta.Timestamp.UTC()
			}
			entries = append(entries, e)
		}
		pending = meta.NumPending
		if pending == 0 || len(entries) == limit {
			break
		}
	}
	var errs []error
	if len(malformed) > 0 {
		err := malformed[0]
		if len(malformed) > 1 {
			err = fmt.Errorf("%w (and %d more malformed messages)", err, len(malformed)-1)
		}
		errs = append(errs, err)
	}
	if pending > 0 {
		errs = append(errs, fmt.Errorf("%w: listed the oldest %d, %d more match", ErrTruncated, len(entries), pending))
	}
	return entries, errors.Join(errs...)
}

// deleteConsumer removes the ordered consumer of a finished [List] at once
// rather than leaving it to the inactivity threshold. It is best effort:
// with ctx done, or the server unreachable, the threshold removes it.
func deleteConsumer(ctx context.Context, js jetstream.JetStream, c jetstream.Consumer) {
	info := c.CachedInfo()
	if info == nil || ctx.Err() != nil {
		return
	}
	_ = js.DeleteConsumer(ctx, streams.DLQ, info.Name)
}
