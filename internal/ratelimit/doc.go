// Package ratelimit owns DESIGN.md's rate rule: in any interval of length T,
// at most burst + rate × T requests go to one subscriber.
//
// The lanes ask a [Limiter] before every request; the limiter never calls
// back into the lanes. [Local] keeps one token bucket per subscriber in
// process memory, which holds the cap for a single relay. The bucket shared
// by every relay through the relay_ratelimit KV bucket replaces it behind the
// same interface.
package ratelimit
