package streams

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
)

// The subjects of relay's streams are built and read here alone, so that
// each shape is written once: every writer and every reader (the fan-out,
// the lanes, the retry mover, replay, status, metrics) agrees on it.
const (
	// deliveriesPrefix + <lane>.<subscriber> is a copy queued on a lane.
	deliveriesPrefix = "deliveries."
	// OverflowPrefix + <subscriber> holds a subscriber's copies beyond what
	// its lane holds, until they are brought back (OverflowLane is its
	// lane token).
	OverflowPrefix = deliveriesPrefix + OverflowLane + "."
	// RetryWaitPrefix + <subscriber>.<unique> holds a parked delivery until
	// it is due.
	RetryWaitPrefix = "retries.wait."
	// RetryDuePrefix + <subscriber> is where JetStream republishes a held
	// message when it is due.
	RetryDuePrefix = "retries.due."
	// RetryAtPrefix + <subscriber>.<unique> holds a fan-out copy of an event
	// whose Relay-Deliver-At is still ahead: apart from RetryWaitPrefix so
	// that scheduled deliveries are counted apart from parked retries; both
	// fire on RetryDuePrefix.
	RetryAtPrefix = "retries.at."
	// dlqPrefix + <subscriber>.<reason> is a dead letter.
	dlqPrefix = "dlq."
	// attemptsPrefix + <event key> holds every record of an event: its
	// fan-outs and the attempts to deliver it (see [EventKey]);
	// attemptsPrefix + failed.<subscriber> a copy of each record of a
	// failure of one subscriber. Both are literal subjects, which the
	// server finds by its subject index, however many it holds.
	attemptsPrefix = "attempts."
)

// OverflowLane is the lane token of the overflow subjects: no lane is
// named so.
const OverflowLane = "overflow"

// DeliverySubject is where a subscriber's copies are queued on a lane.
func DeliverySubject(lane, subscriber string) string {
	return deliveriesPrefix + lane + "." + subscriber
}

// OverflowSubject is where a subscriber's copies wait beyond its lane.
func OverflowSubject(subscriber string) string { return OverflowPrefix + subscriber }

// LaneFilter is the filter of every copy queued on a lane.
func LaneFilter(lane string) string { return deliveriesPrefix + lane + ".>" }

// SubscriberDeliveries is the filter of every copy of one subscriber in
// DELIVERIES, on its lane and in its overflow.
func SubscriberDeliveries(subscriber string) string { return deliveriesPrefix + "*." + subscriber }

// laneConsumerPrefix + <lane> is the durable consumer of a lane on
// DELIVERIES.
const laneConsumerPrefix = "lane_"

// LaneConsumer is the durable consumer of a lane.
func LaneConsumer(lane string) string { return laneConsumerPrefix + lane }

// LaneOfConsumer returns the lane a consumer of DELIVERIES reads, and false
// for a consumer that is not a lane's.
func LaneOfConsumer(consumer string) (string, bool) {
	return strings.CutPrefix(consumer, laneConsumerPrefix)
}

// DeliveriesFilter is the filter of everything in DELIVERIES.
const DeliveriesFilter = deliveriesPrefix + ">"

// IsDelivery reports whether filter names subjects of DELIVERIES.
func IsDelivery(filter string) bool { return strings.HasPrefix(filter, deliveriesPrefix) }

// DeliveryOf splits deliveries.<lane>.<subscriber> into its lane and
// subscriber tokens; false for a subject of other tokens than these three.
// The tokens are not checked further: a caller that needs a valid
// subscriber id validates it.
func DeliveryOf(subject string) (lane, subscriber string, ok bool) {
	rest, ok := strings.CutPrefix(subject, deliveriesPrefix)
	if !ok {
		return "", "", false
	}
	lane, subscriber, ok = strings.Cut(rest, ".")
	return lane, subscriber, ok && lane != "" && subscriber != "" && !strings.Contains(subscriber, ".")
}

// DeadLetterSubject is where a subscriber's dead letters of reason go.
func DeadLetterSubject(subscriber, reason string) string {
	return dlqPrefix + subscriber + "." + reason
}

