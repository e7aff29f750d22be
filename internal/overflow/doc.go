// Package overflow owns docs/delivery-rules.md "Isolation" for the
// messages a subscriber cannot take now: a backlog beyond its share of its
// lane, or everything queued while it is paused, its circuit is open or it
// is disabled.
//
// Such a delivery leaves its lane for deliveries.overflow.<subscriber>, a
// subject of the DELIVERIES stream that no lane consumer reads, and the
// original is acked (one write). When its subscriber's queue runs low, the
// lane brings the oldest ones back in publish order (one more write) with a
// batched direct get, republishes them on deliveries.<lane>.<subscriber> and
// purges what it read with one subject purge. Nothing is scheduled, so a
// message waits there as long as it must without being written again: a
// backlog of any length at any rate costs two writes a message, and a
// disabled subscriber's queue costs nothing while it stays disabled.
//
// The overflow is in DELIVERIES itself, so the stream's byte bound (with
// discard-new) still pushes back on the fan-out, and `relay sub rm` drops it
// with the rest of the subscriber's queue (deliveries.*.<subscriber>).
//
// # One relay at a time
//
// Every relay pulls from every lane, so every relay's scheduler of a
// subscriber with a backlog wants to bring it back. One relay at a time
// does: a refill holds the subscriber's lease in the KV bucket relay_refill
// (key = subscriber id, value = the relay's id, empty when free), taken and
// given back by compare-and-set around each refill, one or two writes for a
// refill of up to a thousand messages. A relay that finds the lease taken
// reads nothing, and does not ask again for half a second; the copies the
// holder brings back reach its lanes like any others. So the reads and
// writes a backlog costs do not grow with the number of relays, and a copy
// that one relay stored on the lane is never spilled to RETRIES by another.
// A relay that dies holding a lease leaves it to the bucket's TTL (30 s):
// then the next relay whose sweep or queue asks takes it. A refill's reads,
// writes and waits end within five sixths of that TTL after its take, so it
// has purged what it stored before the lease can pass to another relay.
//
// The lease saves work; safety does not rest on it. The republished copy's
// Nats-Msg-Id is refill-<overflow sequence>, so two relays reading the same
// messages within the stream's duplicate window (a refill that outlasted
// its lease) store one copy; a refill spills to RETRIES only while its lease
// surely holds; and a relay that dies between its republish and its purge
// leaves messages that the next holder brings back again (at-least-once,
// with the same webhook-id).
package overflow
