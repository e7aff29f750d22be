// Package ratelimit owns DESIGN.md's flow-control rules for one subscriber,
// shared by every relay on a cluster: the rate cap, the subscriber-wide
// pause on Retry-After, the adaptive rate, and the circuit breaker.
//
// # The cap
//
// In any interval of length T, at most burst + rate × T requests go to one
// subscriber, summed over all relays, plus at most one lease. The token
// bucket lives in the KV bucket relay_ratelimit, key = subscriber id,
// changed only by compare-and-set on the entry's revision. Refill is lazy:
// the tokens stored are those left at the entry's write time, and whoever
// reads it next adds rate × (now − that time), where both times are the
// server's: the entry's own timestamp, and the server time a relay estimates
// as its clock plus the largest (entry time − local time) it has seen. That
// estimate is never ahead of the server, so a skewed host clock can only
// make a relay grant fewer tokens, never more. A relay that finds too few
// tokens writes nothing: the entry's timestamp then keeps its meaning, and
// the bucket keeps filling.
//
// # Leases
//
// One compare-and-set per request would cap a subscriber at a few thousand
// requests a second and make relays contend, so a relay takes tokens in
// leases: what the subscriber may spend in about 100 ms (LeaseSize: at least
// one, never more than the bucket holds), spent locally within
// LeaseTTL and then forgotten. A relay asks for a lease only when the bucket
// holds a whole one, so with a backlog it writes once per lease. Tokens
// taken at t are spent by t + LeaseTTL, which is where the "one lease" of
// slack in the cap comes from; a relay killed with a lease in hand simply
// loses it.
//
// # Pause, adaptive rate, breaker
//
// The same entry holds the subscriber-wide pause (a Retry-After: the later
// of two pauses wins), the adaptive rate (halved on a 429 without a usable
// Retry-After, raised additively after each window of successes, never
// above the configured rate) and the circuit breaker (opened after
// consecutive failures, for a cool-down that grows while they continue,
// then one probe). Every relay re-reads the entry at least once a lease,
// so it learns of a pause or an open circuit within about 100 ms.
//
// The lanes ask a [Limiter] before every request and tell it every outcome;
// the limiter never calls back into the lanes.
package ratelimit
