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

// Subjects of the RETRIES stream.
const (
	// WaitPrefix + <subscriber>.<unique id> holds a parked delivery until it
	// is due.
	WaitPrefix = "retries.wait."
	// DuePrefix + <subscriber> is where JetStream republishes it when due.
	DuePrefix = "retries.due."
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
// parked copy is stored, so the caller may then ack the original.
func Park(ctx context.Context, js jetstream.JetStream, subscriber string, body []byte, header nats.Header, at time.Time, dedupeID string) error {
	h := streams.CopyHeader(header, 3)
	h.Set(headerSchedule, "@at "+at.UTC().Format(time.RFC3339Nano))
	h.Set(headerScheduleTarget, DuePrefix+subscriber)
	m := &nats.Msg{Subject: WaitPrefix + subscriber + "." + nuid.Next(), Header: h, Data: body}
	if _, err := js.PublishMsg(ctx, m, jetstream.WithMsgID(dedupeID)); err != nil {
		return fmt.Errorf("retry: parking a delivery for %s: %w", subscriber, err)
	}
	return nil
}

// movedID is the Nats-Msg-Id of the copy the mover puts back on DELIVERIES:
// the unique token of the schedule that fired (else the due message's own
// sequence), so that a mover crash between its publish and its ack cannot
// make a second copy.
func movedID(due nats.Header, seq uint64) string {
	if s := due.Get(headerScheduler); s != "" {
		return "retry-" + s[strings.LastIndexByte(s, '.')+1:]
	}
	return fmt.Sprintf("retry-seq-%d", seq)
}
