// Package lanes owns DESIGN.md "Lanes": the durable pull consumers on
// DELIVERIES and the per-subscriber scheduling inside each of them.
//
// A lane is one durable pull consumer, lane_<lane>, filtered on
// deliveries.<lane>.>. Many subscribers share a lane (sNN, by FNV-1a of the
// id) and a few big ones get a dedicated lane (d_<id>). Consumers are kept few
// and fixed because every ack on a work-queue stream scans all its consumers.
//
// Inside a lane, every subscriber has its own scheduler: a bounded queue of
// held messages, at most max-in-flight requests at once, and a token from the
// rate limiter before each request. The lane's pull loop never waits on a
// subscriber: a message its subscriber cannot take now is either held (its
// ack wait extended with InProgress while it waits) or, past the hold bound,
// handed back with NakWithDelay sized to when the subscriber can take it. So
// a slow, throttled or broken subscriber never delays its lane-mates.
//
// Holding a message is never an attempt: only a started HTTP request is.
package lanes
