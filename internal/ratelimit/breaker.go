package ratelimit

import (
	"math"
	"time"
)

// Breaker is a subscriber's rule for opening its circuit
// (docs/delivery-rules.md "Circuit breaker"): by the share of failures
// over a sliding window once the window holds enough requests, by a run of
// failures in a row while it does not. Zero fields take the defaults
// below; relay sub add stores them (package subscribers).
type Breaker struct {
	// FailureRate opens the circuit when at least this share of the
	// requests of the window failed.
	FailureRate float64
	// MinRequests is how many requests the window must hold for the share
	// to count; a subscriber that gets fewer a window is thin (see
	// [window.thin]).
	MinRequests int
	// Window is the span the share is counted over.
	Window time.Duration
	// Consecutive is how many failures in a row open the circuit of a
	// thin subscriber; BusyRun times as many open it at any traffic, since
	// the share alone would wait for the successes before an outage to be
	// outnumbered (ten seconds of them, at the default window).
	Consecutive int
}

// The breaker's defaults, measured (TestBreakerRuleByMeasure): a receiver
// failing 20 % of requests at random opened it in none of 20,000 starts
// and no hour at 1,000 requests a second, where a MinRequests of 20 opened
// it in 3 starts of 1,000 (a fresh window's first requests are where a
// random run comes nearest the share), and 30 in 1 of 4,000; one failing
// 60 % opens it within about MinRequests requests; one failing all opens
// it at its Consecutive-th failure when thin, its BusyRun × Consecutive-th
// when busy.
const (
	DefaultFailureRate = 0.5
	DefaultMinRequests = 50
	DefaultWindow      = 10 * time.Second
	DefaultConsecutive = 5
)

// BusyRun times a breaker's Consecutive failures in a row open the circuit
// of a busy subscriber: 20 at the default, which a receiver failing 20 %
// at random runs into once in 10^14 requests, 40 % once in 10^8.
const BusyRun = 4

// WindowBuckets is how many time buckets a window is counted in: an
// outcome adds to the newest, and the oldest drops off whole as time
// passes, so that the window costs the same whatever the traffic, and
// slides by a tenth of its span.
const WindowBuckets = 10

// Degrading (docs/delivery-rules.md "Degrade before stopping"): while the
// window's share of failures is at least DegradeFrom of the breaker's
// FailureRate (with the window's MinRequests), the requests a relay keeps
// in flight to the subscriber halve once per bucket, down to
// DegradeFloor of its --max-in-flight (at least one); below it they rise
// by DegradeStep of --max-in-flight per bucket. A receiver failing under
// load gets less, not nothing; one failing at random at 20 % is not
// slowed. DegradeFrom is 0.8 (40 % at the default share), not lower: a
// window of 50 requests at 20 % failures holds 25 % of them one time in
// four, and 40 % one in a thousand; at half the share the chance alone
// halved the requests in flight every few seconds (measured under -race,
// where a window holds a few dozen: 85 deliveries a second, for 300 to
// a healthy receiver).
const (
	DegradeFrom  = 0.8
	DegradeFloor = 0.25
	DegradeStep  = 0.1
)

// WithDefaults fills the zero fields of b; fallback is the Consecutive a
// zero one takes (Options.FailureThreshold, or DefaultConsecutive). It is
// the one rule of the breaker's defaults: a subscriber's are filled by it
// when stored (subscribers.Subscriber.SetDefaults), and a Limit built
// without them when counted. Whether the values are in range is the
// subscriber's rule (subscribers.Subscriber.ValidateBreaker).
func (b Breaker) WithDefaults(fallback int) Breaker {
	if b.FailureRate <= 0 {
		b.FailureRate = DefaultFailureRate
	}
	if b.MinRequests <= 0 {
		b.MinRequests = DefaultMinRequests
	}
	if b.Window <= 0 {
		b.Window = DefaultWindow
	}
	if b.Consecutive <= 0 {
		b.Consecutive = fallback
	}
	return b
}

// bucketSpan is how long one bucket of a window counts.
func (b Breaker) bucketSpan() time.Duration {
	return max(time.Millisecond, b.Window/WindowBuckets)
}

// window counts one subscriber's outcomes on one relay over a breaker's
// window: a ring of WindowBuckets time buckets with running sums, so that
// adding an outcome and reading the share are O(1), and a bucket that
// leaves the window is subtracted once. It is not shared: see [Shared]
// for what each relay counts and what it stores.
type window struct {
	slots [WindowBuckets]struct{ ok, failed int }
	// head is the number of the newest bucket (time since the limiter's
	// epoch, in spans); span the span it was counted in.
	head  int64
	span  time.Duration
	begun bool
	// since is the bucket the count began in: a window younger than its
	// span is judged thin or busy by its pace so far.
	since int64
	// ok and failed are the sums over the slots; streak the failures in a
	// row, whatever their buckets.
	ok, failed, streak int
	// allowed is the share of --max-in-flight the subscriber may have in
	// flight from this relay (see DegradeFrom); 0 stands for all of it.
	allowed float64
}

