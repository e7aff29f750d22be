// Package subscribers owns the subscriber rules of docs/cli.md (relay sub): what a
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
// stored whole, because the relay must sign with them: sealed with the
// store's keyring when it has one ([WithKeys], package secrets; see seal.go),
// in the clear otherwise. [Subscriber.Redacted] is the form to print, with
// every key masked by [MaskKey], and [RedactURL] the form of a URL to print.
//
// # Rotation and pause
//
// [Store.RotateSecret] makes a new secret the active one and keeps the old
// one as a [PreviousSecret] until the end of its grace: [Subscriber.Keys]
// signs with both until then, and with the new one alone from then on,
// whatever the bucket still holds. The bucket keeps one value a key, so that
// an old value does not keep a retired secret readable, and every relay runs
// [Store.RunJanitor], which rewrites a subscriber whose grace has ended
// without its retired secrets, and one whose timed pause has passed without
// the pause. [Store.Pause] and [Store.Resume] are an operator's pause: the
// subscriber still gets new copies, and the lanes hold everything of it
// while [Subscriber.PausedAt] says so. Every change of a stored subscriber
// ([Store.Update] and the commands above) is a compare-and-set on the
// revision read.
package subscribers
