package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The stages of relay_delivery_stage_seconds, in the order a delivery
// passes them.
const (
	// StageFanout: from the event's storage in EVENTS to its copy's in
	// DELIVERIES (the fan-out's wait for the event, its copying and the
	// copy's store; both ends are the servers' clocks).
	StageFanout = "fanout"
	// StagePickup: from the copy's storage to its arrival at this relay's
	// lane (the server's clock to the relay's).
	StagePickup = "pickup"
	// StageQueue: from its arrival to the start of its request: its turn
	// in the subscriber's queue, a token of its rate, a request slot.
	StageQueue = "queue"
	// StageRequest: the HTTP request, from its start to the answer.
	StageRequest = "request"
)

// stageNames lists the stages in their order, as [Stages] measures them.
var stageNames = [...]string{StageFanout, StagePickup, StageQueue, StageRequest}

// stageBuckets are the histogram's bounds, a 1-2-5 series from 100 µs to a
// minute: a delivery on an idle machine takes a few milliseconds end to
// end, so the bounds below 10 ms are what tells its stages apart.
var stageBuckets = []float64{
	0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05,
	0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60,
}

// Stages are the moments of one delivery's way from EVENTS to its
// subscriber's answer, for [Metrics.Stages].
type Stages struct {
	// Published is when the event was stored in EVENTS (the copy's
	// Relay-Published-At).
	Published time.Time
	// Copied is when the copy was stored in DELIVERIES (its JetStream
	// timestamp).
	Copied time.Time
	// Received is when this relay's lane got the copy.
	Received time.Time
	// Sent is when its request started.
	Sent time.Time
	// Answered is when the answer came.
	Answered time.Time
}

// newStageHistogram is relay_delivery_stage_seconds.
func newStageHistogram() *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "relay_delivery_stage_seconds",
		Help:    "Where the time of a delivery accepted at its first attempt went, by stage: fanout (EVENTS to DELIVERIES), pickup (DELIVERIES to this relay), queue (waiting for its turn, a token, a request slot), request (the HTTP request). Retries, replays, redeliveries and deliveries brought back from overflow are not counted. The first two stages start at a server's clock: across machines they include the clocks' offset.",
		Buckets: stageBuckets,
	}, []string{"stage"})
}

// Stages records where the time of one delivery went, for a delivery
// accepted at its first attempt, straight from the fan-out: the stages of a
// retry, a replay, a redelivery or a copy brought back from overflow would
// measure waits that the retry schedule, an operator, a hand-back or a
// backlog chose. A stage whose
// ends are not both known is not recorded; one that comes out negative,
// across two clocks, is recorded as zero.
func (m *Metrics) Stages(s Stages) {
	if m == nil {
		return
	}
	at := [...]time.Time{s.Published, s.Copied, s.Received, s.Sent, s.Answered}
	for i := range m.stages {
		if at[i].IsZero() || at[i+1].IsZero() {
			continue
		}
		m.stages[i].Observe(max(0, at[i+1].Sub(at[i]).Seconds()))
	}
}
