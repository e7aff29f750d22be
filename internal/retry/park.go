package retry

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/relay-dev/relay/streams"
)

// JetStream's message-scheduling headers (nats-server 2.12 and later).
const (
	headerSchedule       = "Nats-Schedule"
	headerScheduleTarget = "Nats-Schedule-Target"
	headerScheduler      = "Nats-Scheduler"
)

// Park stores a delivery in RETRIES until at, when it comes back to its
// subscriber's lane. header is the delivery's own, already carrying what the
// next attempt needs (Relay-Attempt and the like); its Nats-* headers are
// dropped. dedupeID makes the park idempotent (use one derived from the
// DELIVERIES sequence of the message being parked). Park returns once the
// parked copy is stored, so the caller may then ack the original. A PubAck
// that does not come is asked for again with the same id (see
// [streams.StoreOnce]) until ctx ends or a minute has passed; then the
// error is [streams.ErrUnanswered], and the parked copy may be stored.
func Park(ctx context.Context, js jetstream.JetStream, subscriber string, body []byte, header nats.Header, at time.Time, dedupeID string) error {
	m := waiting(streams.RetryWaitPrefix, subscriber, body, header, at)
	if _, err := streams.StoreOnce(ctx, js, m, dedupeID); err != nil {
		return fmt.Errorf("retry: parking a delivery for %s: %w", subscriber, err)
	}
	return nil
}

// Schedule is [Park] for a delivery that reached its lane before its due
// time (a dead letter replayed early, a copy published by hand): it waits on
// streams.RetryAtPrefix, counted as scheduled rather than as a retry.
func Schedule(ctx context.Context, js jetstream.JetStream, subscriber string, body []byte, header nats.Header, at time.Time, dedupeID string) error {
	m := Scheduled(subscriber, body, header, at)
	if _, err := streams.StoreOnce(ctx, js, m, dedupeID); err != nil {
		return fmt.Errorf("retry: scheduling a delivery for %s until it is due: %w", subscriber, err)
	}
	return nil
}

// Scheduled returns the message that keeps a copy of an event for
// subscriber in RETRIES until at, its due time; the mover then puts it on
// the subscriber's lane as it does a due retry. The caller publishes it
// with the copy's own Nats-Msg-Id, so that fanning an event out again
// within RETRIES' duplicate window stores one copy. header is not modified.
func Scheduled(subscriber string, body []byte, header nats.Header, at time.Time) *nats.Msg {
	return waiting(streams.RetryAtPrefix, subscriber, body, header, at)
}

// waiting is the scheduled message that waits on prefix + subscriber + a
// unique token until at, then fires on streams.RetryDuePrefix + subscriber.
func waiting(prefix, subscriber string, body []byte, header nats.Header, at time.Time) *nats.Msg {
	h := streams.CopyHeader(header, 3)
	h.Set(headerSchedule, "@at "+at.UTC().Format(time.RFC3339Nano))
	h.Set(headerScheduleTarget, streams.RetryDuePrefix+subscriber)
	return &nats.Msg{Subject: prefix + subscriber + "." + nuid.Next(), Header: h, Data: body}
}

// Moved reports whether a DELIVERIES message is a copy the mover put back
// from RETRIES: its schedule fired, by the server's clock, so it is due
// whatever this host's clock says.
func Moved(h nats.Header) bool {
	id := h.Get(jetstream.MsgIDHeader)
	// A fan-out copy's id, <event id>.<subscriber>, holds a dot, whatever
	// its event id starts with; the mover's never does.
	return strings.HasPrefix(id, movedPrefix) && !strings.Contains(id, ".")
}

// movedPrefix starts the Nats-Msg-Id of every copy the mover stores.
const movedPrefix = "retry-"

// movedID is the Nats-Msg-Id of the copy the mover puts back on DELIVERIES:
// the unique token of the schedule that fired (else the due message's own
// sequence), so that a mover crash between its publish and its ack cannot
// make a second copy.
func movedID(due nats.Header, seq uint64) string {
	if s := due.Get(headerScheduler); s != "" {
		return movedPrefix + s[strings.LastIndexByte(s, '.')+1:]
	}
	return fmt.Sprintf("%sseq-%d", movedPrefix, seq)
}
