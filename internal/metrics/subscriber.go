package metrics

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/relay-dev/relay/internal/deadletter"
)

// subscriber holds the series of one subscriber, bound once, so that
// recording for it costs a map lookup and an atomic add, never a hash of
// label values. Which subscribers have series of their own is chosen by
// the ranking and the refresh ([Options.Series]), never on the delivery
// path: a recording only follows the pointers they set.
type subscriber struct {
	id string
	// c is its own counters while it has series of its own, else the
	// shared subscriber="_other" ones.
	c atomic.Pointer[counters]
	// hist is its own histograms while it is among the top subscribers,
	// else the shared subscriber="_other" ones.
	hist atomic.Pointer[histograms]
	// traffic counts its attempts since the last ranking.
	traffic atomic.Int64
	// failing: an attempt failed (a retry, a dead letter) since the last
	// ranking.
	failing atomic.Bool
	// top: hist is its own; shown: c is its own. Guarded by
	// subscriberSet.mu.
	top, shown bool
}

// fail marks s as failing until the next ranking.
func (s *subscriber) fail() {
	if !s.failing.Load() {
		s.failing.Store(true)
	}
}

// touch marks the next ranking as due: something was recorded that it
// ranks. A load, and a store once a ranking.
func (set *subscriberSet) touch() {
	if !set.active.Load() {
		set.active.Store(true)
	}
}

// counters are the counter series of one label value: a subscriber's own,
// or the shared subscriber="_other" ones.
type counters struct {
	id string
	// Created when first used, so that a subscriber has only the series it
	// has something to count in; deadline is created at 0 with the
	// counters (see newCounters).
	copies, delivered, retried, dead, wait, met, deadline lazyCounter
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
	// shown counts the subscribers with counters of their own, and
	// otherCounters are the others'.
	shown         int
	otherCounters *counters
	// active is set by an attempt or a failure since the last ranking: a ranking with
	// nothing new to rank changes nothing and is skipped, so that an idle
	// relay does nothing per subscriber.
	active atomic.Bool
	// flagged holds the subscribers the last refresh saw with a backlog, a
	// pause or an open circuit: they keep series of their own beyond the
	// top ones. Guarded by mu.
	flagged map[string]bool

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
	set.otherCounters = &counters{id: OtherSubscriber}
}

// newCounters returns the counters of the label value id, its
// relay_deadline_missed_total created at 0: an alert on its increase must
// see the first missed deadline, which it would not if the series were
// born at 1.
func (set *subscriberSet) newCounters(id string) *counters {
	c := &counters{id: id}
	c.deadline.get1(set.m.deadlineMissed, id)
	return c
}

// limit is how many subscribers may have counters of their own now (-1:
// every one), and how many histograms of their own.
func (set *subscriberSet) limit() (counters, hists int) {
	view := 0
	if src := set.m.src.Load(); src != nil {
		view = len(src.Subscribers.All())
	}
	counters = set.m.opts.Series.limit(view)
	hists = set.m.opts.TopSubscribers
	if counters >= 0 {
		hists = min(hists, counters)
	}
	return counters, hists
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
			set.unknownOnce.Do(func() {
				set.unknown = set.newSubscriber(UnknownSubscriber)
				set.unknown.c.Store(set.newCounters(UnknownSubscriber))
			})
			return set.unknown
		}
	}
	set.mu.Lock()
	defer set.mu.Unlock()
	if s, ok := set.byID.Load(id); ok {
		return s.(*subscriber)
	}
	s := set.newSubscriber(id)
	// Until the first ranking, the first ones seen.
	counters, hists := set.limit()
	if counters < 0 || set.shown < counters {
		set.show(s)
	}
	if set.tops < hists {
		set.promote(s)
	}
	set.byID.Store(id, s)
	return s
}

func (set *subscriberSet) newSubscriber(id string) *subscriber {
	s := &subscriber{id: id}
	s.c.Store(set.otherCounters)
	s.hist.Store(set.other)
	return s
}

// show gives s counters of its own; set.mu is held.
func (set *subscriberSet) show(s *subscriber) {
	s.shown = true
	set.shown++
	s.c.Store(set.newCounters(s.id))
}

