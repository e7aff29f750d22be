// Package timeliness counts, per subscriber, how many deliveries were
// accepted within their business deadline (Relay-Deadline) and how many
// were dead-lettered because it had passed or a retry would land after it
// (reasons deadline and expired), so that `relay status` can say how much
// of a subscriber's traffic arrived in time, not only how much arrived.
//
// # Shared counts
//
// The counts live in the KV bucket relay_timeliness, key = subscriber id,
// value = JSON {"met":N,"missed":M}, summed over every relay of a cluster:
// an operator sees the same figures whichever relay handled the traffic,
// and whether any relay is running. Each relay adds its own increments to
// the stored value by compare-and-set on the entry's revision, so that
// relays writing at once never overwrite each other's counts.
//
// # Cost
//
// A delivery is counted in memory only: [Recorder.Met] and
// [Recorder.Missed] add to an atomic counter of the subscriber, without a
// lock, a write or (after the subscriber's first count) an allocation, so
// counting costs nothing measurable next to the HTTP request it follows.
// [Recorder.Run] writes what was counted every interval (5 s by default):
// a get and a compare-and-set per subscriber whose counts changed, whatever
// the number of deliveries, and nothing for the others. Between two
// flushes the bucket lags by at most an interval per relay, which is what a
// ratio over hours of traffic can afford.
//
// # Exactness
//
// Counts a flush could not write (NATS away, a race lost too often) are
// kept and added to the next flush, so none is lost while the relay runs;
// a lost race reads the entry again and adds to the new value, so none is
// counted twice. A write whose reply never came (a timeout, the relay
// stopping) may have been stored all the same: the relay sends the same
// compare-and-set again, and when that one is refused as a lost race it
// reads the entry, whose value names the write that made it, to tell
// whether the race was lost to its own first write. Only when neither
// answers are the counts kept for the next flush, and may then be counted
// twice: at least once, as relay delivers at least once.
// Counts not yet written when a relay dies are lost with it: an interval's
// worth at most, and only from the figures, never a delivery.
package timeliness
