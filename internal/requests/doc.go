// Package requests owns the `relay run --max-requests N` rule of docs/delivery-rules.md: it
// bounds the requests in flight over all subscribers, shared fairly.
//
// A relay delivers to thousands of subscribers at once, and every request in
// flight holds a file descriptor, a connection and some memory. Without a
// bound over all of them, a burst spread over many subscribers would run the
// process out of descriptors, and every delivery would fail as a local
// failure at once. A [Gate] is that bound: a request is sent only with a slot
// in hand, and a caller that finds the gate full waits for one.
//
// # Fairness
//
// While the gate is full, slots are not handed out first come, first served:
// a subscriber with a deep backlog would then queue a thousand goroutines and
// take nearly every freed slot, starving a subscriber that has one message
// waiting. Waiters are grouped by key (the subscriber id), and the keys take
// turns: a freed slot goes to the oldest waiter of the key at the front of a
// FIFO of keys, and that key moves to the back if it still has waiters. A key
// with a thousand waiters therefore gets one slot per round, as does a key
// with one. Within a key, waiters are served in arrival order.
//
// A free slot is taken at once, by whoever asks: waiters exist only while no
// slot is free, because a released slot is handed straight to the next
// waiter rather than put back.
//
// # Cost
//
// Acquire and release are O(1): the FIFO of keys and each key's waiters are
// doubly linked lists, and a key is in the map only while it has waiters, so
// nothing ever scans all keys and idle subscribers cost no memory. A waiter
// of Acquire is its caller's own goroutine, blocked on a channel; one of
// [Gate.Queue] is only a func the slot is handed to, so that a caller with
// a hundred thousand keys waiting pays no goroutine for each. The gate
// starts no goroutine of its own.
//
// # Cancellation
//
// A waiter whose context ends is unlinked from its key's queue and leaves no
// trace. If a slot was handed to it at the very moment its context ended,
// the slot is passed on to the next waiter, so a cancelled waiter can neither
// lose a slot nor keep one.
package requests
