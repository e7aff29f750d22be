package opevent

import (
	"strconv"
	"strings"
	"time"
)

// Prefix starts every operational event type; the event types relay
// reserves for itself.
const Prefix = "relay."

// The operational event types, the subject after "events.".
const (
	// SubscriberDisabled: relay disabled the subscriber (it answered 410
	// Gone); nothing is sent to it until `relay sub enable`.
	SubscriberDisabled = "relay.subscriber.disabled"
	// SubscriberPaused: the subscriber asked for a pause (a Retry-After on
	// a 429 or 503, or an exhausted quota), which every relay honours
	// until Until.
	SubscriberPaused = "relay.subscriber.paused"
	// SubscriberResumed: that pause ended.
	SubscriberResumed = "relay.subscriber.resumed"
	// CircuitOpened: the subscriber failed enough requests in a row that
	// relay stopped sending to it until Until, when one probe is sent.
	CircuitOpened = "relay.circuit.opened"
	// CircuitClosed: a request succeeded again; the circuit is closed.
	CircuitClosed = "relay.circuit.closed"
	// DeliveryDead: deliveries of the subscriber were dead-lettered, Count
	// of them for Reason between From and To (one event a subscriber,
	// reason and minute at most). Reason backlog is the shedding of a
	// subscriber past its --max-backlog or its share of a full DELIVERIES.
	DeliveryDead = "relay.delivery.dead"
)

// Types lists every operational event type.
var Types = []string{SubscriberDisabled, SubscriberPaused, SubscriberResumed, CircuitOpened, CircuitClosed, DeliveryDead}

// Is reports whether eventType is an operational event's: relay's own.
func Is(eventType string) bool { return strings.HasPrefix(eventType, Prefix) }

// Event is the JSON body of an operational event. Fields that do not
// apply to its type are left out.
type Event struct {
	// Type repeats the event type.
	Type string `json:"type"`
	// Subscriber is the id of the subscriber it is about.
	Subscriber string `json:"subscriber"`
	// Reason: why it was disabled (the 410's reason), or the dead
	// letters' reason.
	Reason string `json:"reason,omitempty"`
	// Status is the last HTTP status that led to it, when there was one.
	Status int `json:"status,omitempty"`
	// Count is how many dead letters a relay.delivery.dead stands for.
	Count int `json:"count,omitempty"`
	// At is when it happened (UTC).
	At time.Time `json:"at"`
	// Until is when a pause or an open circuit ends.
	Until time.Time `json:"until,omitzero"`
	// From and To bound the dead letters a relay.delivery.dead counts.
	From time.Time `json:"from,omitzero"`
	To   time.Time `json:"to,omitzero"`
	// Relay names the relay that saw it (its host and process).
	Relay string `json:"relay"`
}

// IDPrefix begins the id of every operational event: ids a publisher's
// own must not take (the HTTP API refuses an Idempotency-Key with it).
const IDPrefix = "relay:"

// id is the event's Nats-Msg-Id: IDPrefix + the type after its prefix,
// the subscriber and what tells this happening from another of its kind
// (a revision, a time), joined by ':', which no subscriber id holds. No
// '.', so the webhook-id is the event id as it is.
func id(eventType, subscriber string, discriminator ...string) string {
	kind := strings.ReplaceAll(strings.TrimPrefix(eventType, Prefix), ".", "-")
	return IDPrefix + kind + ":" + subscriber + ":" + strings.Join(discriminator, ":")
}

// millis writes t as Unix milliseconds, a discriminator.
func millis(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }
