package lanes

import (
	"cmp"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/internal/consumer"
	"github.com/relay-dev/relay/internal/deadletter"
	"github.com/relay-dev/relay/internal/retry"
	"github.com/relay-dev/relay/streams"
)

// What a delivery carries: its headers read once, as it is pulled.

// delivery is what the lane knows of one DELIVERIES message.
type delivery struct {
	msg      jetstream.Msg
	seq      uint64
	attempts int       // attempts made before this one (Relay-Attempt)
	firstAt  time.Time // Relay-First-Attempt-At, zero before the first attempt
	deadline time.Time // Relay-Deadline, zero when none
	// deliverAt is its Relay-Deliver-At, zero when none.
	deliverAt time.Time
	// stored is when JetStream stored this copy on DELIVERIES.
	stored time.Time
	// moved: the mover put it back from RETRIES, its schedule fired.
	moved bool
	// attempted: this lane sent a request for it just now.
	attempted bool
	// received is when this relay's client read it from the connection
	// (unix nanoseconds, real time; see [consumer.ReceivedAt]): JetStream's
	// ack wait for it started a transit before. Once it leaves the held
	// messages, the last renewal of that ack wait (see [lane.renewedAt]).
	received int64
	// kept is when it joined its scheduler's held messages, which the
	// keep-alive rounds renew (unix nanoseconds); zero while it is not
	// among them.
	kept int64
	// broughtBack: it came back from its subscriber's overflow
	// (Relay-Overflow-Seq).
	broughtBack bool
	// redelivered: JetStream has handed it out before (a hand-back, a
	// failed park, a relay that stopped or crashed), so its wait since
	// the copy was stored is not one stretch of its way.
	redelivered bool
	// malformed says which header cannot be honoured (see
	// [streams.Malformed]); such a delivery is dead-lettered unsent.
	malformed string
}

func newDelivery(msg jetstream.Msg) delivery {
	d := delivery{msg: msg}
	if at, ok := consumer.ReceivedAt(msg); ok {
		d.received = at.UnixNano()
	} else {
		d.received = ackNow()
	}
	if md, err := msg.Metadata(); err == nil {
		d.seq = md.Sequence.Stream
		d.stored = md.Timestamp
		d.redelivered = md.NumDelivered > 1
	}
	h := msg.Headers()
	d.attempts, d.firstAt = streams.AttemptsOf(h)
	var badDeadline, badDue string
	d.deadline, badDeadline = streams.TimeOf(h, streams.HeaderDeadline)
	d.deliverAt, badDue = streams.TimeOf(h, streams.HeaderDeliverAt)
	d.malformed = cmp.Or(badDue, badDeadline, streams.MalformedContentType(h))
	d.broughtBack = h.Get(streams.HeaderOverflowSeq) != ""
	d.moved = retry.Moved(h)
	return d
}

// dueBy reports whether a delivery may still be sent at now: not past its
// deadline. Nothing is sent late.
func (d delivery) dueBy(now time.Time) bool {
	return d.deadline.IsZero() || now.Before(d.deadline)
}

// lateReason is why a delivery past its deadline dies: expired when it
// never had a chance (due at or after its deadline, or stored on its lane
// only after it), deadline when it was on its lane in time but could not be
// sent in time (a retry, a pause, an open circuit, its rate, a relay down).
func (d delivery) lateReason() deadletter.Reason {
	if d.attempts == 0 && !d.broughtBack && (d.dueTooLate() || (!d.stored.IsZero() && !d.stored.Before(d.deadline))) {
		return deadletter.Expired
	}
	return deadletter.Deadline
}

// dueTooLate reports a delivery due at or after its deadline: it can never
// be sent, and dies as expired at once.
func (d delivery) dueTooLate() bool {
	return !d.deliverAt.IsZero() && !d.deadline.IsZero() && !d.deliverAt.Before(d.deadline)
}

// early reports whether a delivery reached its lane before its due time by
// another way than its schedule (a replay, a copy published by hand): it
// must wait. A copy the mover put back is due by the server's clock, which
// decides, whatever this host's clock says.
func (d delivery) early(now time.Time) bool {
	return !d.moved && !d.deliverAt.IsZero() && now.Before(d.deliverAt)
}

// due is when the delivery could first be sent: its Relay-Deliver-At, else
// published, its event's publication; zero when neither is known.
func (d delivery) due(published time.Time) time.Time {
	if !d.deliverAt.IsZero() {
		return d.deliverAt
	}
	return published
}

// publishedAt is when the delivery's event was published on EVENTS (its
// Relay-Published-At), zero when the copy does not say (one published on
// DELIVERIES by hand).
func publishedAt(d delivery) time.Time {
	v := d.msg.Headers().Get(streams.HeaderPublishedAt)
	if v == "" {
		return time.Time{}
	}
	at, _ := time.Parse(time.RFC3339Nano, v)
	return at
}
