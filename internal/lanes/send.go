package lanes

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/internal/attempts"
	"github.com/relay-dev/relay/internal/deadletter"
	"github.com/relay-dev/relay/internal/deliver"
	"github.com/relay-dev/relay/internal/metrics"
	"github.com/relay-dev/relay/internal/ratelimit"
	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/internal/tracing"
	"github.com/relay-dev/relay/streams"
)

// An attempt: the request built from a held delivery, sent, and settled by
// its outcome.

// attempt sends one delivery taken from the queue (InFlight) and keeps the
// scheduler's account of its subscriber: the response time, the local
// failures in a row, the end of a cautious restart. release gives back its
// request slot.
//
// An in-flight request finishes even when the relay is stopping, within
// --shutdown-timeout: its outcome is then acked, parked or dead-lettered,
// never lost; one still open then is abandoned and handed back.
func (s *scheduler) attempt(ctx context.Context, d delivery, sub *subscribers.Subscriber, dec ratelimit.Decision, release func()) {
	defer release()
	defer s.lane.end()
	start := s.lane.cfg.Clock.Now()
	s.mu.Lock()
	localIsAttempt := s.localStreak >= maxLocalStreak
	s.mu.Unlock()
	out := s.lane.send(context.WithoutCancel(ctx), s.lane.env.finishing, d, sub, dec, localIsAttempt)
	took := s.lane.cfg.Clock.Now().Sub(start)
	s.mu.Lock()
	s.landedLocked(d)
	if out.Class == deliver.Local {
		s.localStreak++
	} else {
		s.localStreak = 0
		s.latency = movingAverage(s.latency, took)
	}
	if out.Class == deliver.Delivered {
		if s.cautious {
			s.lane.log.Info("lanes: subscriber accepts deliveries again", "subscriber", s.id)
		}
		s.cautious = false
	}
	s.syncLocked()
	s.mu.Unlock()
	s.signal()
}

// request builds the HTTP delivery of one DELIVERIES message, signed with
// the subscriber's keys in force at now ([subscribers.Subscriber.Request],
// which relay sub test shares), with the event's trace context.
func request(d delivery, body []byte, sub *subscribers.Subscriber, now time.Time) (deliver.Request, error) {
	h := d.msg.Headers()
	req, err := sub.Request(eventIDOf(d), body, streams.HeaderValue(h, streams.HeaderContentType), now)
	if err != nil {
		return deliver.Request{}, err
	}
	// The event's trace context goes on, whether or not spans are made.
	req.Header = tracing.ParentOf(h).Forward(req.Header)
	return req, nil
}

// eventIDOf is the id of a delivery's event: its Relay-Event-Id, or for a
// message published on DELIVERIES by hand its stream sequence, the most
// stable id it has.
func eventIDOf(d delivery) string {
	if id := d.msg.Headers().Get(streams.HeaderEventID); id != "" {
		return id
	}
	return "DELIVERIES-" + strconv.FormatUint(d.seq, 10)
}

