package lanes

import "time"

// The tuning of the delivery path, in one table: every constant that
// bounds a lane's work, a wait or a window, with what it bounds and why that
// value. The figures they were measured against are in bench/README.md;
// the rules they serve in docs/delivery-rules.md.

// Defaults of `relay run` the lanes apply when their Config leaves a field
// zero.
const (
	// defaultAckWait is --ack-wait's default: the lane consumers' ack wait,
	// which every relay of a cluster shares (see AckWaitInUse).
	defaultAckWait = 60 * time.Second
	// defaultMaxAckPending is each lane consumer's MaxAckPending: the pool
	// its busy subscribers share (see HoldLimit).
	defaultMaxAckPending = 20_000
)

// Keep-alives: JetStream counts a message as a relay's for its ack wait
// from its delivery or its last InProgress.
const (
	// keepAlivesPerAckWait is how many keep-alive rounds a lane makes per
	// ack wait: one lost, delayed or slow round still leaves time for the
	// next.
	keepAlivesPerAckWait = 4
	// aliveNum/aliveDen is the share of the ack wait within which a
	// message is still this relay's (see [lane.alive]); the rest covers
	// the server's send to this client.
	aliveNum, aliveDen = 3, 4
)

// keepAliveEvery is how often a lane renews what it holds.
func keepAliveEvery(ackWait time.Duration) time.Duration { return ackWait / keepAlivesPerAckWait }

// aliveFor is how long after its last renewal a message is still this
// relay's to send.
func aliveFor(ackWait time.Duration) time.Duration { return ackWait * aliveNum / aliveDen }

// Waits after a failure of relay's own, not of a subscriber.
const (
	// failedRetry is how long a loop whose step failed waits before trying
	// again: a lane's pull loop whose consumer failed, a lane that could
	// not start, a refill that failed. Long enough not to spin on a server
	// that is down, short enough that a blip costs a second.
	failedRetry = time.Second
	// limiterRetry is how long a subscriber waits after the rate limiter
	// failed to answer (its KV bucket unreachable) before asking again.
	limiterRetry = 100 * time.Millisecond
	// unsentDelay is the delay of a delivery handed back because its
	// request could not be made (no descriptor, no port): not an attempt,
	// taken up again a second later.
	unsentDelay = time.Second
)

const (
	// holdWindow is how much work, at its rate, a rate-limited subscriber
	// holds in its lane; at least max-in-flight messages.
	holdWindow = 2 * time.Second
	// unlimitedHoldWindow is the same for an unlimited subscriber, whose
	// pace is only estimated from its response time: long enough that a
	// burst to a fast one stays in the lane, short enough that one that
	// hangs (its response time then the timeout) holds little more than
	// its in-flight requests.
	unlimitedHoldWindow = 10 * time.Second
	// reserveDiv keeps 1/reserveDiv of a lane's MaxAckPending free of
	// shares, so a lane-mate that becomes busy always finds room.
	reserveDiv = 8
	// maxRefill is the most one refill brings back.
	maxRefill = 1024
	// expectFor is how long messages brought back count as on their way to
	// this relay's queue; another relay may have pulled them.
	expectFor = 2 * time.Second
	// parkAfter is the shortest pause or open circuit for which the held
	// messages leave the lane: shorter waits are not worth two writes.
	parkAfter = time.Second
	// keepBroughtBack is the longest pause or open circuit through which
	// messages already brought back from overflow stay held.
	keepBroughtBack = 30 * time.Second
	// assumedLatency stands for an unlimited subscriber's response time
	// until one is seen; short, so that a burst to a fast subscriber is
	// held rather than sent to overflow.
	assumedLatency = 5 * time.Millisecond
	// maxLocalStreak is how many local failures in a row one subscriber's
	// requests may have before the next counts as an attempt.
	maxLocalStreak = 10
)

