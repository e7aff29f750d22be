package subscribers

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
)

// MaxDedicated is the most subscribers that may have a dedicated lane at
// once. Each dedicated lane is its own durable consumer on the DELIVERIES
// work-queue stream, and every ack on that stream scans all of its
// consumers, while a stream takes at most 1,000 consumers and a clean server
// shutdown waits about 10 ms for each. A few
// big subscribers deserve a lane of their own; everyone else shares one.
const MaxDedicated = 32

// dedicatedPrefix starts the name of a dedicated lane, "d_<subscriber id>".
// Subscriber ids cannot contain dots, so the lane is one subject token.
const dedicatedPrefix = "d_"

// LaneFor returns the shared lane of the subscriber with the given id when
// there are shared lanes: "s" and two or more digits of the 32-bit FNV-1a
// hash of the id modulo shared, such as "s07". The same id always lands in
// the same lane for a given number of lanes, on every relay instance, which
// is what lets several relays split the lanes between them. A shared count
// below 1 is taken as 1, so the result is always a valid lane.
func LaneFor(id string, shared int) string {
	if shared < 1 {
		shared = 1
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(id)) // a hash.Hash never returns an error
	return SharedLane(int(uint64(h.Sum32()) % uint64(shared)))
}

// SharedLane is the name of shared lane i: "s" and two or more digits.
func SharedLane(i int) string { return fmt.Sprintf("s%02d", i) }

// SharedIndex returns i of shared lane i, and false for a dedicated lane
// (or a name no lane has).
func SharedIndex(lane string) (int, bool) {
	digits, ok := strings.CutPrefix(lane, "s")
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(digits)
	return i, err == nil && i >= 0
}

// DedicatedOf returns the subscriber whose dedicated lane is lane, and
// false when lane is a shared one.
func DedicatedOf(lane string) (id string, ok bool) { return strings.CutPrefix(lane, dedicatedPrefix) }

// Lane returns the lane the subscriber's deliveries go through: its own
// lane "d_<id>" when it is Dedicated, else its shared lane among shared, as
// [LaneFor] computes it. The lane is the second token of
// deliveries.<lane>.<subscriber> and names the consumer lane_<lane>.
func (s Subscriber) Lane(shared int) string {
	if s.Dedicated {
		return dedicatedPrefix + s.ID
	}
	return LaneFor(s.ID, shared)
}
