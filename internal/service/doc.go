// Package service owns how relay answers requests on core NATS (`relay sub
// test` today, the NATS service `relay` of DESIGN.md later): only on a reply
// inbox, from a connection whose user may publish to inboxes alone.
//
// A request names its own reply subject, and a service answers there with
// its connection's permissions. Answered from relay's own connection, a
// request whose reply is retries.wait.<subscriber>.x, bodies.1,
// $KV.relay_refill.<subscriber> or events.relay.x would have relay write into
// its own streams and buckets, or publish an event. Two lines hold against
// it:
//
//   - NATS: requests are served from a connection of their own, whose user
//     may subscribe to the API's subjects and publish to _INBOX.> and
//     nothing else ([streams.ServiceUser] on the embedded server;
//     docs/permissions.md gives the user for a cluster). Not
//     allow_responses: nats-server lets such a user publish once to the
//     reply subject of any message it received, whatever that subject is.
//   - relay: every handler takes a request through [CheckReply] before it
//     does anything, and answers through [Respond], which checks again: a
//     request without a reply, or whose reply is not under _INBOX. (an
//     allowlist), is neither made nor answered. On a cluster whose
//     operator gave relay no service user this line is the only one, and
//     only relay sub test is answered: the NATS service relay, whose
//     $SRV discovery answers nats.go's micro package sends unchecked, is
//     not registered at all.
package service