const (
	// putWindow is how many overflow puts, over all lanes of the relay, may
	// wait for their PubAck at once: at a 100 ms round trip to the server,
	// ten thousand puts a second.
	putWindow = 1024
	// putQueue is how many overflow puts of one lane may wait for a place
	// in that window. A put that finds its lane's queue full hands the
	// delivery back for putFullDelay rather than wait: the server is then
	// far behind.
	putQueue = putWindow
	// putFullDelay is the delay of a delivery handed back because the
	// overflow puts are behind: short, since nothing is wrong with it.
	putFullDelay = 250 * time.Millisecond
	// putAckWait bounds the wait for an overflow put's PubAck; without one
	// the delivery is handed back and its next put deduplicated.
	putAckWait = settleRetry
	// refillWindow is how many copies refills, over all lanes, may have
	// waiting for their PubAck at once: four whole refills. A refill that
	// finds the window full leaves the rest of its batch for the next.
	refillWindow = 4 * maxRefill
	// refillAckWait bounds the wait for a refill copy's PubAck.
	refillAckWait = 10 * time.Second
	// settleWindow is how many parks and schedules (and, apart, how many dead
	// letters) may wait for their PubAck at once over all lanes; more wait
	// their turn in their own goroutine.
	settleWindow = 256
)

// pullBatch is how many messages a lane asks for at once. Every message is
// dispatched at once (held, queued for overflow or sent) and no dispatch
// waits on the server, so the client buffer never holds a message long
// enough for its ack wait to matter; its time there counts all the same
// (see [consumer.ReceivedAt]).
const pullBatch = 256

// laneCreateTimeout bounds the creation of a lane's consumer as it starts.
const laneCreateTimeout = 15 * time.Second

// handBackWait bounds the wait for the server to confirm a stopping lane's
// hand-backs.
const handBackWait = 5 * time.Second

// DefaultMaxRequests is --max-requests' default: far more requests than a
// relay's CPU can keep busy on one host, far fewer file descriptors than a
// default limit allows.
const DefaultMaxRequests = 4096

// DefaultShutdownTimeout is --shutdown-timeout's default: as long as the
// default HTTP timeout of three attempts. The process manager's grace period
// between SIGTERM and SIGKILL should exceed it by about 15 s, for the acks
// and the NATS connection to drain (docker-compose.yml gives 45 s).
const DefaultShutdownTimeout = 30 * time.Second

// sweepEvery is how often a relay looks for backlogs in overflow that no
// queue of its own knows about: those of a relay that stopped or died, or of
// a subscriber this relay could not use until now.
const sweepEvery = 2 * time.Second

// pruneEvery is the longest a scheduler, and the rate limiter's state, of
// a removed subscriber are kept past the sweep after its removal, for one
// that still held or sent then; a removal is looked for at every sweep.
const pruneEvery = time.Minute

// lookupFor is how long the bucket's answer about an id this relay's view
// lacks is kept, and how often it is read at most: a flood of deliveries
// for it costs one read a second.
const lookupFor = time.Second

// lookupSyncFor bounds the wait, in a read of an id the view lacks, for
// the view to hold every write the bucket's leader has: a read of a
// replica behind may miss the id's last write, and the view has the last
// word before a delivery is dropped or dead-lettered. Past it the delivery
// is handed back, and read again.
const lookupSyncFor = 5 * time.Second

// logEvery is how often a condition that lasts (deliveries held for a
// subscriber this relay cannot use) is logged again.
const logEvery = time.Minute

// The stall watch (stall.go).
const (
	// stallAfter is how long a lane may hold deliveries, with no request
	// in flight, no subscriber of it waiting for a token, a pause or a
	// request slot, and nothing sent, before it is reported as stalled:
	// far longer than a turn of a scheduler's loop takes on a loaded host,
	// far shorter than an ack wait.
	stallAfter = 5 * time.Second
	// stallCheckEvery is how often the watch looks at its lane.
	stallCheckEvery = time.Second
)

// settleRetry is how long a message whose outcome could not be recorded
// (NATS unavailable for the DLQ copy or the parked retry) waits before it
// is taken up again.
const settleRetry = 5 * time.Second
