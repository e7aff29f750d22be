package lanes

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/internal/consumer"
	"github.com/relay-dev/relay/internal/deadletter"
	"github.com/relay-dev/relay/internal/deliver"
	"github.com/relay-dev/relay/internal/metrics"
	"github.com/relay-dev/relay/internal/overflow"
	"github.com/relay-dev/relay/internal/ratelimit"
	"github.com/relay-dev/relay/internal/retry"
	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/streams"
)

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
		d.received = time.Now().UnixNano()
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

// request builds the HTTP delivery of one DELIVERIES message, signed with
// the subscriber's keys in force at now.
func request(d delivery, body []byte, sub *subscribers.Subscriber, now time.Time) (deliver.Request, error) {
	h := d.msg.Headers()
	keys, err := sub.Keys(now)
	if err != nil {
		return deliver.Request{}, err
	}
	id := h.Get(streams.HeaderEventID)
	if id == "" {
		// A message published on DELIVERIES by hand: its stream sequence is
		// the most stable id it has.
		id = "DELIVERIES-" + strconv.FormatUint(d.seq, 10)
	}
	var header http.Header
	if len(sub.Headers) > 0 {
		header = make(http.Header, len(sub.Headers))
		for k, v := range sub.Headers {
			header.Set(k, v)
		}
	}
	return deliver.Request{
		URL:         sub.URL,
		ID:          id,
		Body:        body,
		ContentType: streams.HeaderValue(h, streams.HeaderContentType),
		Header:      header,
		Keys:        keys,
		Timeout:     sub.Timeout.Std(),
	}, nil
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
func (l *lane) send(ctx, reqCtx context.Context, d delivery, sub *subscribers.Subscriber, probe, localIsAttempt bool) (out deliver.Outcome) {
	defer func() {
		// A probe that ends without a request must be given back, or this
		// relay would wait for its outcome for ever.
		if probe && !d.attempted {
			_ = l.cfg.Limiter.Observe(ctx, sub.ID, limitOf(*sub), ratelimit.Result{Probe: true})
		}
	}()
	now := l.cfg.Clock.Now()
	if !d.dueBy(now) {
		l.deadLetter(ctx, d, sub.ID, deadletter.Death{Reason: d.lateReason()})
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
		_ = d.msg.NakWithDelay(settleRetry)
		return out
	case !l.alive(d):
		// The read outlasted what was left of its ack wait: JetStream may
		// give it to another relay, which would send it at the same time.
		l.letGo(d, sub.ID)
		return out
	}
	req, err := request(d, body, sub, now)
	if err != nil {
		l.log.Error("lanes: building request", "subscriber", sub.ID, "err", err)
		_ = d.msg.NakWithDelay(settleRetry)
		return out
	}
	if d.firstAt.IsZero() {
		d.firstAt = now
	}
	sent := time.Now()
	out = l.cfg.Client.Send(reqCtx, req)
	if out.Class == deliver.Local && (!localIsAttempt || reqCtx.Err() != nil) {
		// No descriptor, no port, the relay stopping (a request abandoned at
		// --shutdown-timeout among them): not the subscriber's failure, not
		// an attempt, nothing for the breaker.
		l.log.Warn("lanes: request not made", "subscriber", sub.ID, "err", out.Err)
		l.cfg.Metrics.Attempt(sub.ID, out.Class.String(), out.Duration)
		if l.stopping.Load() {
			l.handBack(d.msg)
		} else {
			_ = d.msg.NakWithDelay(unsentDelay)
		}
		return out
	}
	d.attempts++
	d.attempted = true
	l.cfg.Metrics.Attempt(sub.ID, out.Class.String(), out.Duration)
	if err := l.cfg.Limiter.Observe(ctx, sub.ID, limitOf(*sub), resultOf(out, probe)); err != nil {
		l.log.Warn("lanes: recording the outcome for the rate limiter", "subscriber", sub.ID, "err", err)
	}
	if out.Class != deliver.Delivered {
		l.failed(ctx, d, sub, req.ID, out, now)
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
	if err := d.msg.Ack(); err != nil {
		l.log.Warn("lanes: ack", "subscriber", sub.ID, "err", err)
	}
	return out
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

// failed settles an attempt that did not deliver: dead-letter it (and
// disable a gone subscriber), or park it for a retry. It is apart from
// send, whose stack every delivery's goroutine grows to, so that this rarer
// path's frame is not part of it.
func (l *lane) failed(ctx context.Context, d delivery, sub *subscribers.Subscriber, eventID string, out deliver.Outcome, now time.Time) {
	death := deadletter.Death{LastStatus: out.Status, LastError: deadletter.CleanError(errorText(out))}
	switch out.Class {
	case deliver.Gone:
		death.Reason = deadletter.Gone
		if l.deadLetter(ctx, d, sub.ID, death) && l.cfg.Disable != nil {
			reason := fmt.Sprintf("410 Gone from %s at %s", subscribers.RedactURL(sub.URL), now.UTC().Format(time.RFC3339))
			if err := l.cfg.Disable(ctx, sub.ID, reason); err != nil {
				l.log.Error("lanes: disabling a gone subscriber", "subscriber", sub.ID, "err", err)
			}
		}
		return
	case deliver.Rejected:
		death.Reason = deadletter.Rejected
		l.deadLetter(ctx, d, sub.ID, death)
		return
	case deliver.Refused:
		death.Reason = deadletter.Refused
		l.deadLetter(ctx, d, sub.ID, death)
		return
	}

	// Retryable.
	if d.attempts >= sub.MaxAttempts {
		death.Reason = deadletter.MaxAttempts
		l.deadLetter(ctx, d, sub.ID, death)
		return
	}
	at := l.cfg.Clock.Now().Add(l.cfg.RetryPolicy(*sub).NextRetry(d.attempts, out))
	if !d.dueBy(at) {
		death.Reason = deadletter.Deadline
		l.deadLetter(ctx, d, sub.ID, death)
		return
	}
	l.log.Debug("lanes: delivery failed, will retry", "subscriber", sub.ID, "event", eventID,
		"attempt", d.attempts, "outcome", out.Class.String(), "status", out.Status, "err", out.Err, "retry_at", at)
	h := streams.CopyHeader(d.msg.Headers(), 4)
	h.Del(streams.HeaderOverflowSeq)
	h.Set(streams.HeaderAttempt, strconv.Itoa(d.attempts))
	h.Set(streams.HeaderFirstAttemptAt, d.firstAt.UTC().Format(time.RFC3339Nano))
	setOrDel(h, streams.HeaderLastStatus, strconv.Itoa(death.LastStatus), death.LastStatus != 0)
	setOrDel(h, streams.HeaderLastError, death.LastError, death.LastError != "")
	l.cfg.Metrics.Retried(sub.ID)
	l.park(ctx, d, *sub, h, at)
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

// park moves a delivery into RETRIES until at and acks the original once
// the parked copy is stored. If it cannot be parked, the original is handed
// back with a delay instead, losing nothing (but the attempt just made is
// not counted).
func (l *lane) park(ctx context.Context, d delivery, sub subscribers.Subscriber, h nats.Header, at time.Time) {
	w := l.env.writes
	body, err := l.env.bodyOf(ctx, d.msg)
	if errors.Is(err, errBodyGone) {
		l.deadLetter(ctx, d, sub.ID, bodyLost(err))
		return
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
		_ = d.msg.NakWithDelay(max(settleRetry, at.Sub(l.cfg.Clock.Now())))
		return
	}
	if err := d.msg.Ack(); err != nil {
		l.log.Warn("lanes: ack", "subscriber", sub.ID, "err", err)
	}
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
		_ = d.msg.NakWithDelay(max(settleRetry, time.Until(d.deliverAt)))
		return
	}
	if err := d.msg.Ack(); err != nil {
		l.log.Warn("lanes: ack", "subscriber", id, "err", err)
	}
}

// deadLetter stores the DLQ copy, then terminates the original; a Term'ed
// message is deleted at once, so the copy must be safe first. It reports
// whether the delivery was dead-lettered.
func (l *lane) deadLetter(ctx context.Context, d delivery, id string, death deadletter.Death) bool {
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
		_ = d.msg.NakWithDelay(settleRetry)
		return false
	}
	if err := l.env.deadLetter(ctx, id, body, h, death); err != nil {
		_ = d.msg.NakWithDelay(settleRetry)
		return false
	}
	if err := d.msg.TermWithReason(string(death.Reason)); err != nil {
		l.log.Warn("lanes: term", "subscriber", id, "err", err)
	}
	return true
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

// deadLetter stores the DLQ copy of a delivery with headers h and counts
// it; the caller then removes the original.
func (e *engine) deadLetter(ctx context.Context, id string, body []byte, h nats.Header, death deadletter.Death) error {
	death.Subscriber = id
	death.DeadAt = e.cfg.Clock.Now()
	if death.LastStatus == 0 && death.LastError == "" {
		// Died without an attempt of its own (expired, late, or
		// max-attempts lowered): keep what the last attempt saw.
		death.LastStatus, _ = strconv.Atoi(h.Get(streams.HeaderLastStatus))
		death.LastError = h.Get(streams.HeaderLastError)
	}
	err := e.writes.deads.enter(ctx)
	if err == nil {
		// Until answered, as a park: a dead letter whose PubAck was lost
		// must not come back to be sent again. Within the caller's time
		// (a refill's lease) and the relay's stop.
		storeCtx, cancel := e.settling(ctx)
		err = deadletter.Publish(storeCtx, e.writes.dead, body, h, death)
		cancel()
		e.writes.deads.leave()
	}
	if err != nil {
		e.cfg.Logger.Error("lanes: dead-lettering", "subscriber", id, "reason", death.Reason, "err", err)
		return err
	}
	e.cfg.Metrics.DeadLettered(id, death.Reason)
	if death.Reason == deadletter.Deadline || death.Reason == deadletter.Expired {
		e.cfg.Timeliness.Missed(id)
	}
	e.cfg.Logger.Info("lanes: dead-lettered", "subscriber", id, "event", h.Get(streams.HeaderEventID),
		"reason", death.Reason, "attempts", death.Attempts, "last_status", death.LastStatus)
	return nil
}

// lateInOverflow dead-letters, as a refill reads it, a delivery whose
// deadline passed while it waited in its subscriber's overflow: bringing it
// back would cost two writes for a message that can only die.
func (e *engine) lateInOverflow(id string, m overflow.Msg) func(context.Context) error {
	// An unreadable deadline is not judged here: brought back, the copy is
	// dead-lettered as malformed (see dispatch).
	deadline, malformed := streams.TimeOf(m.Header, streams.HeaderDeadline)
	if malformed != "" || deadline.IsZero() || e.cfg.Clock.Now().Before(deadline) {
		return nil
	}
	return func(ctx context.Context) error {
		death := deadletter.Death{Reason: deadletter.Deadline, OriginSeq: m.Seq}
		death.Attempts, death.FirstAttemptAt = streams.AttemptsOf(m.Header)
		return e.deadLetter(ctx, id, m.Data, m.Header, death)
	}
}

// resultOf is what an attempt's outcome tells the rate limiter: a
// Retry-After on a 429 or 503, or an exhausted quota on any reply, pauses the
// whole subscriber; every 429, with a Retry-After or without, is a throttle
// signal that lowers its rate in force (the limiter makes at most one
// decrease per lease window of them); a connection failure, a timeout or
// another 5xx counts toward the breaker.
func resultOf(out deliver.Outcome, probe bool) ratelimit.Result {
	// Any answer but a 408, 425, 429 or 5xx shows the endpoint up: for the
	// breaker a 404 is as good as a 200.
	r := ratelimit.Result{Probe: probe, Success: out.Class == deliver.Delivered || out.Class == deliver.Rejected || out.Class == deliver.Gone}
	switch {
	case out.RetryAfterSet && out.RetryAfter > 0:
		r.PauseFor = out.RetryAfter
	case out.QuotaExhausted && out.QuotaReset > 0:
		r.PauseFor = out.QuotaReset
	}
	if out.Class == deliver.Retryable {
		switch {
		case out.Status == http.StatusTooManyRequests:
			// A Retry-After says when to come back, not that the rate was
			// right: without the decrease, a subscriber whose --rate is too
			// high would be paused and overrun again for ever.
			r.Throttled = true
		case out.Status == http.StatusServiceUnavailable && out.RetryAfterSet:
		default:
			r.Failure = true
		}
	}
	return r
}

func errorText(out deliver.Outcome) string {
	if out.Err == nil {
		return ""
	}
	return out.Err.Error()
}

func setOrDel(h nats.Header, key, value string, set bool) {
	if !set {
		h.Del(key)
		return
	}
	h.Set(key, value)
}
