package attempts

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/internal/deliver"
	"github.com/relay-dev/relay/streams"
)

// ErrNoRecords is returned by [Read] for an event ATTEMPTS holds nothing of:
// not fanned out yet, older than ATTEMPTS keeps, published to no subscriber,
// to one whose lane has not attempted it yet (see [Fanout.Plain]), or
// handled by relays that record no attempts.
var ErrNoRecords = errors.New("no records of this event")

// ErrNoStream is returned when ATTEMPTS does not exist: no relay that
// records attempts has run on this cluster.
var ErrNoStream = errors.New("no " + streams.Attempts + " stream (no relay run has recorded attempts here; relay run --record-attempts=false records none)")

// maxReads bounds the records one [Read] reads: far more than one event's
// attempts to all its subscribers make in 72 hours, with the defaults.
const maxReads = 20_000

// State is where one subscriber's delivery of an event is now, as its records
// say.
type State string

const (
	// StateDelivered: the subscriber answered 2xx.
	StateDelivered State = "delivered"
	// StateWaiting: a retry is parked until a time (Until), after Why.
	StateWaiting State = "waiting"
	// StateQueued: on the subscriber's lane, not attempted yet (or handed
	// back to JetStream after an attempt whose outcome could not be
	// stored).
	StateQueued State = "queued"
	// StateOverflow: in the subscriber's overflow, behind its backlog.
	StateOverflow State = "overflow"
	// StateScheduled: held until the event's Relay-Deliver-At (Until).
	StateScheduled State = "scheduled"
	// StateDead: dead-lettered (Reason, DLQSeq).
	StateDead State = "dead"
	// StateRemoved: its subscriber was removed with relay sub rm, which
	// drops what waits for it. No record says it: relay trace finds the
	// subscriber removed (subscribers.Store.Removed).
	StateRemoved State = "removed"
)

// Delivery is one subscriber's part of a [Trace]: its state now and every
// attempt, oldest first.
type Delivery struct {
	Subscriber string `json:"subscriber"`
	State      State  `json:"state"`
	// At is when it reached that state, when a record says.
	At time.Time `json:"at,omitzero"`
	// Until is when a waiting retry or a scheduled copy is due.
	Until time.Time `json:"until,omitzero"`
	// Why says why it waits, or why it died.
	Why string `json:"why,omitempty"`
	// Reason and DLQSeq name a dead delivery's dead letter.
	Reason string `json:"reason,omitempty"`
	DLQSeq uint64 `json:"dlq_seq,omitempty"`
	// Attempts are its attempt records, oldest first (deaths without an
	// attempt have Attempt 0).
	Attempts []Record `json:"attempts"`
}

// Trace is what `relay trace EVENT_ID` shows: the event's fan-outs and, for
// each subscriber it matched, its delivery.
type Trace struct {
	Event string `json:"event"`
	Type  string `json:"type,omitempty"`
	// FannedOut is when the event was first fanned out, and By the relay
	// that did it.
	FannedOut time.Time `json:"fanned_out,omitzero"`
	By        string    `json:"by,omitempty"`
	// Deliveries are one per subscriber, by subscriber id.
	Deliveries []Delivery `json:"deliveries"`
	// Filtered are the subscribers whose content filter skipped the event.
	Filtered []string `json:"filtered,omitempty"`
	// Disabled are the subscribers whose --events matched the event but
	// that were disabled when it was fanned out: they got no copy, and
	// never will (a disabled subscriber gets no copy of the events
	// published meanwhile).
	Disabled []string `json:"disabled,omitempty"`
	// Truncated reports that the records passed what one read takes.
	Truncated bool `json:"truncated,omitempty"`
}

// Read reads the records of event eventID from ATTEMPTS and settles each
// subscriber's state from them. It reads only that event's subject, a
// literal one the server finds by its subject index (one message get per
// record, forward by subject), never the stream.
func Read(ctx context.Context, js jetstream.JetStream, eventID string) (Trace, error) {
	s, err := js.Stream(ctx, streams.Attempts)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return Trace{}, ErrNoStream
	}
	if err != nil {
		return Trace{}, fmt.Errorf("opening %s: %w", streams.Attempts, err)
	}
	subject := streams.EventRecords(streams.EventKey(eventID))
	var fanouts []Fanout
	var records []Record
	truncated := false
	for seq, reads := uint64(1), 0; ; reads++ {
		if reads == maxReads {
			truncated = true
			break
		}
		m, err := s.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return Trace{}, fmt.Errorf("reading the records of %q: %w", eventID, err)
		}
		seq = m.Sequence + 1
		switch f, r, ok := decodeOnEvent(eventID, m.Data); {
		case !ok:
		case f != nil:
			fanouts = append(fanouts, *f)
		default:
			records = append(records, r)
		}
	}
	if len(fanouts) == 0 && len(records) == 0 {
		return Trace{}, fmt.Errorf("%w: %q", ErrNoRecords, eventID)
	}
	t := Settle(eventID, fanouts, records)
	t.Truncated = truncated
	return t, nil
}