// hide sends s's counts to subscriber="_other" and removes its own
// counters; set.mu is held. What they counted leaves the sums over
// subscribers, as when a relay restarts: rate() and increase() are not
// affected.
func (set *subscriberSet) hide(s *subscriber) {
	s.shown = false
	set.shown--
	set.otherCounters.deadline.get1(set.m.deadlineMissed, OtherSubscriber)
	s.c.Store(set.otherCounters)
	set.deleteCounters(s.id)
}

// deleteCounters deletes every counter series of the label value id.
func (set *subscriberSet) deleteCounters(id string) {
	m := set.m
	m.fanoutDeliveries.DeleteLabelValues(id)
	for _, outcome := range []string{OutcomeDelivered, OutcomeRetried, OutcomeDead} {
		m.deliveries.DeleteLabelValues(id, outcome)
	}
	m.rateLimitWait.DeleteLabelValues(id)
	m.deadlineMissed.DeleteLabelValues(id)
	m.deadlineMet.DeleteLabelValues(id)
	for _, r := range deadletter.Reasons() {
		m.dlqMessages.DeleteLabelValues(id, string(r))
	}
}

// flag gives counters of their own to the subscribers a refresh saw with a
// backlog, a pause or an open circuit, at once and beyond the top ones,
// and keeps them until a ranking after they have none.
func (set *subscriberSet) flag(ids map[string]bool) {
	set.mu.Lock()
	defer set.mu.Unlock()
	set.flagged = ids
	if c, _ := set.limit(); c < 0 || set.m.opts.Series.Mode == SeriesNone {
		return
	}
	for id := range ids {
		if v, ok := set.byID.Load(id); ok && !v.(*subscriber).shown {
			set.show(v.(*subscriber))
		}
	}
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

// rank chooses again the subscribers with series of their own: for the
// counters, every one (all), or the [SubscriberSeries] top N by attempts
// since the last ranking and every one failing since then or flagged by
// the last refresh; for the histograms, the [Options.TopSubscribers] by
// attempts. A present one wins a tie (and keeps its place while no busier
// one needs it), so that series do not come and go between equals. With
// no attempt since the last ranking nothing would change, and nothing is
// done.
func (set *subscriberSet) rank() {
	if !set.active.Swap(false) {
		return
	}
	set.mu.Lock()
	defer set.mu.Unlock()
	type candidate struct {
		s       *subscriber
		traffic int64
		failing bool
	}
	counters, hists := set.limit()
	var all []candidate
	set.byID.Range(func(_, v any) bool {
		s := v.(*subscriber)
		c := candidate{s, s.traffic.Swap(0), s.failing.Swap(false)}
		if counters >= 0 && c.traffic == 0 && !c.failing && !s.shown && !s.top && !set.flagged[s.id] {
			// Quiet, and with no series: it keeps none whatever the
			// others did, and sorting it with them is what a hundred
			// thousand idle subscribers would cost.
			return true
		}
		all = append(all, c)
		return true
	})
	byTraffic := func(present func(*subscriber) bool) func(a, b candidate) int {
		return func(a, b candidate) int {
			if c := cmp.Compare(b.traffic, a.traffic); c != 0 {
				return c
			}
			if present(a.s) != present(b.s) {
				if present(a.s) {
					return -1
				}
				return 1
			}
			return cmp.Compare(a.s.id, b.s.id)
		}
	}
	slices.SortFunc(all, byTraffic(func(s *subscriber) bool { return s.shown }))
	kept := 0
	for _, c := range all {
		want := counters < 0 || kept < counters && (c.traffic > 0 || c.s.shown)
		if want {
			kept++
		}
		if counters != 0 && (c.failing || set.flagged[c.s.id]) {
			want = true
		}
		switch {
		case want && !c.s.shown:
			set.show(c.s)
		case !want && c.s.shown:
			set.hide(c.s)
		}
	}
	slices.SortFunc(all, byTraffic(func(s *subscriber) bool { return s.top }))
	kept = 0
	for _, c := range all {
		want := kept < hists && (c.traffic > 0 || c.s.top)
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
	set.byID.Range(func(k, v any) bool {
		s := v.(*subscriber)
		if inView(s.id) {
			return true
		}
		set.byID.Delete(k)
		if s.top {
			set.demote(s)
		}
		if s.shown {
			s.shown = false
			set.shown--
			set.deleteCounters(s.id)
		}
		return true
	})
}
