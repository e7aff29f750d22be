package deadletter

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/streams"
)

// DefaultLimit is how many entries `relay dlq ls` lists unless told
// otherwise: a DLQ can hold millions after a long outage, and ten thousand
// lines are more than a terminal can show. Listing streams, so a larger
// limit costs time, not memory.
const DefaultLimit = 10_000

// listBuffer bounds how many messages the ordered consumer of [Scan] keeps
// in the client at once.
const listBuffer = 500

// listConsumerIdle is how long the server keeps the ephemeral consumer of a
// [Scan] that ended without deleting it (its context cancelled, the
// connection lost).
const listConsumerIdle = time.Minute

// errStop ends a [Scan] from its callback without an error.
var errStop = errors.New("stop")

// Scan calls fn with each DLQ entry f selects, oldest first (in DLQ stream
// order), and returns the first error fn returns. It holds one batch of
// entries at a time, whatever the DLQ's size, so that listing, replaying or
// purging millions of entries costs the memory of a few hundred.
//
// It reads with an ordered consumer filtered on [Filter.Subject], starting
// at f.Since, that delivers headers only: the server does that filtering,
// messages come in batches rather than one request each, and the bodies (up
// to the maximum event size each) never reach the client; Size comes from
// the server's Nats-Msg-Size header. Type and Until are judged on each
// entry; the scan ends at the first entry stored after Until. It never
// waits for messages to arrive: it returns at once when the DLQ stream is
// empty or the consumer starts with nothing pending, and stops at the
// message after which the consumer reports nothing pending. Entries
// dead-lettered while it reads may or may not be included. The consumer is
// deleted before Scan returns; if that fails, the server removes it after a
// minute of inactivity. With f.Seqs, Scan reads those entries one by one,
// bodies included, in the order given, and leaves out those not in the DLQ.
//
// A message that is not a DLQ copy relay could have written is left out, and
// Scan returns, after the others, an error wrapping [ErrMalformedEntry] that
// names the first such DLQ sequence and counts the rest. An invalid f
// returns an error wrapping [ErrInvalidFilter] before reading anything.
func Scan(ctx context.Context, js jetstream.JetStream, f Filter, fn func(Entry) error) error {
	_, err := scan(ctx, js, f, fn)
	return err
}

// scan is [Scan], and also says how many messages of the subject filter
// were still pending when fn stopped it with errStop.
func scan(ctx context.Context, js jetstream.JetStream, f Filter, fn func(Entry) error) (uint64, error) {
	if err := f.validate(); err != nil {
		return 0, err
	}
	stream, err := js.Stream(ctx, streams.DLQ)
	if err != nil {
		return 0, fmt.Errorf("opening stream %s (relay run creates it): %w", streams.DLQ, err)
	}
	if f.Seqs != nil {
		return 0, scanSeqs(ctx, stream, f.Seqs, fn)
	}
	info := stream.CachedInfo()
	if info == nil || info.State.Msgs == 0 {
		return 0, nil
	}
	// The scan ends at the DLQ's last entry as it starts: entries dead-
	// lettered meanwhile would keep a listing going for ever.
	last := info.State.LastSeq
	cfg := jetstream.OrderedConsumerConfig{
		FilterSubjects:    []string{f.Subject()},
		HeadersOnly:       true,
		InactiveThreshold: listConsumerIdle,
		MaxResetAttempts:  3,
	}
	switch {
	case f.After != 0:
		// Since, if given too, is judged on each entry.
		if f.After >= last {
			return 0, nil
		}
		cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		cfg.OptStartSeq = f.After + 1
	case !f.Since.IsZero():
		since := f.Since
		cfg.DeliverPolicy = jetstream.DeliverByStartTimePolicy
		cfg.OptStartTime = &since
	}
	oc, err := stream.OrderedConsumer(ctx, cfg)
	if err != nil {
		return 0, fmt.Errorf("reading stream %s: %w", streams.DLQ, err)
	}
	defer deleteConsumer(ctx, js, oc)
	if info := oc.CachedInfo(); info != nil && info.NumPending == 0 {
		return 0, nil
	}
	it, err := oc.Messages(jetstream.PullMaxMessages(listBuffer))
	if err != nil {
		return 0, fmt.Errorf("reading stream %s: %w", streams.DLQ, err)
	}
	defer it.Stop()

	var (
		bad  malformed
		seen uint64 // the last sequence read
	)
	for {
		msg, err := nextEntry(ctx, it, stream, f.Subject(), seen, last)
		if errors.Is(err, errNoMore) {
			break
		}
		if err != nil {
			return 0, fmt.Errorf("reading stream %s: %w", streams.DLQ, err)
		}
		meta, err := msg.Metadata()
		if err != nil {
			return 0, fmt.Errorf("reading stream %s: %w", streams.DLQ, err)
		}
		seen = meta.Sequence.Stream
		if seen > last || (!f.Until.IsZero() && meta.Timestamp.After(f.Until)) {
			break
		}
		e, err := EntryFromMsg(msg.Subject(), msg.Headers(), msg.Data(), meta.Sequence.Stream)
		switch {
		case err != nil:
			bad.add(err)
		case f.matches(e, meta.Timestamp):
			if e.DeadAt.IsZero() {
				// Relay always sets Relay-Dead-At; for a copy that lacks it,
				// the time JetStream stored it is the next best thing.
				e.DeadAt = meta.Timestamp.UTC()
			}
			if err := fn(e); err != nil {
				return meta.NumPending, err
			}
		}
		if meta.NumPending == 0 || seen == last {
			break
		}
	}
	return 0, bad.err()
}

