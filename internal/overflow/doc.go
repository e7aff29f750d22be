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
// Bringing back is safe from several relays at once and across crashes: the
// republished copy's Nats-Msg-Id is refill-<overflow sequence>, so two
// relays reading the same messages within the stream's duplicate window
// store one copy, and a relay that dies between its republish and its purge
// leaves messages that the next reader brings back again (at-least-once,
// with the same webhook-id).
package overflow
