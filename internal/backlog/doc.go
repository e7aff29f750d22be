// Package backlog owns docs/delivery-rules.md "A bound per subscriber": no
// subscriber's waiting deliveries may take the room every other
// subscriber's fan-out needs.
//
// A [Gauge] answers, for each copy the fan-out is about to queue, whether it
// goes on ([Queue]) or is dead-lettered at once with reason backlog
// ([Shed]). A copy is shed when
//
//   - its subscriber already has its --max-backlog deliveries waiting (on its
//     lane, in its overflow, parked or scheduled in RETRIES) and does not
//     keep up: the bound is for a subscriber that cannot take its traffic
//     (paused, down, slower than its events), never one whose deliveries
//     outpace its events. One keeps up when it is not paused nor disabled
//     and [DrainReads] reads of the streams in a row each found its
//     waiting deliveries fallen since the read before by more than the
//     copies this relay shed for it meanwhile: over every relay, more left
//     (delivered or dead-lettered) than were queued, and more than were
//     shed, so that a count falling only because its copies are shed is
//     not keeping up. Such a subscriber is queued past its bound up to its
//     bound plus what left it over the last interval, no further: a
//     backlog stays within an interval's drain of its bound (of each
//     relay's, with several). A read that fails, or that does not count
//     RETRIES, ends the judgement. It costs no more per copy than a map
//     lookup and a count, the judgement being made once a read; or
//   - DELIVERIES is fuller than [ShareFrom] of its max_bytes and the
//     subscriber has a held backlog (deliveries in its overflow) and more
//     waiting than its fair share: [ShareFrom] of the stream's room, in
//     messages of its average size, divided among the subscribers that have
//     deliveries waiting or were queued copies lately (the asker counted
//     too). A subscriber that keeps up is never shed for its share.
//
// When DELIVERIES is [EvictFrom] full all the same (a burst faster than a
// refresh, an operator who shrank it), [Gauge.Evict] dead-letters the oldest
// of a paused or disabled subscriber's held backlog, down to its share.
//
// Shedding keeps one subscriber's outage from filling DELIVERIES, whose
// discard-new bound would then stop the fan-out for everyone; the shed copy
// keeps its body in the DLQ and `relay dlq replay` queues it again.
//
// The cost per copy is a map lookup: the gauge reads the streams' state once
// a [RefreshEvery] (one stream info each, and the per-subject counts only
// when the deliveries waiting, with what this relay queued since, could
// reach the smallest bound, or DELIVERIES is half full; a copy that may
// reach a bound the last read did not count asks for a read at once), and
// adds what this relay queued that no read can have seen: each copy from
// its queueing until its PubAck is back ([Gauge.Settled]), then until the
// next read begins, less the share a subscriber taking deliveries was seen
// to drain between two reads (see [Gauge.drained]: one that keeps up is not
// counted behind by what it was delivered since the last read). One relay
// thus keeps the bound of a subscriber that takes nothing, however many
// PubAcks are outstanding (but for the copies of events fanned out again,
// see [Gauge.Count]); one that stops taking deliveries may pass it by a
// refresh's copies, until a read shows it; several relays each add their
// own copies until the next read shows the others', so the bound is kept to
// within what the others queue in one refresh.
package backlog
