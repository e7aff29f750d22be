package streams

import (
	"strconv"
	"strings"
)

// relay's own Nats-Msg-Ids (a replay's, a park's, a hold's, and the
// overflow's overflow-, refill- and spill- ids, the mover's retry-) never
// hold a dot, while the id of a fan-out copy, <event id>.<subscriber>,
// always does: whatever a publisher names an event, no copy id is ever one
// of relay's, so no stream's duplicate window drops one for the other.

// ReplayID is the Nats-Msg-Id of the copy a replay of DLQ sequence seq
// puts back on DELIVERIES: two replays of one entry enqueue one copy.
func ReplayID(seq uint64) string { return "replay-" + strconv.FormatUint(seq, 10) }

// ParkID is the Nats-Msg-Id of the retry parked in RETRIES for the
// delivery at DELIVERIES sequence seq after its attempt-th attempt.
func ParkID(seq uint64, attempt int) string {
	return "park-" + strconv.FormatUint(seq, 10) + "-" + strconv.Itoa(attempt)
}

// ScheduleID is the Nats-Msg-Id of the delivery at DELIVERIES sequence seq
// scheduled in RETRIES until its Relay-Deliver-At. Its prefix is the one
// earlier releases wrote, so that a copy scheduled by one of them is still
// deduplicated.
func ScheduleID(seq uint64) string { return "hold-" + strconv.FormatUint(seq, 10) }

// CopyID is the Nats-Msg-Id of the copy of event eventID for subscriber,
// <event id>.<subscriber> (docs/streams.md): fanning an event out again
// within DELIVERIES' duplicate window stores one copy per subscriber.
func CopyID(eventID, subscriber string) string { return eventID + "." + subscriber }

// IsCopyID reports whether msgID is [CopyID] of eventID and subscriber,
// without building it: a copy that came straight from the fan-out, not
// one moved back from RETRIES, replayed from the DLQ or published by hand.
func IsCopyID(msgID, eventID, subscriber string) bool {
	return len(msgID) == len(eventID)+1+len(subscriber) &&
		strings.HasPrefix(msgID, eventID) && msgID[len(eventID)] == '.' &&
		strings.HasSuffix(msgID, subscriber)
}
