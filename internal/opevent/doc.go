// Package opevent is relay's operational events: what relay does to a
// subscriber (disables it, holds it for a Retry-After, opens or closes its
// circuit, dead-letters its deliveries), published into EVENTS under the
// reserved type prefix "relay." and delivered like any other event, to the
// subscribers whose --events names a "relay." type (and to `nats sub
// 'events.relay.>'`).
//
// Each happening is one event whichever relay saw it: the relay whose
// compare-and-set made the change publishes it, with a Nats-Msg-Id derived
// from the change itself (the subscriber, the kind, the revision or time
// it set), so that a second relay that reports it too is dropped by
// EVENTS' duplicate window. Dead letters are counted, not announced one by
// one: at most one relay.delivery.dead a subscriber, reason and minute.
//
// Publishing never holds the caller: events wait in a bounded queue that
// one goroutine ([Publisher.Run]) empties with PubAcks, retrying while
// JetStream refuses them (a full stream), and dropping (logged) what no
// longer fits. Dead letters of operational events are not counted: a
// subscriber failing them would otherwise feed itself one event per
// failure; a change of a subscriber's state is one event whatever delivery
// made it.
package opevent
