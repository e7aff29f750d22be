package lanes

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/internal/attempts"
	"github.com/relay-dev/relay/internal/consumer"
	"github.com/relay-dev/relay/internal/deadletter"
	"github.com/relay-dev/relay/internal/retry"
	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/streams"
)

// A delivery's states, and every transition between them: this file is the
// one place that acks, hands back, terminates or lets go of a message of a
// lane, and it stores the parked, scheduled and dead copies. A move to
// overflow is queued here and made by the putter (writes.go), which ends it
// through ack or handBackIn. The rest of the package decides which
// transition a delivery takes, and calls it.

// State is where a delivery of a lane is, and so who moves it next. A
// delivery is one message of DELIVERIES that a lane consumer handed to this
// relay. Its transitions, with the write each makes, are the table of the
// package's doc (doc.go); each is a function of this file.
type State uint8

const (
	// Pulled: read from the lane consumer; the lane's dispatch places it
	// (Held, Scheduled, InOverflow or Dead; LetGo when it waited too long
	// in the client, HandedBack when the lane is stopping) without waiting
	// on anything.
	Pulled State = iota
	// Held: in its subscriber's queue in the lane, its ack wait renewed
	// by the keep-alive rounds. The subscriber's scheduler sends the head
	// once a request slot of the relay, a token and an in-flight slot (of
	// --max-in-flight, or fewer while its failures degrade it) are
	// free; while it waits for them the head stays held, so that a pause
	// that begins meanwhile takes it to overflow with the rest.
	Held
	// InFlight: its request is on the wire; the outcome settles it
	// (Delivered, Parked or Dead), and a request not made hands it back.
	InFlight
	// Parked: in RETRIES until a time, after a failed attempt (or at once,
	// when a full DELIVERIES refused its move to overflow); the retry mover
	// puts it back on its lane.
	Parked
	// Scheduled: in RETRIES until its Relay-Deliver-At, having reached the
	// lane early; the retry mover puts it back on its lane when it is due.
	Scheduled
	// InOverflow: on deliveries.overflow.<subscriber>, beyond the
	// subscriber's share of the lane, or because it is paused, its circuit
	// open, or it is disabled; its scheduler's refill brings it back.
	InOverflow
	// HandedBack: given back to JetStream, at once or after a delay, with
	// nothing stored; the next pull of any relay takes it again.
	HandedBack
	// LetGo: dropped unsent, neither acked nor handed back, because its ack
	// wait may have run out on this relay (see [lane.alive]): JetStream
	// gives it to whichever relay pulls next, once the ack wait it counts
	// ends (see [lane.letGo]). Until then the server holds it for nobody.
	LetGo
	// Dead: its copy is in the DLQ and the original terminated; an
	// operator lists and replays it.
	Dead
	// Delivered: its subscriber answered 2xx and the original is acked.
	Delivered
	// Removed: its subscriber was removed with relay sub rm, which drops
	// its deliveries on purpose: the original is terminated, no copy
	// kept, no dead letter, counted by relay_deliveries_removed_total.
	Removed
)

// String names a state for logs.
func (st State) String() string {
	switch st {
	case Pulled:
		return "pulled"
	case Held:
		return "held"
	case InFlight:
		return "in_flight"
	case Parked:
		return "parked"
	case Scheduled:
		return "scheduled"
	case InOverflow:
		return "in_overflow"
	case HandedBack:
		return "handed_back"
	case LetGo:
		return "let_go"
	case Dead:
		return "dead"
	case Delivered:
		return "delivered"
	case Removed:
		return "removed"
	}
	return "unknown"
}

// holdLocked moves a delivery to Held: no write; its scheduler's loop acts
// next. The caller holds s.mu.
func (s *scheduler) holdLocked(d delivery) { s.pushLocked(d) }

// flyLocked moves the delivery just taken from the queue to InFlight: no
// write; its request's outcome acts next. The caller holds s.mu.
func (s *scheduler) flyLocked(d delivery) { s.inFlight[d.msg] = struct{}{} }

// landedLocked ends a delivery's InFlight once its outcome has settled it.
// The caller holds s.mu.
func (s *scheduler) landedLocked(d delivery) { delete(s.inFlight, d.msg) }

// ack ends a delivery whose copy is stored where to says (its request
// delivered, a parked or scheduled copy in RETRIES, a copy in overflow):
// the original is acked and leaves DELIVERIES. Nothing of it is this
// relay's any more.
func (l *lane) ack(d delivery, id string, to State) {
	if err := d.msg.Ack(); err != nil {
		l.log.Warn("lanes: ack", "subscriber", id, "to", to.String(), "err", err)
	}
}

// handBackIn moves a delivery to HandedBack with a delay: JetStream sends
// it again after delay, to whichever relay pulls then. Used when its
// outcome could not be recorded, or it cannot be taken up now.
func (l *lane) handBackIn(d delivery, delay time.Duration) { _ = d.msg.NakWithDelay(delay) }

