// Package deliver makes one signed webhook attempt and says what happened.
//
// It owns three rules of docs/delivery-rules.md and nothing else; it knows nothing of
// JetStream, lanes, rates or retries. The caller hands it a [Request] and gets
// back an [Outcome], and decides on its own what to do next.
//
// # What a subscriber receives
//
// [Client.Send] POSTs the body exactly as given, with the Standard Webhooks
// headers webhook-id, webhook-timestamp (unix seconds of this attempt, taken
// from the client's clock) and webhook-signature, a content-type, a user-agent
// and then the subscriber's own headers. The subscriber's headers can add to
// the request but never replace a webhook-* header or the content-type, so a
// misconfigured subscriber cannot make a delivery lie about its identity.
//
// Signing follows the Standard Webhooks specification: the signed content is
// id + "." + timestamp + "." + body, the key is the base64-decoded part of a
// "whsec_" secret ([ParseSecret]), and during a secret rotation one signature
// per key is sent, space-separated ([Signatures]). [Verify] is the receiving
// side of the same rule, used by `relay listen` and by tests.
//
// # Delivery rules: classes of outcome
//
// Every attempt ends in one [Class]:
//
//   - [Delivered]: a 2xx status.
//   - [Retryable]: 408, 425, 429, any 5xx, a timeout, a connection failure or
//     a reply that is not valid HTTP. For 429 and 503 the Retry-After header is
//     parsed into [Outcome.RetryAfter], which the caller turns into a pause of
//     the whole subscriber.
//   - [Gone]: 410. The caller dead-letters the message and disables the
//     subscriber.
//   - [Rejected]: any other status, including 3xx because redirects are never
//     followed (a redirect could point anywhere, including inside the
//     network), and a request that cannot be built at all.
//   - [Refused]: the SSRF guard refused the address that was about to be
//     dialled.
//   - [Local]: the attempt failed on the relay's own side, so the delivery rules do
//     not count it as an attempt nor as a breaker failure: the dial found no
//     file descriptor (EMFILE, ENFILE), socket buffer (ENOBUFS), memory
//     (ENOMEM) or local port (EADDRNOTAVAIL), or the caller's context was
//     cancelled before a reply, as when the relay stops. The attempt's own
//     timeout, or a deadline on the caller's context, is not local: it is
//     the subscriber being slow, and stays [Retryable].
//
// # Delivery rules: the SSRF guard
//
// A subscriber URL is user input, and a relay usually runs inside a network
// with things worth protecting. The default client checks every address in a
// [net.Dialer] Control hook, that is after DNS resolution and on the address
// actually dialled, so a name that resolves to a public address at `sub add`
// time and to 127.0.0.1 later (DNS rebinding) is still refused. [CheckAddr]
// is the rule; [WithAllowPrivate] lifts it for local testing.
package deliver
