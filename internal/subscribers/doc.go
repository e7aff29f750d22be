// Package subscribers owns the subscriber rules of DESIGN.md: what a
// subscriber is (its id, URL, secrets, event filters, rate, retry and
// in-flight settings, headers), which values `relay sub add` accepts and the
// one-line message it prints for each it refuses, how an event type is
// matched against a subscriber's filters, which lane a subscriber is
// assigned to (shared lane sNN by FNV-1a of its id, or a dedicated lane
// d_<id>, of which there are at most [MaxDedicated]), and how subscribers are
// kept in the relay_subscribers KV bucket.
//
// The package holds configuration and never runs work: it sends no request,
// reads no event and takes no token. The CLI writes through a [Store]; the
// fan-out and the lanes read a [Live] view, which a KV watch keeps current so
// that a running relay picks up `relay sub` changes within a second, without
// a restart, and reads it without taking a lock on every message.
//
// Values in the bucket are JSON documents, one per subscriber, keyed by the
// subscriber id. Durations are Go duration strings ("10s") so that an
// operator reading the bucket with `nats kv get` understands them. Secrets are
// stored in full, because the relay must sign with them; [Subscriber.Redacted]
// is the form to print.
package subscribers
