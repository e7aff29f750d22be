package metrics

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/relay-dev/relay/internal/deadletter"
)

// subscriber holds the series of one subscriber, bound to its id once, so
// that recording for it costs a map lookup and an atomic add, never a hash
// of label values.
type subscriber struct {
	id string
	// Created when first used, so that a subscriber has only the series it
	// has something to count in.
	copies, delivered, retried, dead, wait, met lazyCounter
	// deadline is created at 0 with the subscriber: an alert on its
	// increase must see the first missed deadline, which it would not if the
	// series were born at 1.
	deadline prometheus.Counter
	// hist is its own histograms while it is among the top subscribers,
	// else the shared subscriber="_other" ones.
	hist atomic.Pointer[histograms]
	// traffic counts its attempts since the last ranking.
	traffic atomic.Int64
	// top: hist is its own; guarded by subscriberSet.mu.
	top bool
}

// histograms are the observers a subscriber's samples go to.
type histograms struct {
	attempt, latency, due prometheus.Observer
}

// lazyCounter is a counter child created on its first use.
type lazyCounter struct {
	p atomic.Pointer[prometheus.Counter]
}

func (c *lazyCounter) get1(vec *prometheus.CounterVec, a string) prometheus.Counter {
	if p := c.p.Load(); p != nil {
		return *p
	}
	child := vec.WithLabelValues(a)
	c.p.CompareAndSwap(nil, &child)
	return *c.p.Load()
}

func (c *lazyCounter) get2(vec *prometheus.CounterVec, a, b string) prometheus.Counter {
	if p := c.p.Load(); p != nil {
		return *p
	}
	child := vec.WithLabelValues(a, b)
	c.p.CompareAndSwap(nil, &child)
	return *c.p.Load()
}

// subscriberSet is every subscriber seen by this relay, and which of them
// have histograms of their own.
type subscriberSet struct {
	m    *Metrics
	byID sync.Map // id → *subscriber

	mu    sync.Mutex
	tops  int
	other *histograms

	unknownOnce sync.Once
	unknown     *subscriber
}

func (set *subscriberSet) init(m *Metrics) {
	set.m = m
	set.other = &histograms{
		attempt: m.attemptDuration.WithLabelValues(OtherSubscriber),
		latency: m.eventLatency.WithLabelValues(OtherSubscriber),
		due:     m.dueToAccepted.WithLabelValues(OtherSubscriber),
	}
}

// get returns the series of a subscriber, creating them on its first use.
// An id the relay's view does not hold (see [Metrics.Run]) is counted under
// [UnknownSubscriber] and not remembered.
func (set *subscriberSet) get(id string) *subscriber {
	if s, ok := set.byID.Load(id); ok {
		return s.(*subscriber)
	}
	if src := set.m.src.Load(); src != nil {
		if _, ok := src.Subscribers.Lookup(id); !ok {
			set.unknownOnce.Do(func() { set.unknown = set.newSubscriber(UnknownSubscriber) })
			return set.unknown
		}
	}
	set.mu.Lock()
	defer set.mu.Unlock()
	if s, ok := set.byID.Load(id); ok {
		return s.(*subscriber)
	}
	s := set.newSubscriber(id)
	if set.tops < set.m.opts.TopSubscribers {
		// Until the first ranking, the first ones seen.
		set.promote(s)
	}
	set.byID.Store(id, s)
	return s
}

func (set *subscriberSet) newSubscriber(id string) *subscriber {
	s := &subscriber{id: id, deadline: set.m.deadlineMissed.WithLabelValues(id)}
	s.hist.Store(set.other)
	return s
}

// promote gives s histograms of its own; set.mu is held.
func (set *subscriberSet) promote(s *subscriber) {
	s.top = true
	set.tops++
	s.hist.Store(&histograms{
		attempt: set.m.attemptDuration.WithLabelValues(s.id),
		latency: set.m.eventLatency.WithLabelValues(s.id),
		due:     set.m.dueToAccepted.WithLabelValues(s.id),
	})
}

// demote sends s's samples to subscriber="_other" and removes its own
// histograms; set.mu is held.
func (set *subscriberSet) demote(s *subscriber) {
	s.top = false
	set.tops--
	s.hist.Store(set.other)
	set.m.attemptDuration.DeleteLabelValues(s.id)
	set.m.eventLatency.DeleteLabelValues(s.id)
	set.m.dueToAccepted.DeleteLabelValues(s.id)
}

// rank chooses the top subscribers again: those with the most attempts
// since the last ranking, a present one winning a tie (and keeping its
// place while no busier one needs it), so that series do not come and go
// between equals.
func (set *subscriberSet) rank() {
	set.mu.Lock()
	defer set.mu.Unlock()
	type candidate struct {
		s       *subscriber
		traffic int64
	}
	var all []candidate
	set.byID.Range(func(_, v any) bool {
		s := v.(*subscriber)
		all = append(all, candidate{s, s.traffic.Swap(0)})
		return true
	})
	slices.SortFunc(all, func(a, b candidate) int {
		if c := cmp.Compare(b.traffic, a.traffic); c != 0 {
			return c
		}
		if a.s.top != b.s.top {
			if a.s.top {
				return -1
			}
			return 1
		}
		return cmp.Compare(a.s.id, b.s.id)
	})
	kept := 0
	for _, c := range all {
		want := kept < set.m.opts.TopSubscribers && (c.traffic > 0 || c.s.top)
		if want {
			kept++
		}
		switch {
		case want && !c.s.top:
			set.promote(c.s)
		case !want && c.s.top:
			set.demote(c.s)
		}
	}
}

// forget deletes every series of the subscribers inView no longer holds.
func (set *subscriberSet) forget(inView func(id string) bool) {
	set.mu.Lock()
	defer set.mu.Unlock()
	m := set.m
	set.byID.Range(func(k, v any) bool {
		s := v.(*subscriber)
		if inView(s.id) {
			return true
		}
		set.byID.Delete(k)
		if s.top {
			set.demote(s)
		}
		m.fanoutDeliveries.DeleteLabelValues(s.id)
		for _, outcome := range []string{OutcomeDelivered, OutcomeRetried, OutcomeDead} {
			m.deliveries.DeleteLabelValues(s.id, outcome)
		}
		m.rateLimitWait.DeleteLabelValues(s.id)
		m.deadlineMissed.DeleteLabelValues(s.id)
		m.deadlineMet.DeleteLabelValues(s.id)
		for _, r := range deadletter.Reasons() {
			m.dlqMessages.DeleteLabelValues(s.id, string(r))
		}
		return true
	})
}