// reset forgets every outcome: the circuit changed, and what came before
// says nothing of the receiver after it.
func (w *window) reset() {
	allowed := w.allowed
	*w = window{allowed: allowed}
}

// advance moves the window to bucket n, dropping the buckets that left it,
// and adjusts the share in flight once for each bucket that ended, on the
// window as it was at that bucket's end: a bucket that left the window by
// then is not judged again, so that a quiet spell after failures recovers
// the share rather than halving it on failures long past. Past a whole
// window of ended buckets the window is empty, and each further one
// recovers it (see [recovered]).
func (w *window) advance(n int64, span time.Duration, b Breaker) {
	if !w.begun || span != w.span {
		allowed := w.allowed
		*w = window{head: n, since: n, span: span, begun: true, allowed: allowed}
		return
	}
	if n <= w.head {
		return
	}
	ended := n - w.head
	for i := int64(1); i <= min(ended, WindowBuckets); i++ {
		w.degrade(b)
		s := &w.slots[(w.head+i)%WindowBuckets]
		w.ok -= s.ok
		w.failed -= s.failed
		*s = struct{ ok, failed int }{}
	}
	if ended > WindowBuckets {
		w.allowed = recovered(w.allowed, ended-WindowBuckets)
	}
	w.head = n
}

// recovered is the share in flight allowed (see [window.allowed]) after
// buckets ended with an empty window: up by DegradeStep each.
func recovered(allowed float64, buckets int64) float64 {
	if allowed == 0 || buckets <= 0 {
		return allowed
	}
	allowed += DegradeStep * float64(min(buckets, int64(math.Ceil(1/DegradeStep))))
	if allowed >= 1 {
		return 0
	}
	return allowed
}

// add counts one outcome in bucket n.
func (w *window) add(n int64, span time.Duration, b Breaker, failed bool) {
	w.advance(n, span, b)
	s := &w.slots[n%WindowBuckets]
	if failed {
		s.failed++
		w.failed++
		w.streak++
		return
	}
	s.ok++
	w.ok++
	w.streak = 0
}

// trips reports whether the outcomes counted open the circuit under b. A
// thin subscriber's run of Consecutive failures opens it only while they
// are at least FailureRate of the window too: a relay among several sees
// a share of the subscriber's requests, so one busy over the cluster may
// be thin on each relay (12 a second over three relays is 4 on each),
// where a receiver failing 20 % at random runs into 5 failures in a row
// every few minutes; a run among as many successes is chance, not a
// receiver down, which fails every request and so passes the share at
// once. BusyRun × Consecutive in a row opens it whatever the share.
func (w *window) trips(b Breaker) bool {
	n := w.ok + w.failed
	if w.thin(b) {
		return w.streak >= BusyRun*b.Consecutive ||
			(w.streak >= b.Consecutive && float64(w.failed) >= b.FailureRate*float64(n))
	}
	return w.streak >= BusyRun*b.Consecutive || (n >= b.MinRequests && float64(w.failed) >= b.FailureRate*float64(n))
}

// thin reports whether the subscriber's traffic is too thin for a share:
// fewer than b.MinRequests requests a window, at the pace counted so far
// when the window is younger than its span. A young window is not thin
// for holding few requests yet: at a thousand a second its first dozen
// come within milliseconds, and a run of Consecutive among them is chance
// (one start in two hundred, at 20 % failures), not a receiver down.
func (w *window) thin(b Breaker) bool {
	n := w.ok + w.failed
	if n >= b.MinRequests {
		return false
	}
	counted := min(w.head-w.since+1, WindowBuckets)
	return int64(n)*WindowBuckets < int64(b.MinRequests)*counted
}

// degrade is the AIMD of the share in flight after a bucket ended: halved
// when the window's failures reach DegradeFrom of the breaker's share,
// else raised by DegradeStep.
func (w *window) degrade(b Breaker) {
	allowed := w.allowed
	if allowed == 0 {
		allowed = 1
	}
	n := w.ok + w.failed
	if n >= b.MinRequests && float64(w.failed) >= DegradeFrom*b.FailureRate*float64(n) {
		allowed = math.Max(DegradeFloor, allowed/2)
	} else {
		allowed = math.Min(1, allowed+DegradeStep)
	}
	if allowed >= 1 {
		allowed = 0
	}
	w.allowed = allowed
}

// inFlight is how many requests of most the window allows in flight.
func (w *window) inFlight(most int) int { return inFlightOf(w.allowed, most) }

// inFlightOf is how many requests of most a share in flight allows (see
// [window.allowed]).
func inFlightOf(allowed float64, most int) int {
	if allowed == 0 || most <= 1 {
		return most
	}
	return max(1, int(math.Ceil(allowed*float64(most))))
}
