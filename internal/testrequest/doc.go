// Package testrequest is `relay sub test`: one request sent now to one
// subscriber, built as a delivery is and made by a running relay, whose
// reply is shown to the person who asked.
//
// The command does not send the request itself. A delivery is made by a
// relay, under that relay's --allow-private-targets, --proxy and SSRF guard,
// from the network that relay sits in; a request sent from an operator's
// laptop would test another path and could pass where deliveries fail. So
// the command asks a relay over core NATS ([Subject], a request and its
// reply, no stream), and exactly one running relay answers ([Queue]): it
// reads the subscriber from its live view, builds the request with
// [subscribers.Subscriber.Request], the builder of every delivery (the
// signatures of its keys, its headers, its OAuth2 bearer, its TLS setting,
// its timeout), sends it with the relay's own [deliver.Client] under a
// webhook-id of its own ([NewWebhookID]) and answers with what came back
// ([Answer]).
//
// A test request is not a delivery and leaves nothing behind: nothing is
// written to DELIVERIES, RETRIES, the DLQ or relay_ratelimit, no delivery
// metric counts it, and the subscriber's rate, pause and circuit neither
// hold it nor learn from it. A disabled or paused subscriber can be tested.
package testrequest