// park moves a delivery into RETRIES until at and acks the original once
// the parked copy is stored. If it cannot be parked, the original is handed
// back with a delay instead, losing nothing (but the attempt just made is
// not counted). It returns what it settled.
func (l *lane) park(ctx context.Context, d delivery, sub subscribers.Subscriber, h nats.Header, at time.Time) settlement {
	w := l.env.writes
	body, err := l.env.bodyOf(ctx, d.msg)
	if errors.Is(err, errBodyGone) {
		death := bodyLost(err)
		seq, ok := l.deadLetter(ctx, d, sub.ID, death)
		return died(death.Reason, seq, ok)
	}
	h.Del(streams.HeaderEventSeq)
	if err == nil {
		err = w.parks.enter(ctx)
	}
	if err == nil {
		// Until answered, with one id (see streams.StoreOnce): a PubAck
		// lost after the parked copy was stored must not hand the
		// original back to make a second retry chain. The original is in
		// flight meanwhile, and renewed; a relay that stops waits no
		// longer than for its requests.
		err = retry.Park(l.env.finishing, w.park, sub.ID, body, h, at, streams.ParkID(d.seq, d.attempts))
		w.parks.leave()
	}
	if err != nil {
		l.log.Warn("lanes: parking a delivery", "subscriber", sub.ID, "err", err, "unanswered", errors.Is(err, streams.ErrUnanswered))
		l.handBackIn(d, max(settleRetry, at.Sub(l.cfg.Clock.Now())))
		return settlement{outcome: attempts.HandedBack}
	}
	l.ack(d, sub.ID, Parked)
	return settlement{outcome: attempts.Retry, next: at}
}

// schedule keeps a delivery that is not due yet in RETRIES until it is,
// then acks the original; one that cannot be scheduled is handed back until
// then.
func (l *lane) schedule(ctx context.Context, d delivery, id string) {
	l.scheduling.add(d.seq, d.msg)
	defer l.scheduling.forget(d.seq, d.msg)
	w := l.env.writes
	body, h, err := l.env.whole(ctx, d.msg)
	if errors.Is(err, errBodyGone) {
		l.deadLetter(ctx, d, id, bodyLost(err))
		return
	}
	if err == nil {
		err = w.parks.enter(ctx)
	}
	if err == nil {
		err = retry.Schedule(l.env.finishing, w.park, id, body, h, d.deliverAt, streams.ScheduleID(d.seq))
		w.parks.leave()
	}
	if err != nil {
		l.log.Warn("lanes: scheduling a delivery until it is due", "subscriber", id, "err", err, "unanswered", errors.Is(err, streams.ErrUnanswered))
		l.handBackIn(d, max(settleRetry, d.deliverAt.Sub(l.cfg.Clock.Now())))
		return
	}
	l.ack(d, id, Scheduled)
}

// deadLetter stores the DLQ copy, then terminates the original; a Term'ed
// message is deleted at once, so the copy must be safe first. It returns
// the copy's DLQ sequence and whether the delivery was dead-lettered. A
// death that came without an attempt of this send is recorded here; one
// that came of an attempt goes in that attempt's record.
func (l *lane) deadLetter(ctx context.Context, d delivery, id string, death deadletter.Death) (uint64, bool) {
	death.Attempts = d.attempts
	death.FirstAttemptAt = d.firstAt
	death.OriginSeq = d.seq
	if subj := d.msg.Subject(); !strings.HasPrefix(subj, streams.OverflowPrefix) {
		death.OriginSubject = subj
	}
	body, h, err := l.env.whole(ctx, d.msg)
	switch {
	case errors.Is(err, errBodyGone):
		// Nothing left to keep: the dead letter says why it has no body.
		if death.LastError == "" {
			death.LastError = deadletter.CleanError(err.Error())
		}
	case err != nil:
		l.log.Warn("lanes: reading a delivery's body", "subscriber", id, "err", err)
		l.handBackIn(d, settleRetry)
		return 0, false
	}
	seq, err := l.env.deadLetter(ctx, id, body, h, death)
	if err != nil {
		l.handBackIn(d, settleRetry)
		return 0, false
	}
	if err := d.msg.TermWithReason(string(death.Reason)); err != nil {
		l.log.Warn("lanes: term", "subscriber", id, "err", err)
	}
	if !d.attempted {
		l.env.recordDeath(eventIDOf(d), id, death, seq)
	}
	return seq, true
}

// remove ends a delivery whose subscriber relay sub rm removed: the
// original is terminated with nothing stored, as the command dropped the
// rest of its queue, and counted once; no dead letter, no operational
// event, no alert.
func (l *lane) remove(d delivery, id string) {
	if err := d.msg.TermWithReason(Removed.String()); err != nil {
		l.log.Warn("lanes: term", "subscriber", id, "err", err)
	}
	l.cfg.Metrics.Removed()
}

