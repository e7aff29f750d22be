// Package deadletter owns the dead-letter rules of docs/dead-letters.md: the DLQ
// stream's subjects (dlq.<subscriber>.<reason>), the reasons a delivery dies
// for, the headers relay sets on a DLQ copy (docs/headers.md "On a dead
// letter": Relay-Reason, Relay-Attempts, Relay-Last-Status, Relay-Last-Error
// of at most 1 KiB, Relay-Dead-At, Relay-First-Attempt-At and
// Relay-Origin-Seq), the Nats-Msg-Id of a DLQ copy (dlq.<DELIVERIES
// sequence>), and the JSON form of a DLQ entry that `relay dlq ls --json`
// prints.
//
// # Writing
//
// A lane that gives up on a delivery calls [Publish] with the original's body
// and headers and a [Death] saying why. Publish returns only once JetStream
// has acknowledged the copy, because the lane then Terms the original and a
// Term'ed message on the work-queue DELIVERIES stream is deleted at once: the
// copy must be safe first. The copy's Nats-Msg-Id is derived from the
// original's DELIVERIES sequence, so a relay that crashes between the publish
// and the Term, and dead-letters the redelivered original again, stores one
// entry, not two; JetStream answers the second publish with a duplicate
// PubAck, which Publish treats as success.
//
// # Reading
//
// [List] reads the entries a [Filter] selects, oldest first, with an ordered
// consumer that fetches headers only, so that listing a large DLQ costs
// neither the bodies' memory nor one request per entry. [EntryFromMsg] turns
// one stored message into the [Entry] the CLI prints.
//
// The package does not decide when a delivery dies; the lanes do. It knows
// nothing of HTTP and holds no state between calls.
package deadletter
