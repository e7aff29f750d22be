// Package streams owns the JetStream layout of docs/streams.md: the EVENTS,
// DELIVERIES and DLQ streams, the RETRIES stream where deliveries wait for a
// retry, the KV buckets, and the embedded nats-server that `relay run` starts
// when no cluster is given.
//
// The stream definitions live beside this file as JSON in the format of
// `nats stream add --config` (durations in nanoseconds). They are embedded in
// the binary and are the very definitions [Ensure] creates or updates, so an
// operator who provisions streams by hand and a relay that provisions them at
// start can never disagree.
package streams