// recordDeath records a death of a delivery of event eventID that came
// without an attempt (relay trace); one of no known event is not recorded.
func (e *engine) recordDeath(eventID, id string, death deadletter.Death, seq uint64) {
	if e.cfg.Records == nil || eventID == "" {
		return
	}
	e.cfg.Records.Attempt(attempts.Record{Event: eventID, Subscriber: id, At: e.cfg.Clock.Now(),
		Outcome: attempts.Dead, Reason: string(death.Reason), Error: death.LastError, DLQSeq: seq})
}

// deadLetter stores the DLQ copy of a delivery with headers h and counts
// it, and returns its DLQ sequence; the caller then removes the original.
func (e *engine) deadLetter(ctx context.Context, id string, body []byte, h nats.Header, death deadletter.Death) (uint64, error) {
	death.Subscriber = id
	death.DeadAt = e.cfg.Clock.Now()
	if death.LastStatus == 0 && death.LastError == "" {
		// Died without an attempt of its own (expired, late, or
		// max-attempts lowered): keep what the last attempt saw.
		death.LastStatus, _ = strconv.Atoi(h.Get(streams.HeaderLastStatus))
		death.LastError = h.Get(streams.HeaderLastError)
	}
	var seq uint64
	err := e.writes.deads.enter(ctx)
	if err == nil {
		// Until answered, as a park: a dead letter whose PubAck was lost
		// must not come back to be sent again. Within the caller's time
		// (a refill's lease) and the relay's stop.
		storeCtx, cancel := e.settling(ctx)
		seq, err = deadletter.Publish(storeCtx, e.writes.dead, body, h, death)
		cancel()
		e.writes.deads.leave()
	}
	if err != nil {
		e.cfg.Logger.Error("lanes: dead-lettering", "subscriber", id, "reason", death.Reason, "err", err)
		return 0, err
	}
	e.cfg.Metrics.DeadLettered(id, death.Reason)
	e.cfg.Ops.Dead(id, string(death.Reason), h.Get(streams.HeaderEventType))
	if death.Reason == deadletter.Deadline || death.Reason == deadletter.Expired {
		e.cfg.Timeliness.Missed(id)
	}
	e.cfg.Logger.Info("lanes: dead-lettered", "subscriber", id, "event", h.Get(streams.HeaderEventID),
		"reason", death.Reason, "attempts", death.Attempts, "last_status", death.LastStatus)
	return seq, nil
}

// settling is ctx, ended as well when the relay's stop no longer waits
// for the requests in flight (finishing): a write that settles a delivery
// asks again for its PubAck until then (see streams.StoreOnce), and no
// longer.
func (e *engine) settling(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(e.finishing, cancel)
	return ctx, func() { stop(); cancel() }
}

// toOverflow moves a held delivery to its subscriber's overflow: the copy is
// stored, then the original acked; stored tells the scheduler (nil: none).
// It only queues the put (see [putter]), and hands the delivery back for a
// moment when the puts are too far behind to queue it: a lane's pull loop
// calls it, and must not wait. A stale message (see [lane.alive]) is let go
// instead: JetStream has given it, or will give it, to another relay.
func (l *lane) toOverflow(d delivery, id string, stored func()) {
	if !l.alive(d) {
		l.letGo(d, id)
		return
	}
	// No longer held by its scheduler: its putter's pending puts are
	// renewed from now on (see [putter.offer]).
	d.received, d.kept = l.renewedAt(d), 0
	if !l.puts.offer(put{l: l, d: d, id: id, stored: stored}) {
		l.env.logOnce("puts.full", "lanes: moves to overflow are behind (NATS slow to answer); handing deliveries back for a moment",
			"subscriber", id, "delay", putFullDelay)
		l.handBackIn(d, putFullDelay)
		return
	}
	l.cfg.Metrics.Overflow()
}

// letGo drops a stale message from this relay without sending it: it is
// not acked or handed back, and JetStream redelivers it to whichever relay
// pulls next once its ack wait ends. Not handed back even when a later
// keep-alive round went out on a connection that held, only its answer
// late: that round may have reached the server after the ack wait ended,
// and the server takes a NAK of a message it has given to another relay
// since, which would then be sent by a third while the second sends it.
// Logged at most once a logEvery for the lane: a let-go comes in storms
// (every delivery a lane holds, when NATS answers nothing for most of an
// ack wait).
func (l *lane) letGo(d delivery, id string) {
	l.cfg.Metrics.LetGo()
	l.env.logOnce("letgo."+l.name, "lanes: letting go of deliveries whose keep-alive was not confirmed within their ack wait",
		"lane", l.name, "subscriber", id, "seq", d.seq)
}

// handBack returns msgs, all of this lane, to JetStream for another relay
// (or this one's next start) to deliver at once, and waits for the server to
// have taken them: when relay stops its embedded server right after, they
// must be in the consumer's stored state (see [consumer.HandBack]). The
// server answers within a round trip: even a stop told to hurry waits for it.
func (l *lane) handBack(msgs ...jetstream.Msg) {
	if len(msgs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), handBackWait)
	defer cancel()
	if err := consumer.HandBack(ctx, msgs...); err != nil {
		l.log.Warn("lanes: handing deliveries back", "err", err)
	}
}
