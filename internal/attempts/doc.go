// Package attempts keeps the record of what became of each event, for
// `relay trace EVENT_ID` and `relay status --subscriber`: one record of its
// fan-out (which subscribers it matched, where each copy went, which a
// content filter skipped; none for a fan-out to one subscriber's lane,
// which its attempts tell) and one of each attempt to deliver it (when, from
// which relay, the answer or error, how long it took, and what it settled:
// delivered, a retry at a time, a dead letter with its DLQ sequence), and one
// of each death that came without an attempt (expired, backlog, unroutable…).
//
// The records are small JSON messages in the stream ATTEMPTS, on subjects
// derived from the event id (streams.EventKey), so that a trace reads only
// its own event's records, and a subscriber's failures on a subject of
// their own. ATTEMPTS is a ring bounded by age (72 h, relay run
// --attempts-max-age) and bytes, the oldest going first: it is a view of the
// recent past, not a ledger. The ledger stays DELIVERIES, RETRIES and the
// DLQ, and nothing the delivery path does waits on a record: a [Recorder]
// queues each one and a goroutine of its own publishes it, asking for the
// server's PubAck on one record in 256 (on every one while they are
// refused), and dropping (and counting) what it cannot write as fast as it
// is made.
package attempts
