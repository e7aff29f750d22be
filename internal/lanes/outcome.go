package lanes

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/relay-dev/relay/internal/attempts"
	"github.com/relay-dev/relay/internal/deadletter"
	"github.com/relay-dev/relay/internal/deliver"
	"github.com/relay-dev/relay/internal/ratelimit"
	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/streams"
)

// An attempt's outcome: what it settles a delivery to (Parked or Dead), and
// what it tells the rate limiter.

// settlement is what a failed attempt settled its delivery to, for the
// attempt's record: a retry at a time, a dead letter, or a hand-back when
// neither could be stored.
type settlement struct {
	outcome attempts.Outcome
	next    time.Time
	reason  deadletter.Reason
	dlqSeq  uint64
}

// died is the settlement of a dead-lettering that stored DLQ sequence seq
// (ok), or that was handed back (!ok).
func died(reason deadletter.Reason, seq uint64, ok bool) settlement {
	if !ok {
		return settlement{outcome: attempts.HandedBack}
	}
	return settlement{outcome: attempts.Dead, reason: reason, dlqSeq: seq}
}

// failed settles an attempt that did not deliver: dead-letter it (and
// disable a gone subscriber), or park it for a retry. It is apart from
// send, whose stack every delivery's goroutine grows to, so that this rarer
// path's frame is not part of it.
func (l *lane) failed(ctx context.Context, d delivery, sub *subscribers.Subscriber, eventID string, out deliver.Outcome, now time.Time) settlement {
	death := deadletter.Death{LastStatus: out.Status, LastError: deadletter.CleanError(errorText(out))}
	switch out.Class {
	case deliver.Gone:
		death.Reason = deadletter.Gone
		if l.removedMeanwhile(ctx, d, sub.ID) {
			return settlement{}
		}
		seq, ok := l.deadLetter(ctx, d, sub.ID, death)
		if ok && l.cfg.Disable != nil {
			reason := fmt.Sprintf("410 Gone from %s at %s", subscribers.RedactURL(sub.URL), now.UTC().Format(time.RFC3339))
			at, err := l.cfg.Disable(ctx, sub.ID, reason)
			if err != nil {
				l.log.Error("lanes: disabling a gone subscriber", "subscriber", sub.ID, "err", err)
			} else if !at.IsZero() {
				l.cfg.Ops.Disabled(sub.ID, reason, out.Status, at)
			}
		}
		return died(death.Reason, seq, ok)
	case deliver.Rejected:
		if !sub.Retries(out.Status) {
			death.Reason = deadletter.Rejected
		}
	case deliver.Refused:
		death.Reason = deadletter.Refused
	}
	if death.Reason != "" {
		return l.die(ctx, d, sub.ID, death)
	}

	// Retryable, or a status of its --retry-status.
	if d.attempts >= sub.MaxAttempts {
		death.Reason = deadletter.MaxAttempts
		return l.die(ctx, d, sub.ID, death)
	}
	at := l.cfg.Clock.Now().Add(l.cfg.RetryPolicy(*sub).NextRetry(d.attempts, out))
	if !d.dueBy(at) {
		death.Reason = deadletter.Deadline
		return l.die(ctx, d, sub.ID, death)
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
	return l.park(ctx, d, *sub, h, at)
}

// die dead-letters d for death, unless its subscriber was removed while
// the attempt was on its way (see removedMeanwhile).
func (l *lane) die(ctx context.Context, d delivery, id string, death deadletter.Death) settlement {
	if l.removedMeanwhile(ctx, d, id) {
		return settlement{}
	}
	seq, ok := l.deadLetter(ctx, d, id, death)
	return died(death.Reason, seq, ok)
}

// removedMeanwhile settles d as unknownSubscriber does when the relay's
// view no longer holds its subscriber, and says whether it did: a removal
// is never a dead letter nor an alert, whatever the last attempt's answer.
// The attempt then has no record of its own (zero settlement): the
// removal dropped the subscriber's story with it.
func (l *lane) removedMeanwhile(ctx context.Context, d delivery, id string) bool {
	if _, ok := l.cfg.Subscribers.Get(id); ok {
		return false
	}
	l.unknownSubscriber(ctx, d, id)
	return true
}

// resultOf is what an attempt's outcome tells the rate limiter: a
// Retry-After on a 429 or 503, or an exhausted quota on any reply, pauses the
// whole subscriber; every 429, with a Retry-After or without, is a throttle
// signal that lowers its rate in force (the limiter makes at most one
// decrease per lease window of them); a connection failure, a timeout or
// another 5xx counts toward the breaker. It repeats the request's probe and
// circuit generation from its decision dec.
func resultOf(out deliver.Outcome, dec ratelimit.Decision) ratelimit.Result {
	// Any answer but a 408, 425, 429 or 5xx shows the endpoint up: for the
	// breaker a 404 is as good as a 200.
	r := ratelimit.Result{Probe: dec.Probe, Gen: dec.Gen, Status: out.Status,
		Success: out.Class == deliver.Delivered || out.Class == deliver.Rejected || out.Class == deliver.Gone}
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

func limitOf(sub subscribers.Subscriber) ratelimit.Limit {
	return ratelimit.Limit{Rate: sub.Rate, Burst: sub.Burst, Breaker: ratelimit.Breaker{
		FailureRate: sub.BreakerFailureRate, MinRequests: sub.BreakerMinRequests,
		Window: sub.BreakerWindow.Std(), Consecutive: sub.BreakerConsecutive,
	}}
}