// DeadLetterFilter is the filter of one subscriber's dead letters, of
// every reason.
func DeadLetterFilter(subscriber string) string { return dlqPrefix + subscriber + ".*" }

// DeadLettersFilter is the filter of every dead letter.
const DeadLettersFilter = dlqPrefix + ">"

// SubjectToken returns the i-th dot-separated token of subject, counted from
// zero, and whether subject has a non-empty one: the subscriber of
// deliveries.<lane>.<id>, retries.wait.<id>.<unique> or dlq.<id>.<reason>.
// A subject too short was not written by relay and is left out of every
// count.
func SubjectToken(subject string, i int) (string, bool) {
	parts := strings.SplitN(subject, ".", i+2)
	if len(parts) <= i || parts[i] == "" {
		return "", false
	}
	return parts[i], true
}

// BodySubject is the BODIES subject of the body of the event at EVENTS
// sequence seq.
func BodySubject(seq uint64) string { return "bodies." + strconv.FormatUint(seq, 10) }

// maxEventKey is the longest event id [EventKey] keeps as it is.
const maxEventKey = 128

// hashedKeyMark begins an [EventKey] made from a hash: no id kept as it is
// begins with it.
const hashedKeyMark = "~"

// EventKey is the subject token of event eventID's attempt records: the id
// itself when it is made of letters, digits, '_', '-' and ':' and at most
// [maxEventKey] long, so that `nats stream view ATTEMPTS` reads well; else
// "~" and the first 128 bits of its SHA-256 in hex. Two ids of one hashed
// key are told apart by the id every record holds.
func EventKey(eventID string) string {
	if len(eventID) > 0 && len(eventID) <= maxEventKey && strings.IndexFunc(eventID, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == ':')
	}) < 0 {
		return eventID
	}
	sum := sha256.Sum256([]byte(eventID))
	return hashedKeyMark + hex.EncodeToString(sum[:16])
}

// EventRecords is the subject of every record of the event of key: its
// fan-outs and its attempts.
func EventRecords(key string) string { return attemptsPrefix + key }

// SubscriberFailures is the subject of the records of subscriber's failed
// attempts and deaths, of every event: three tokens, where an event's
// subject has two, so that no event key reaches it.
func SubscriberFailures(subscriber string) string { return attemptsPrefix + "failed." + subscriber }

// APISubjects are the subjects relay serves requests on over core NATS
// (`relay sub test` on relay.api.sub.test, the NATS service relay on
// relay.api.v1.>): a subscription the service user of docs/permissions.md
// is granted.
const APISubjects = "relay.api.>"

// DiscoverySubjects are the subjects on which a NATS micro service answers
// `nats micro ls` and `$SRV.PING.relay` ($SRV.PING|INFO|STATS[.name[.id]]):
// the service user's other subscription.
const DiscoverySubjects = "$SRV.>"

// ReplySubjects are the inboxes the service user may publish to: nats.go's
// and the nats CLI's default inbox prefix, under which a request's answer
// goes, and nothing of any stream.
const ReplySubjects = nats.InboxPrefix + ">"

// reservedPrefixes begin the subjects a request's reply may never name:
// those of relay's streams (streams/*.json) and buckets, JetStream's API,
// acks and flow control, the system account's, and relay's own API and
// operational events.
var reservedPrefixes = []string{
	"events.", deliveriesPrefix, "retries.", dlqPrefix, "bodies.", attemptsPrefix,
	"$KV.", "$JS.", "$SYS.", "relay.",
}

// Reserved reports whether subject lies in relay's own namespaces (see
// reservedPrefixes), where no answer to a request may be published: a
// request names its reply subject, and an answer sent there would be
// stored in a stream, written to a bucket or taken for an event.
func Reserved(subject string) bool {
	for _, p := range reservedPrefixes {
		if strings.HasPrefix(subject, p) || subject == strings.TrimSuffix(p, ".") {
			return true
		}
	}
	return false
}
