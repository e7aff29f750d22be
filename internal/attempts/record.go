package attempts

import (
	"encoding/json"
	"time"
)

// Outcome is what an attempt (or a death without one) settled the delivery
// to: one word per way out of an attempt in package lanes.
type Outcome string

const (
	// Delivered: the subscriber answered 2xx and the delivery is acked.
	Delivered Outcome = "delivered"
	// Retry: parked in RETRIES until the record's Next.
	Retry Outcome = "retry"
	// Dead: dead-lettered, for the record's Reason, at the record's
	// DLQSeq.
	Dead Outcome = "dead"
	// HandedBack: its outcome could not be stored (a retry not parked, a
	// dead letter not written), so the delivery went back to JetStream,
	// which sends it again.
	HandedBack Outcome = "handed_back"
)

// Record is one attempt to deliver an event to a subscriber, or, with
// Attempt 0, a death that came without one. Its JSON is what ATTEMPTS
// stores: short, so that a record stays near 250 bytes with its subject.
type Record struct {
	// Event is the event's id (Relay-Event-Id). On its event's subject
	// the subject says it, and the record does not hold it; on its
	// subscriber's failures it does.
	Event string `json:"event,omitempty"`
	// Subscriber is the subscriber it was for.
	Subscriber string `json:"subscriber"`
	// Attempt counts the attempts of the delivery, from 1; 0 for a death
	// without an attempt.
	Attempt int `json:"attempt,omitempty"`
	// At is when the request was sent (or the delivery died), to the
	// millisecond.
	At time.Time `json:"at"`
	// Relay names the relay that made it: host and process.
	Relay string `json:"relay,omitempty"`
	// Status is the HTTP status of the answer; 0 when none came.
	Status int `json:"status,omitempty"`
	// Millis is how long the request took, in milliseconds.
	Millis int64 `json:"ms,omitempty"`
	// RetryAfter is the answer's Retry-After, in seconds, when it had one.
	RetryAfter int64 `json:"retry_after_s,omitempty"`
	// Error is what went wrong without an answer (a timeout, a refused
	// connection), or why it died, cut to [MaxError] bytes by its middle.
	Error string `json:"error,omitempty"`
	// Outcome is what the attempt settled.
	Outcome Outcome `json:"outcome"`
	// Next is when a Retry is due.
	Next time.Time `json:"next,omitzero"`
	// Reason is a Dead delivery's dead-letter reason.
	Reason string `json:"reason,omitempty"`
	// DLQSeq is a Dead delivery's DLQ sequence (relay dlq show SEQ); 0 when
	// it is not known.
	DLQSeq uint64 `json:"dlq_seq,omitempty"`
}

// Failure decodes a record stored on a subscriber's failures subject
// (streams.SubscriberFailures); false for a message that is none.
func Failure(data []byte) (Record, bool) {
	var r Record
	if json.Unmarshal(data, &r) != nil || r.Subscriber == "" || r.Event == "" {
		return Record{}, false
	}
	return r, true
}

// decodeOnEvent decodes a record stored on the subject of event eventID:
// a fan-out (f non-nil) or an attempt; ok false for a message that is
// neither, or a fan-out of another event of the same hashed key.
func decodeOnEvent(eventID string, data []byte) (f *Fanout, r Record, ok bool) {
	var fan Fanout
	if json.Unmarshal(data, &fan) == nil && fan.Type != "" {
		return &fan, Record{}, fan.Event == eventID
	}
	if json.Unmarshal(data, &r) != nil || r.Subscriber == "" {
		return nil, Record{}, false
	}
	r.Event = eventID
	return nil, r, true
}

// Failed reports whether the record is of a failure: an attempt that did not
// deliver, or a death. A failure goes on its subscriber's failures subject
// (streams.SubscriberFailures) as well as on its event's.
func (r Record) Failed() bool { return r.Outcome != Delivered }

// MaxError is the most bytes of an error a record keeps: the whole error is
// in the log, and in the dead letter of a delivery that died.
const MaxError = 80

// Placement is where the fan-out put an event's copy for one subscriber.
type Placement string

const (
	// OnLane: queued on the subscriber's lane.
	OnLane Placement = "lane"
	// InOverflow: queued in the subscriber's overflow, behind its backlog.
	InOverflow Placement = "overflow"
	// Scheduled: held in RETRIES until the event's Relay-Deliver-At.
	Scheduled Placement = "scheduled"
	// DeadAtFanout: dead-lettered at once (backlog, expired, malformed).
	DeadAtFanout Placement = "dead"
	// StoredBefore: stored by an earlier fan-out of the same event (one
	// handed back and fanned out again), not copied again.
	StoredBefore Placement = "stored"
)

// Copy is where one subscriber's copy of an event went at its fan-out.
type Copy struct {
	Subscriber string    `json:"subscriber"`
	Placed     Placement `json:"placed"`
	// Until is when a Scheduled copy is due.
	Until time.Time `json:"until,omitzero"`
	// Reason is a dead copy's dead-letter reason, and DLQSeq its DLQ
	// sequence when known.
	Reason string `json:"reason,omitempty"`
	DLQSeq uint64 `json:"dlq_seq,omitempty"`
}

// Fanout is the record of one fan-out of an event: the subscribers its type
// and their filters matched, where each copy went, and those whose content
// filter skipped it. An event with very many subscribers has several
// records of one fan-out, of at most [maxCopies] copies each.
type Fanout struct {
	Event    string    `json:"event"`
	Type     string    `json:"type"`
	At       time.Time `json:"at"`
	Relay    string    `json:"relay,omitempty"`
	Copies   []Copy    `json:"copies,omitempty"`
	Filtered []string  `json:"filtered,omitempty"`
	// Disabled are the subscribers whose --events matched but that were
	// disabled, and got no copy (at most maxCopies of them are kept).
	Disabled []string `json:"disabled,omitempty"`
}

// Plain reports whether f is the fan-out of an event to one subscriber, its
// copy on its lane, no filter skipping anyone: the commonest fan-out, and
// one whose record says nothing the copy's attempt records will not. It is
// not written, which halves the records of a relay whose events each have
// one subscriber. Until that copy's first attempt, relay trace finds no
// record of the event.
func (f Fanout) Plain() bool {
	return len(f.Copies) == 1 && f.Copies[0].Placed == OnLane && len(f.Filtered) == 0 && len(f.Disabled) == 0
}

// maxCopies bounds the copies (and filtered subscribers) of one fan-out
// record, so that a record of an event with thousands of subscribers stays
// far under NATS's max payload.
const maxCopies = 256
