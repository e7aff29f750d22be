// Package status computes what `relay status` reports for each subscriber
// (docs/cli.md "relay status"): its queue in DELIVERIES (on its lane and in its
// overflow), its parked retries in RETRIES, its dead letters in DLQ by
// reason, its lane consumer's outstanding messages, and its shared
// flow-control state in the relay_ratelimit bucket (tokens, pause, adaptive
// rate, breaker), with a summary over all of them; and, for one subscriber,
// its last dead letters. All of it is read from NATS, so that an operator
// sees the same numbers whichever relay instance is running and whether any
// is running at all.
//
// # Cost
//
// The report must stay cheap on a cluster with thousands of subscribers and
// long backlogs, so every count comes from the server's subject index, no
// answer lists one subject per message, and nothing creates a consumer or
// writes. [Collect], whatever the number of subscribers, makes:
//
//   - four stream lookups (DELIVERIES, RETRIES, DLQ, the bucket's stream);
//     RETRIES' message count comes with its lookup, for [Summary.Parked];
//   - DELIVERIES: one stream info filtered on deliveries.>, whose subjects
//     are deliveries.<lane>.<subscriber> and deliveries.overflow.<subscriber>,
//     a count per subscriber and lane, which the client adds up; the server
//     sends up to 100,000 subjects an answer;
//   - DLQ: the same on dlq.<subscriber>.<reason>, a count per subscriber and
//     reason;
//   - relay_ratelimit: batched direct gets of the bucket's stream, which
//     holds one message a key, 1,000 entries a request;
//   - one consumer info per lane in use, and one get by subject per
//     subscriber with a queue (its oldest message), [readers] at a time.
//
// A parked delivery waits on retries.wait.<subscriber>.<id>, a subject of
// its own (a JetStream message schedule is keyed by its subject), so a
// subject list of RETRIES grows with the backlog, and the server keeps no
// count per subscriber: the only exact count it gives is one request per
// subscriber, a stream info filtered on retries.wait.<subscriber>.* with
// an offset past the end, whose answer carries how many subjects match and
// none of them. 10,000 such requests per report (and per --watch frame) on
// the JetStream API that the relays themselves use is too much to pay, so
// [Collect] counts parked deliveries in all, and [Describe], for one
// subscriber, makes that one request. [Describe] also filters the stream
// infos to the subscriber's subjects, and finds its last dead letters with
// at most [maxDeadReads] message reads, searching back from the end of the
// DLQ (see [reader.lastDead]).
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
