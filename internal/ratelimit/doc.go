// Package ratelimit owns the flow-control rules of docs/delivery-rules.md for one subscriber,
// shared by every relay on a cluster: the rate cap, the subscriber-wide
// pause on Retry-After, the adaptive rate, and the circuit breaker.
//
// # The cap
//
// In any interval of length T, at most burst + rate × T requests go to one
// subscriber, summed over all relays, plus at most one lease. The token
// bucket lives in the KV bucket relay_ratelimit, key = subscriber id,
// changed only by compare-and-set on the entry's revision. Refill is lazy:
// the entry holds the tokens left and the server time they were counted up
// to, and whoever reads it next adds rate × (now − then). "Now" is the
// server's time as the relay estimates it: its own clock plus an offset read
// from the server every 30 s (a stream info's timestamp, a lower bound) and
// tightened by every entry's timestamp it sees. The count-up-to time only
// moves forward, so no stretch of time is ever counted twice: a relay whose
// clock runs ahead can count some time early, once, but cannot mint tokens
// write after write. A relay that finds too few tokens writes nothing, and
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
// counted up to t are spent from t to t + LeaseTTL, which is where the
// "one lease" of slack in the cap comes from; a relay killed with a lease
// in hand simply loses it. The next refill starts at t, so the round trip
// of a compare-and-set costs no refill while it is shorter than a lease
// (TestSharedKeepsTheRateOverASlowServer: the whole rate at a 60 ms round
// trip). A lease that comes later than that is spent from its arrival, and
// the relay gives up the refill of its round trip: it then takes a lease
// per round trip, and spending late never widens the slack
// (TestSharedCapHoldsBesideASlowRelay, a relay at 240 ms beside one at
// 1 ms). Waiting for a turn among the relay's KV requests (at most 64 on
// their way) comes before the count, not inside the round trip.
//
// # Pause, adaptive rate, breaker
//
// The same entry holds the subscriber-wide pause (a Retry-After: the later
// of two pauses wins; its end counted from the latest the server's clock can
// read, the estimate's upper bound, so that a relay whose estimate is
// closer than the storing relay's does not end it early), the adaptive rate and the circuit breaker (opened
// by the share of failures over a window, or a run of them, that each
// relay counts in memory (see [Breaker] and [Shared.Observe]), for a
// cool-down that grows while they continue, then one probe). A relay learns of a pause or an open circuit
// another relay stored from its watch (see [Shared.Follow]), and whatever
// the watch's delay, a rate-limited subscriber's requests stop on every
// relay within a lease of the store: a lease taken before it ends within
// LeaseTTL of when it was asked for, and the next lease's compare-and-set
// fails on the entry the pause changed, which makes the relay read it. A
// lease answered after its window is the exception: it is not spent
// before the watch has shown its own write, so the pause written after it
// stops it within the watch's delay (see grant). An unlimited subscriber
// asks the bucket nothing: its lease is renewed on the watch only while a
// check of the bucket's stream (one a relay every LeaseTTL at most) proves
// the watch has every entry stored until FreshFor ago, and on a read of its
// entry otherwise, so a pause holds it within FreshFor and a lease (see
// [Shared.stale]).
//
// The adaptive rate is AIMD. Every 429, with or without a Retry-After,
// halves the rate in force, down to 1/64 of the configured rate; a pause
// does not replace the decrease, since the same rate would overshoot again
// once the pause ended. At most one decrease happens per lease window
// (DecreaseWindow) per subscriber, summed over all relays: the entry
// records the server time of the last decrease, and a 429 within a window
// of it, on any relay, lowers the rate no further, because it answers a
// request sent at the rate before the decrease. Such a 429, when it brings
// no pause and the relay has already seen the decrease, costs no KV
// operation. After each window of successes (as many as the rate in force
// allows in a second) the rate rises by a tenth of the configured one,
// never above it.
//
// `relay sub resume` ends a pause and closes the circuit by hand ([Reset]:
// one compare-and-set on the entry, which keeps the tokens and the adaptive
// rate). Every relay's watch sees the entry no longer block, and tells the
// lanes through [Shared.Lifted], so that they stop waiting out a cool-down
// of up to MaxCooldown; a probe's success on another relay ends their wait
// the same way.
//
// The lanes ask a [Limiter] before every request and tell it every outcome;
// the limiter never calls back into the lanes.
package ratelimit