// Settle makes the trace of event eventID from its records: each
// subscriber's state is what its newest record says (by time, then attempt:
// relays write their records apart, so the stream's order may not be the
// attempts'), else where its fan-out put its copy.
func Settle(eventID string, fanouts []Fanout, records []Record) Trace {
	t := Trace{Event: eventID, Deliveries: []Delivery{}}
	byID := map[string]*Delivery{}
	delivery := func(id string) *Delivery {
		d, ok := byID[id]
		if !ok {
			d = &Delivery{Subscriber: id, State: StateQueued, Attempts: []Record{}}
			byID[id] = d
		}
		return d
	}
	filtered, disabled := map[string]bool{}, map[string]bool{}
	for _, f := range fanouts {
		if t.FannedOut.IsZero() || f.At.Before(t.FannedOut) {
			t.FannedOut, t.By = f.At, f.Relay
		}
		t.Type = cmp.Or(t.Type, f.Type)
		for _, id := range f.Filtered {
			filtered[id] = true
		}
		for _, id := range f.Disabled {
			disabled[id] = true
		}
		for _, c := range f.Copies {
			d := delivery(c.Subscriber)
			if c.Placed == StoredBefore && d.At != (time.Time{}) {
				continue // the earlier fan-out said where it went
			}
			d.At = f.At
			placed(d, c)
		}
	}
	records = slices.Clone(records)
	slices.SortStableFunc(records, func(a, b Record) int {
		return cmp.Or(a.At.Compare(b.At), cmp.Compare(a.Attempt, b.Attempt))
	})
	for _, r := range records {
		d := delivery(r.Subscriber)
		d.Attempts = append(d.Attempts, r)
		settled(d, r)
	}
	for id := range filtered {
		if _, ok := byID[id]; !ok {
			t.Filtered = append(t.Filtered, id)
		}
	}
	slices.Sort(t.Filtered)
	for id := range disabled {
		if _, ok := byID[id]; !ok {
			t.Disabled = append(t.Disabled, id)
		}
	}
	slices.Sort(t.Disabled)
	for _, d := range byID {
		t.Deliveries = append(t.Deliveries, *d)
	}
	slices.SortFunc(t.Deliveries, func(a, b Delivery) int { return strings.Compare(a.Subscriber, b.Subscriber) })
	return t
}

// placed sets d's state from where the fan-out put its copy.
func placed(d *Delivery, c Copy) {
	d.Until, d.Why, d.Reason, d.DLQSeq = time.Time{}, "", "", 0
	switch c.Placed {
	case InOverflow:
		d.State, d.Why = StateOverflow, "behind its backlog, in its overflow"
	case Scheduled:
		d.State, d.Until, d.Why = StateScheduled, c.Until, "Relay-Deliver-At"
	case DeadAtFanout:
		d.State, d.Reason, d.DLQSeq = StateDead, c.Reason, c.DLQSeq
		d.Why = "dead-lettered by the fan-out, without an attempt"
	default:
		d.State, d.Why = StateQueued, "not attempted yet"
	}
}

// settled sets d's state from its newest record r.
func settled(d *Delivery, r Record) {
	d.At, d.Until, d.Why, d.Reason, d.DLQSeq = r.At, time.Time{}, "", "", 0
	switch r.Outcome {
	case Delivered:
		d.State = StateDelivered
	case Retry:
		d.State, d.Until, d.Why = StateWaiting, r.Next, "retry after "+Result(r)
	case Dead:
		d.State, d.Reason, d.DLQSeq = StateDead, r.Reason, r.DLQSeq
		switch {
		case r.Attempt > 0:
			d.Why = "after " + Result(r)
		case r.Error != "":
			d.Why = r.Error
		default:
			d.Why = "without an attempt"
		}
	default:
		d.State, d.Why = StateQueued, "handed back to JetStream after "+Result(r)+": its outcome could not be stored"
	}
}

// Result says what an attempt got, in a few words: "503", "429 (Retry-After
// 120s)", "timeout after 10s"…, or its error.
func Result(r Record) string {
	switch {
	case r.Status != 0 && r.RetryAfter > 0:
		return fmt.Sprintf("%d (Retry-After %ds)", r.Status, r.RetryAfter)
	case r.Status != 0:
		return fmt.Sprintf("%d", r.Status)
	case r.Error != "":
		return r.Error
	}
	return "no answer"
}

// Explain is err, unless it wraps [ErrNoRecords]: then the one line
// `relay trace`, the HTTP API and the NATS service give for an event of
// eventID ATTEMPTS holds nothing of, saying why that may be. It still
// wraps ErrNoRecords.
func Explain(err error, eventID string) error {
	if !errors.Is(err, ErrNoRecords) {
		return err
	}
	return &noRecordsError{id: eventID}
}

// noRecordsError is [Explain]'s error.
type noRecordsError struct{ id string }

func (e *noRecordsError) Error() string {
	if strings.HasPrefix(e.id, "~~") {
		return fmt.Sprintf("no records of event %q: a webhook-id that starts with ~~ is a hash of a long event id; trace the relay-event-id header the receiver got with it", e.id)
	}
	return fmt.Sprintf("no records of event %q in %s: not fanned out yet, matched no subscriber, queued for a first attempt, older than %[2]s keeps, or not recorded (relay trace --help)", e.id, streams.Attempts)
}

// Find is [Read] of id or, when ATTEMPTS holds nothing of it, of the event
// id that id encodes as a webhook-id (deliver.EventIDOf): relay trace, the
// HTTP API and the NATS service take the id a receiver saw as well as the
// one published.
func Find(ctx context.Context, js jetstream.JetStream, id string) (Trace, error) {
	t, err := Read(ctx, js, id)
	if !errors.Is(err, ErrNoRecords) {
		return t, err
	}
	if eventID, ok := deliver.EventIDOf(id); ok && eventID != id {
		if t, err2 := Read(ctx, js, eventID); !errors.Is(err2, ErrNoRecords) {
			return t, err2
		}
	}
	return t, err
}

func (e *noRecordsError) Unwrap() error { return ErrNoRecords }
