// Package lanes owns docs/delivery-rules.md "Isolation" and docs/streams.md "DELIVERIES": the
// durable pull consumers on DELIVERIES and the per-subscriber scheduling
// inside each of them.
//
// A lane is one durable pull consumer, lane_<lane>, filtered on
// deliveries.<lane>.>. Many subscribers share a lane (sNN, by FNV-1a of the
// id) and a few big ones get a dedicated lane (d_<id>). Consumers are kept few
// and fixed because every ack on a work-queue stream scans all its consumers.
// A lane pulls with short pull requests on one inbox of its own (package
// consumer), so it is never left without a pull request for long, whatever
// became of the last one, and nothing the server sends it goes unread.
//
// Inside a lane, every subscriber has its own scheduler: a queue of held messages, at most
// max-in-flight requests at once (fewer while its failures degrade it: the
// limiter's InFlight, ratelimit.DegradeFrom; its deliveries stay Held
// meanwhile, no state of their own, and its hold in the lane follows the
// lowered figure), a request slot of the relay's
// --max-requests shared round-robin among subscribers (package requests;
// while they are all taken, the scheduler waits its turn in the gate with
// no goroutine of its own, and its loop starts again with the slot; its
// deliveries stay Held), and
// a decision of the rate limiter (a token, or a pause or an open breaker to
// wait out) before each request. The lane's pull loop never waits on a
// subscriber, nor on the server: what a message needs written (a move to
// overflow, a park, a dead letter) is queued or handed to a goroutine, and
// each kind of write has a JetStream context and a bounded window of its
// own (writes.go; its windows in tuning.go), so a server slow to answer costs each its own window.
//
// The lane's MaxAckPending is a pool its busy subscribers share: each may
// hold a few seconds of its own work (an unlimited one alone on its lane,
// its whole share), at most its share (the pool less a reserve, split
// between the busy ones), so a subscriber alone on its lane takes a burst
// whole and shares shrink as lane-mates get busy. What a
// subscriber cannot hold, and everything of a subscriber that is paused, has
// its circuit open or is disabled, waits in its overflow (package overflow)
// and comes back in order when its queue runs low: one write out, one back,
// whatever the wait. So a slow, throttled, paused or broken subscriber never
// delays its lane-mates, and waiting costs no slot.
//
// Held and in-flight messages are kept alive with InProgress every quarter
// of the ack wait. A message's time in the relay counts from when the
// client read it off the connection, not from when its lane got to it; a
// message whose ack wait was not renewed within most of it (it waited in
// the client, or the server could not confirm a keep-alive through an
// outage) is let go unsent, since JetStream may have given it to another
// relay. A keep-alive never follows a
// message's ack, hand-back or term (see consumer.KeepAlive). A lane that
// holds deliveries and stands still with nothing to wait for is reported
// (stall.go). On shutdown a lane stops pulling,
// hands back what the last pull brings and what it holds, and lets its
// requests finish: nothing waits out its ack wait.
//
// Holding a message is never an attempt: only a started HTTP request is, and
// the count rides on the copy parked for a retry (Relay-Attempt). A local
// failure (no descriptor, no port) is not one either. A delivery whose
// subscriber is not in the relay_subscribers bucket is dead-lettered as
// unroutable; one whose key is there but unusable to this relay waits in
// its overflow.
//
// # One delivery's way
//
// A delivery's states are the type State, and state.go holds every
// transition: it alone acks, hands back, terminates or lets go of a message
// (a move to overflow is made by the putter of writes.go, which ends it
// through state.go). Each transition, the write it makes, and who acts
// next:
//
//	from             to          write                      who acts next
//	Pulled           Held        none                       its subscriber's scheduler
//	Held             InFlight    none                       its request's outcome
//	InFlight         Delivered   ack                        nobody
//	InFlight         Parked      copy to RETRIES, then ack  the retry mover, at the retry's time
//	Pulled           Scheduled   copy to RETRIES, then ack  the retry mover, at its due time
//	Pulled, Held     InOverflow  copy to overflow, then ack its scheduler's refill
//	any              Dead        copy to the DLQ, then term an operator (relay dlq replay)
//	Pulled, Held     Removed     term                       nobody (its subscriber was removed)
//	any              HandedBack  nak, with a delay or none  JetStream, to the next pull
//	any              LetGo       none                       JetStream, once its ack wait ends
//
// A Parked, Scheduled or InOverflow copy comes back to its lane as a new
// message: Pulled again. A write that fails hands the original back
// rather than lose it; every copy is stored under an id of its own (package
// streams), so that a copy stored after all is not stored twice.
//
// A delivery's way from the pull to its ack reads in this order, each file
// once:
//
//   - lane.go: the pull loop and dispatch (Pulled to Held, Scheduled,
//     InOverflow or Dead), the keep-alive rounds;
//   - scheduler.go: offer and the subscriber's loop (Held to InFlight),
//     with queue.go (the held deliveries), share.go (how many it may hold),
//     pause.go (Retry-After, open circuits, operators' pauses, and their
//     end by a write: relay sub resume, another relay's probe) and
//     refill.go (to and from overflow);
//   - send.go: the attempt, and its record for relay trace (package
//     attempts: queued, never waited for); outcome.go: what its outcome
//     settles;
//   - state.go: the transition, and its write;
//   - writes.go: the windows those writes wait in; tuning.go: every
//     constant of the path.
package lanes
