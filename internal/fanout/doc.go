// Package fanout owns the first hop of the data flow of docs/streams.md: it reads EVENTS
// through the durable pull consumer "fanout" and, for every enabled
// subscriber whose filters match the event type, publishes one copy on
// deliveries.<lane>.<subscriber> with Nats-Msg-Id <event id>.<subscriber>.
//
// The event is acknowledged only after every copy's PubAck, so a crash at any
// point leads to a redelivery whose copies JetStream deduplicates, never to a
// lost copy. PubAcks are awaited in a pipeline, not one by one, because the
// round trip, not JetStream, is what would bound the rate; each event is
// acked as soon as its own copies are stored, whatever the events before
// it wait for. Until then the fan-out holds the event and renews it, so
// that it is never redelivered to another relay while this one still works
// on it (see shedMemory).
//
// fanout and lanes meet only through the DELIVERIES stream.
package fanout
