package status

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/internal/attempts"
	"github.com/relay-dev/relay/internal/deadletter"
	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/streams"
)

// LastErrors is how many of a subscriber's newest dead letters [Describe]
// reads: enough to tell one error repeating from several kinds, few enough
// to cost a handful of reads whatever the DLQ holds.
const LastErrors = 5

// maxDeadReads bounds the message reads of one search for a subscriber's
// newest dead letters (see [reader.lastDead]); past it the detail shows the
// newest it has found, which is still the newest, only fewer.
const maxDeadReads = 64

// Detail is what `relay status --subscriber ID` shows: the subscriber's row
// and its newest dead letters, newest first, which say what went wrong in
// the receiver's own words (Relay-Last-Status, Relay-Last-Error) without a
// trip through `relay dlq ls`.
type Detail struct {
	Subscriber
	// LastErrors are at most [LastErrors] of the subscriber's newest dead
	// letters, newest first; empty, never null, when it has none.
	LastErrors []deadletter.Entry `json:"last_errors"`
	// LastFailedAttempts are at most [LastErrors] of the subscriber's
	// newest failed attempts (a 429 with its Retry-After, a 503, a
	// timeout…) and deaths, newest first, from ATTEMPTS: what goes wrong
	// before anything is dead. Empty, never null, when there are none or
	// no relay records attempts.
	LastFailedAttempts []attempts.Record `json:"last_failed_attempts"`
}

// Describe reads the status of one subscriber, as `relay status
// --subscriber` prints it. It costs what [Collect] costs for one subscriber,
// with stream infos filtered to its own subjects, plus the counts of its
// parked and its scheduled deliveries (a stream info each that sends no
// subject, made only while RETRIES holds any) and the search for its last
// dead letters: a few message reads, at most [maxDeadReads].
func Describe(ctx context.Context, js jetstream.JetStream, sub subscribers.Subscriber, sharedLanes int) (Detail, error) {
	if sharedLanes < 1 {
		return Detail{}, fmt.Errorf("%w, got %d", ErrInvalidLanes, sharedLanes)
	}
	r, err := open(ctx, js)
	if err != nil {
		return Detail{}, err
	}
	c, err := r.counts(ctx, only(sub.ID))
	if err != nil {
		return Detail{}, err
	}
	entries, err := r.rateEntries(ctx, sub.ID)
	if err != nil {
		return Detail{}, err
	}
	deadlines, err := r.timelinessCounts(ctx, sub.ID)
	if err != nil {
		return Detail{}, err
	}
	rows := make([]Subscriber, 1)
	if err := r.rows(ctx, c, entries, deadlines, []subscribers.Subscriber{sub}, sharedLanes, rows); err != nil {
		return Detail{}, err
	}
	d := Detail{Subscriber: rows[0], LastErrors: []deadletter.Entry{}, LastFailedAttempts: []attempts.Record{}}
	parked := c.due[sub.ID]
	if c.waiting {
		n, err := r.waiting(ctx, sub.ID)
		if err != nil {
			return Detail{}, err
		}
		parked += n
	}
	d.Parked = &parked
	scheduled := c.scheduled
	d.Scheduled = &scheduled
	d.Hint = hint(d.Subscriber)
	if d.Dead > 0 {
		if d.LastErrors, err = r.lastDead(ctx, sub.ID, c.dlqFirst, c.dlqLast, LastErrors); err != nil {
			return Detail{}, err
		}
	}
	if d.LastFailedAttempts, err = lastFailedAttempts(ctx, r.attempts, sub.ID, LastErrors); err != nil {
		return Detail{}, err
	}
	return d, nil
}

