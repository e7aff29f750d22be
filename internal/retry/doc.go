// Package retry owns when a failed delivery is tried again (docs/delivery-rules.md
// "Retries and back-off": max(Retry-After, min(retry-max, retry-base ×
// 2^(attempt−1)) × U(0.5, 1.0)), the Retry-After bounded by --max-pause) and
// where it waits meanwhile.
//
// A waiting delivery must not sit in its lane's consumer as a NAK-delayed
// message: every such message keeps one of the lane's MaxAckPending slots,
// so a subscriber failing for an hour would fill its lane and stall its
// lane-mates, and its own fresh messages would not flow once it recovered.
// Instead the lane parks it in the RETRIES stream as a JetStream scheduled
// message (Nats-Schedule: @at <time>) on retries.wait.<subscriber>.<id>;
// at that time the server republishes it on retries.due.<subscriber>, and
// the [Mover] puts it back on deliveries.<lane>.<subscriber>. The copy carries
// Relay-Attempt and Relay-First-Attempt-At, so attempts are counted exactly
// whatever the consumer's delivery count says.
//
// A due delivery whose subscriber the mover's view lacks goes to that id's
// shared lane all the same: the lane asks the relay_subscribers bucket and
// holds it or dead-letters it as unroutable, so nothing leaves RETRIES
// without a trace.
//
// Parking and moving are idempotent: the parked copy's Nats-Msg-Id is
// derived from the DELIVERIES sequence it came from, and the moved copy's
// from the schedule it fired from, so a crash between any publish and its
// ack creates no second copy.
package retry