// send makes one attempt and settles the message by its outcome: ack,
// park for a retry, or dead-letter. It returns the outcome (zero when no
// request was made).
//
// A local failure (no descriptor, no port, the relay stopping) is handed
// back without counting as an attempt, unless localIsAttempt: a failure the
// relay keeps hitting for one subscriber (no IPv6 route to it, say) is the
// subscriber's after all, or its messages would be handed back for ever.
//
// The request runs under reqCtx, which --shutdown-timeout cancels; the
// settling runs under ctx, so that a request answered just before the
// timeout is still acked, parked or dead-lettered by its outcome.
func (l *lane) send(ctx, reqCtx context.Context, d delivery, sub *subscribers.Subscriber, dec ratelimit.Decision, localIsAttempt bool) (out deliver.Outcome) {
	defer func() {
		// A probe that ends without a request must be given back, or this
		// relay would wait for its outcome for ever.
		if dec.Probe && !d.attempted {
			_ = l.cfg.Limiter.Observe(ctx, sub.ID, limitOf(*sub), ratelimit.Result{Probe: true})
		}
	}()
	now := l.cfg.Clock.Now()
	if l.pastDue(ctx, d, sub.ID, now) {
		return out
	}
	if d.attempts >= sub.MaxAttempts {
		// --max-attempts was lowered while this one waited.
		l.deadLetter(ctx, d, sub.ID, deadletter.Death{Reason: deadletter.MaxAttempts})
		return out
	}
	body, err := l.env.bodyOf(reqCtx, d.msg)
	switch {
	case errors.Is(err, errBodyGone):
		l.deadLetter(ctx, d, sub.ID, bodyLost(err))
		return out
	case err != nil:
		l.log.Warn("lanes: reading a delivery's body", "subscriber", sub.ID, "err", err)
		l.handBackIn(d, settleRetry)
		return out
	case !l.alive(d):
		// The read outlasted what was left of its ack wait: JetStream may
		// give it to another relay, which would send it at the same time.
		l.letGo(d, sub.ID)
		return out
	}
	// The body's read may have taken a while (a Direct Get on a slow
	// server): the deadline is judged again just before the request.
	if now = l.cfg.Clock.Now(); l.pastDue(ctx, d, sub.ID, now) {
		return out
	}
	req, err := request(d, body, sub, now)
	if err != nil {
		l.log.Error("lanes: building request", "subscriber", sub.ID, "err", err)
		l.handBackIn(d, settleRetry)
		return out
	}
	if d.firstAt.IsZero() {
		d.firstAt = now
	}
	// Real time, as the stages it is measured against: the server's stamps
	// and the delivery's receipt.
	sent := time.Now()
	span := l.cfg.Tracer.Attempt(reqCtx, d.msg.Headers(), req.ID, sub.ID, d.attempts+1)
	req.Header = span.Inject(req.Header)
	out = l.cfg.Client.Send(reqCtx, req)
	span.EndAttempt(out.Status, out.Class.String(), out.Err)
	if out.Class == deliver.Local && (!localIsAttempt || reqCtx.Err() != nil) {
		// No descriptor, no port, the relay stopping (a request abandoned at
		// --shutdown-timeout among them): not the subscriber's failure, not
		// an attempt, nothing for the breaker.
		l.log.Warn("lanes: request not made", "subscriber", sub.ID, "err", out.Err)
		l.cfg.Metrics.Attempt(sub.ID, out.Class.String(), out.Duration)
		if l.stopping.Load() {
			l.handBack(d.msg)
		} else {
			l.handBackIn(d, unsentDelay)
		}
		return out
	}
	d.attempts++
	d.attempted = true
	l.cfg.Metrics.Attempt(sub.ID, out.Class.String(), out.Duration)
	if err := l.cfg.Limiter.Observe(ctx, sub.ID, limitOf(*sub), resultOf(out, dec)); err != nil {
		l.log.Warn("lanes: recording the outcome for the rate limiter", "subscriber", sub.ID, "err", err)
	}
	if out.Class != deliver.Delivered {
		st := l.failed(ctx, d, sub, req.ID, out, now)
		if l.cfg.Records != nil && st.outcome != "" {
			l.record(d, sub.ID, out, now, st)
		}
		return out
	}
	published := publishedAt(d)
	l.cfg.Metrics.Delivered(sub.ID, published, d.due(published))
	if d.attempts == 1 && !d.broughtBack && !d.redelivered {
		l.stages(d.msg, req.ID, sub.ID, published, d.stored, d.received, sent, out.Duration)
	}
	if !d.deadline.IsZero() {
		// Sent before its deadline (see dueBy above), so met.
		l.cfg.Metrics.MetDeadline(sub.ID)
		l.cfg.Timeliness.Met(sub.ID)
	}
	l.ack(d, sub.ID, Delivered)
	if l.cfg.Records != nil {
		l.record(d, sub.ID, out, now, settlement{outcome: attempts.Delivered})
	}
	return out
}

// record queues the record of an attempt sent at and what it settled
// (relay trace). It is apart from send, and never inlined there, as stages
// is: a record is a few hundred bytes of frame.
//
//go:noinline
func (l *lane) record(d delivery, subscriber string, out deliver.Outcome, at time.Time, st settlement) {
	rec := attempts.Record{Event: eventIDOf(d), Subscriber: subscriber, Attempt: d.attempts, At: at, Status: out.Status,
		Millis: out.Duration.Milliseconds(), Error: errorText(out), Outcome: st.outcome, Next: st.next,
		Reason: string(st.reason), DLQSeq: st.dlqSeq}
	if out.RetryAfterSet && out.RetryAfter > 0 {
		rec.RetryAfter = int64((out.RetryAfter + time.Second - 1) / time.Second)
	}
	l.cfg.Records.Attempt(rec)
}

// stages records where the time of a delivery went: one accepted at its
// first attempt, on its first delivery by JetStream, if it is the copy the
// fan-out stored (eventID's for subscriber). A retry, a replay, a hand-back
// or a trip through overflow would add waits of their own. took is the
// request's own time from sent, so that what the relay did after the
// answer (the limiter, the metrics) is not counted in it. It is apart from
// send, as failed is, and never inlined there: its moments would widen the
// frame every delivery's goroutine grows to.
//
//go:noinline
func (l *lane) stages(msg jetstream.Msg, eventID, subscriber string, published, stored time.Time, receivedNano int64, sent time.Time, took time.Duration) {
	if !streams.IsCopyID(msg.Headers().Get(jetstream.MsgIDHeader), eventID, subscriber) {
		return
	}
	var received time.Time
	if receivedNano != 0 {
		received = time.Unix(0, receivedNano)
	}
	l.cfg.Metrics.Stages(metrics.Stages{
		Published: published, Copied: stored, Received: received, Sent: sent, Answered: sent.Add(took),
	})
}

// pastDue dead-letters d, for the reason lateReason gives, when it is past
// its deadline at now, and says whether it did.
// send judges it before a delivery's body is read, sparing a late one the
// read, and again after, just before the request.
func (l *lane) pastDue(ctx context.Context, d delivery, subID string, now time.Time) bool {
	if d.dueBy(now) {
		return false
	}
	l.deadLetter(ctx, d, subID, deadletter.Death{Reason: d.lateReason()})
	return true
}