// errNoMore ends a scan whose remaining entries were removed while it read.
var errNoMore = errors.New("nothing more to read")

// nextWait is how long a scan waits for its next entry before it asks the
// stream whether one is left.
const nextWait = 2 * time.Second

// nextEntry returns the scan's next message. When none comes within
// nextWait, it asks the stream for the next message of the subject after
// seen: if there is none up to last (another replay or purge removed the
// rest of the selection), the scan is over, rather than waiting for ever
// for messages that will not come.
func nextEntry(ctx context.Context, it jetstream.MessagesContext, stream jetstream.Stream, subject string, seen, last uint64) (jetstream.Msg, error) {
	for {
		wait, cancel := context.WithTimeout(ctx, nextWait)
		msg, err := it.Next(jetstream.NextContext(wait))
		cancel()
		if err == nil || ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
			return msg, err
		}
		raw, err := stream.GetMsg(ctx, seen+1, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) || (err == nil && raw.Sequence > last) {
			return nil, errNoMore
		}
		if err != nil {
			return nil, err
		}
	}
}

// scanSeqs is [Scan] of named sequences.
func scanSeqs(ctx context.Context, stream jetstream.Stream, seqs []uint64, fn func(Entry) error) error {
	var bad malformed
	for _, seq := range seqs {
		m, err := get(ctx, stream, seq)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if errors.Is(err, ErrMalformedEntry) {
			bad.add(err)
			continue
		}
		if err != nil {
			return err
		}
		if err := fn(m.Entry); err != nil {
			return err
		}
	}
	return bad.err()
}

// malformed gathers the messages a scan left out.
type malformed []error

func (m *malformed) add(err error) { *m = append(*m, err) }

// err names the first and counts the rest.
func (m malformed) err() error {
	if len(m) == 0 {
		return nil
	}
	if len(m) > 1 {
		return fmt.Errorf("%w (and %d more malformed messages)", m[0], len(m)-1)
	}
	return m[0]
}

// List returns the DLQ entries f selects, oldest first, as [Scan] reads
// them, and an empty, non-nil slice when there are none.
//
// At most limit entries are returned, all of them when limit is 0 or less.
// Past the limit, List returns the oldest limit entries together with an
// error wrapping [ErrTruncated] that says how many more messages of the
// subject filter remain (an upper bound when Type or Until narrow it).
// Malformed messages are left out as [Scan] does, with its error. When the
// error wraps only [ErrTruncated] and [ErrMalformedEntry], the entries are
// valid.
func List(ctx context.Context, js jetstream.JetStream, f Filter, limit int) ([]Entry, error) {
	entries := []Entry{}
	pending, err := scan(ctx, js, f, func(e Entry) error {
		if limit > 0 && len(entries) == limit {
			return errStop
		}
		entries = append(entries, e)
		return nil
	})
	if errors.Is(err, errStop) {
		return entries, fmt.Errorf("%w: listed the oldest %d, up to %d more match", ErrTruncated, len(entries), pending+1)
	}
	if err != nil && !errors.Is(err, ErrMalformedEntry) {
		return nil, err
	}
	return entries, err
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
