// Package lanes owns DESIGN.md "Lanes": the durable pull consumers on
// DELIVERIES and the per-subscriber scheduling inside each of them.
//
// A lane is one durable pull consumer, lane_<lane>, filtered on
// deliveries.<lane>.>. Many subscribers share a lane (sNN, by FNV-1a of the
// id) and a few big ones get a dedicated lane (d_<id>). Consumers are kept few
// and fixed because every ack on a work-queue stream scans all its consumers.
//
// Inside a lane, every subscriber has its own scheduler: a bounded queue of
// held messages, at most max-in-flight requests at once, and a decision of
// the rate limiter (a token, or a pause or an open breaker to wait out)
// before each request. The lane's pull loop never waits on a subscriber: a
// message its subscriber cannot take now is either held (its ack wait
// extended with InProgress while it waits) or, past the hold bound, handed
// back for the next free return slot, one every 1/rate. A hand-back of a
// second or more, a retry, a pause and an open breaker park the message in
// RETRIES (package retry), where it holds none of the lane's MaxAckPending
// slots. So a slow, throttled, paused or broken subscriber never delays its
// lane-mates.
//
// Holding or parking a message is never an attempt: only a started HTTP
// request is, and the count rides on the parked copy (Relay-Attempt).
package lanes
