package deadletter

import (
	"fmt"
	"slices"
	"time"

	"github.com/relay-dev/relay/internal/deliver"
	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/streams"
)

// Filter selects DLQ entries. An empty field matches everything, so the zero
// Filter selects the whole DLQ.
//
// Subscriber and Reason are the tokens of the subject dlq.<subscriber>.
// <reason>, and Since is a start time: the server does that selection, so a
// narrow filter reads only what it selects. Type and Until are judged on
// each entry the server sends (headers only), and so is Event. Seqs, when set, names the
// entries outright and the other fields must be empty.
type Filter struct {
	// Subscriber is the subscriber id to select, or "" for all.
	Subscriber string
	// Reason is the reason to select, or "" for all.
	Reason Reason
	// Type is an event type or a pattern with the wildcards of `relay sub
	// add --events` (video.*, order.>), or "" for all.
	Type string
	// Event is an event id, or the webhook-id its subscriber saw (see
	// deliver.WebhookID), or "" for all.
	Event string
	// Since and Until bound when an entry was stored in the DLQ (the moment
	// its delivery died), inclusive; zero for no bound.
	Since, Until time.Time
	// Seqs are the DLQ sequences to select, or nil to select by the other
	// fields.
	Seqs []uint64
	// After, when not 0, selects only entries of DLQ sequences above it:
	// a page of a listing begins after the last entry of the one before,
	// and the server starts there.
	After uint64
}

// Subject returns the DLQ filter subject that selects f's subscriber and
// reason: dlq.<subscriber or *>.<reason or *>.
func (f Filter) Subject() string {
	sub, reason := f.Subscriber, string(f.Reason)
	if sub == "" {
		sub = "*"
	}
	if reason == "" {
		reason = "*"
	}
	return streams.DeadLetterSubject(sub, reason)
}

// bySubject reports whether the subject alone decides what f selects, so
// that a server-side purge of [Filter.Subject] does exactly what f says.
func (f Filter) bySubject() bool {
	return f.Seqs == nil && f.Type == "" && f.Event == "" && f.Since.IsZero() && f.Until.IsZero() && f.After == 0
}

// validate reports a field of f that would change the meaning of its
// subject (a dot or a wildcard in a subscriber id, an unknown reason), an
// invalid type pattern, bounds the wrong way round, or Seqs combined with
// another field.
func (f Filter) validate() error {
	if f.Subscriber != "" {
		if err := validSubscriber(f.Subscriber); err != nil {
			return fmt.Errorf("%w: subscriber: %v", ErrInvalidFilter, err)
		}
	}
	if f.Reason != "" && !f.Reason.Valid() {
		return fmt.Errorf("%w: reason %q: valid reasons are %s", ErrInvalidFilter, f.Reason, reasonList())
	}
	if f.Type != "" {
		if err := subscribers.ValidateFilter(f.Type); err != nil {
			return fmt.Errorf("%w: type: %v", ErrInvalidFilter, err)
		}
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && f.Until.Before(f.Since) {
		return fmt.Errorf("%w: until %s is before since %s", ErrInvalidFilter, f.Until.UTC().Format(time.RFC3339), f.Since.UTC().Format(time.RFC3339))
	}
	if f.Seqs != nil {
		if f.Subscriber != "" || f.Reason != "" || f.Type != "" || f.Event != "" || !f.Since.IsZero() || !f.Until.IsZero() || f.After != 0 {
			return fmt.Errorf("%w: sequences select entries on their own; give them without other filters", ErrInvalidFilter)
		}
		if slices.Contains(f.Seqs, 0) {
			return fmt.Errorf("%w: DLQ sequences start at 1", ErrInvalidFilter)
		}
	}
	return nil
}

// matches judges what the server could not: the event type, the event
// and the end bound (and the start bound, when After set where to start).
// stored is when the entry was stored in the DLQ.
func (f Filter) matches(e Entry, stored time.Time) bool {
	if f.Type != "" && !subscribers.MatchFilter(f.Type, e.EventType) {
		return false
	}
	if f.Event != "" && e.EventID != f.Event && deliver.WebhookID(e.EventID) != f.Event {
		return false
	}
	if e.DLQSeq <= f.After {
		return false
	}
	if !f.Since.IsZero() && stored.Before(f.Since) {
		return false
	}
	return f.Until.IsZero() || !stored.After(f.Until)
}