// lastFailedAttempts returns up to n of the newest records of subscriber
// id's failed attempts in ATTEMPTS (s), newest first, by the search of
// [newestOn]. No ATTEMPTS (s nil: no relay records attempts, or a user not
// granted it) is none.
func lastFailedAttempts(ctx context.Context, s jetstream.Stream, id string, n int) ([]attempts.Record, error) {
	out := []attempts.Record{}
	if s == nil {
		return out, nil
	}
	state := s.CachedInfo().State
	if state.Msgs == 0 {
		return out, nil
	}
	msgs, err := newestOn(ctx, s, streams.SubscriberFailures(id), state.FirstSeq, state.LastSeq, n)
	if err != nil {
		return nil, fmt.Errorf("reading the last failed attempts of %s: %w", id, err)
	}
	for _, m := range msgs {
		if r, ok := attempts.Failure(m.Data); ok && r.Subscriber == id {
			out = append(out, r)
		}
	}
	return out, nil
}

// lastDead returns up to n of the newest dead letters of subscriber id,
// newest first, from the DLQ's sequences first to last.
//
// The DLQ cannot be read backwards, and a subscriber's letters may be
// anywhere among everyone's, so the search looks back from the end in
// windows that double (2n sequences, then 4n, ...) and, in a window that
// holds more than it needs, halves it and searches the upper half first.
// Each step reads at most one more message than it needs, forward by
// subject, so the search costs about n reads per halving and one per empty
// window: a few dozen reads on a DLQ of millions, and never one per entry.
// Entries that are not DLQ copies relay could have written are left out.
func (r *reader) lastDead(ctx context.Context, id string, first, last uint64, n int) ([]deadletter.Entry, error) {
	msgs, err := newestOn(ctx, r.dlq, streams.DeadLetterFilter(id), first, last, n)
	if err != nil {
		return nil, fmt.Errorf("reading the last dead letters of %s: %w", id, err)
	}
	entries := make([]deadletter.Entry, 0, len(msgs))
	for _, m := range msgs {
		e, err := deadletter.EntryFromMsg(m.Subject, m.Header, m.Data, m.Sequence)
		if err != nil {
			continue
		}
		if e.DeadAt.IsZero() {
			e.DeadAt = m.Time.UTC()
		}
		entries = append(entries, e)
	}
	return entries, nil
}

// newestOn returns up to n of the newest messages of stream on filter, from
// its sequences first to last, newest first, by the search [reader.lastDead]
// describes.
func newestOn(ctx context.Context, stream jetstream.Stream, filter string, first, last uint64, n int) ([]*jetstream.RawStreamMsg, error) {
	s := &deadSearch{stream: stream, filter: filter}
	first = max(first, 1)
	var msgs []*jetstream.RawStreamMsg
	hi, span := last+1, uint64(2*n)
	for len(msgs) < n && hi > first {
		lo := first
		if hi-first > span {
			lo = hi - span
		}
		got, err := s.newest(ctx, lo, hi, n-len(msgs))
		if errors.Is(err, errReadBudget) {
			break
		}
		if err != nil {
			return nil, err
		}
		msgs = append(msgs, got...)
		hi, span = lo, span*2
	}
	return msgs, nil
}

// deadSearch is one search of [newestOn].
type deadSearch struct {
	stream jetstream.Stream
	filter string
	reads  int
}

// newest returns up to need of the newest messages on s.filter whose
// sequences are in [lo, hi), newest first.
func (s *deadSearch) newest(ctx context.Context, lo, hi uint64, need int) ([]*jetstream.RawStreamMsg, error) {
	if need <= 0 || lo >= hi {
		return nil, nil
	}
	var found []*jetstream.RawStreamMsg
	for seq := lo; len(found) <= need; {
		if s.reads >= maxDeadReads {
			return nil, errReadBudget
		}
		s.reads++
		m, err := s.stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(s.filter))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return nil, err
		}
		if m.Sequence >= hi {
			break
		}
		found = append(found, m)
		seq = m.Sequence + 1
	}
	if len(found) <= need {
		slices.Reverse(found)
		return found, nil
	}
	// More than need in [lo, hi), so at least two sequences: the newest
	// are in the upper half if it holds enough of them.
	mid := lo + (hi-lo)/2
	upper, err := s.newest(ctx, mid, hi, need)
	if err != nil || len(upper) == need {
		return upper, err
	}
	lower, err := s.newest(ctx, lo, mid, need-len(upper))
	return append(upper, lower...), err
}
