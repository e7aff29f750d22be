// Package status computes what `relay status` reports for each subscriber
// (DESIGN.md "Command line"): its queue in DELIVERIES, its parked retries in
// RETRIES, its dead letters in DLQ, its lane consumer's outstanding
// messages, and its shared flow-control state in the relay_ratelimit bucket
// (tokens, pause, adaptive rate, breaker), all read from NATS, so that an
// operator sees the same numbers whichever relay instance is running and
// whether any is running at all.
//
// # Cost
//
// The report must stay cheap on a cluster with thousands of subscribers, so
// the counts come from one stream info per stream with a subject filter
// (the server returns a count per subject, which [Collect] adds up per
// subscriber) rather than one request per subscriber. What has no
// aggregate form is read per subscriber, a few at a time: its
// relay_ratelimit entry, and, only when it has a queue, its oldest queued
// message. Lane consumers are read once per lane in use.
//
// # Time
//
// Every time in the report is the server's: the refill of a token bucket,
// whether a pause or a breaker's cool-down is over, and the age of the
// oldest message are measured against the timestamp of the DELIVERIES
// stream info, as the rate limiter measures them against KV entry
// timestamps. A host whose clock is off therefore shows what the relays
// decide, not what its own clock suggests.
//
// The package only reads: it takes no token, moves no message and changes
// no consumer.
package status
