// Package fanout owns the first hop of the data flow of docs/streams.md: it reads EVENTS
// through the durable pull consumer "fanout" and, for every enabled
// subscriber whose filters match the event type, publishes one copy on
// deliveries.<lane>.<subscriber> with Nats-Msg-Id <event id>.<subscriber>.
//
// The event is acknowledged only after every copy's PubAck, so a crash at any
// point leads to a redelivery whose copies JetStream deduplicates, never to a
// lost copy. PubAcks are awaited in a pipeline, not one by one, because the
// round trip, not JetStream, is what would bound the rate.
//
// fanout and lanes meet only through the DELIVERIES stream.
package fanout
