// Package status computes what `relay status` reports for each subscriber
// (docs/cli.md "relay status"): its queue in DELIVERIES (on its lane and in its
// overflow), its parked retries and its scheduled deliveries (not due yet)
// in RETRIES, its dead letters in DLQ by reason, its lane consumer's
// outstanding messages, its shared flow-control state in the
// relay_ratelimit bucket (tokens, pause, adaptive rate, breaker), and how
// many of its deliveries met their deadline and how many missed it, from
// the relay_timeliness bucket, with a summary over all of them; each relay
// stream's use against its limits (max_bytes, max_msgs), which relay keeps
// as an operator set them; and, for one subscriber, its last dead
// letters. All of it is read from NATS, so that an operator sees the same
// numbers whichever relay instance is running and whether any is running
// at all.
//
// # Cost
//
// The report must stay cheap on a cluster with thousands of subscribers and
// long backlogs, so every count comes from the server's subject index, no
// answer lists one subject per message, and nothing creates a consumer or
// writes. [Collect], whatever the number of subscribers, makes:
//
//   - six stream lookups (DELIVERIES, RETRIES, DLQ, the two buckets'
//     streams, EVENTS); RETRIES' message count comes with its lookup, and
//     so does whether relay_timeliness exists and holds anything; and
//     each relay stream's messages and bytes against its limits
//     ([Report.Streams]), with or without subscribers;
//   - RETRIES, while it holds any message: one stream info filtered on
//     retries.at.> with an offset past the end (see below), whose answer
//     counts the scheduled deliveries of every subscriber, for
//     [Summary.Scheduled], and lists none; [Summary.Parked] is the rest of
//     RETRIES' message count;
//   - DELIVERIES: one stream info filtered on deliveries.>, whose subjects
//     are deliveries.<lane>.<subscriber> and deliveries.overflow.<subscriber>,
//     a count per subscriber and lane, which the client adds up; the server
//     sends up to 100,000 subjects an answer;
//   - DLQ: the same on dlq.<subscriber>.<reason>, a count per subscriber and
//     reason;
//   - relay_ratelimit and relay_timeliness: batched direct gets of each
//     bucket's stream, which holds one message a key, 1,000 entries a
//     request; none of relay_timeliness when it is empty or missing (relays
//     older than it), which shows as no deadline counts, not a failure;
//   - one consumer info per lane in use, and one get by subject per
//     subscriber with a queue (its oldest message), [readers] at a time.
//
// A parked delivery waits on retries.wait.<subscriber>.<id>, and a
// scheduled one on retries.at.<subscriber>.<id>, a subject of its own each
// (a JetStream message schedule is keyed by its subject), so a subject
// list of RETRIES grows with the backlog, and the server keeps no count per
// subscriber: the only exact count it gives is one request per subscriber
// and kind, a stream info filtered on retries.wait.<subscriber>.* (or
// retries.at.<subscriber>.*) with an offset past the end, whose answer
// carries how many subjects match and none of them. 10,000 such requests
// per report (and per --watch frame) on the JetStream API that the relays
// themselves use is too much to pay, so [Collect] counts parked and
// scheduled deliveries in all, and [Describe], for one subscriber, makes
// those two requests (only while RETRIES holds messages that are not the
// subscriber's due ones). [Describe] also filters the stream infos to the
// subscriber's subjects, reads its one entry of each bucket, and finds its
// last dead letters with at most [maxDeadReads] message reads, searching
// back from the end of the DLQ (see [reader.lastDead]).
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
