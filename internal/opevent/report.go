package opevent

import "time"

// Disabled reports that this relay disabled the subscriber, its write to
// the bucket made at at (what makes the event one, whichever relay reports
// it), after an answer of status.
func (p *Publisher) Disabled(subscriber, reason string, status int, at time.Time) {
	if p == nil {
		return
	}
	p.announce(Event{Type: SubscriberDisabled, Subscriber: subscriber, Reason: reason, Status: status, At: at}, millis(at))
}

// Paused reports a pause of the subscriber until until, which this relay
// stored (a Retry-After of status); its end is announced as
// relay.subscriber.resumed, ResumeQuiet after it. A pause this relay
// announced and now extends, or stores again within ResumeQuiet of its
// end, is not announced again: its resume moves to the later end.
func (p *Publisher) Paused(subscriber string, until time.Time, status int) {
	if p == nil {
		return
	}
	now := p.cfg.Clock.Now()
	p.mu.Lock()
	pending := p.resumes[subscriber]
	if until.After(pending) {
		p.resumes[subscriber] = until
	}
	p.mu.Unlock()
	if !pending.IsZero() && pending.Add(ResumeQuiet).After(now) {
		return // the pause this relay announced goes on: its end moves
	}
	p.announce(Event{Type: SubscriberPaused, Subscriber: subscriber, Status: status, Until: until.UTC(),
		At: p.cfg.Clock.Now()}, millis(until))
}

// CircuitOpened reports that this relay opened the subscriber's circuit
// until until, its opens-th in a row.
func (p *Publisher) CircuitOpened(subscriber string, until time.Time, opens int, status int) {
	if p == nil {
		return
	}
	p.announce(Event{Type: CircuitOpened, Subscriber: subscriber, Status: status, Count: opens, Until: until.UTC(),
		At: p.cfg.Clock.Now()}, millis(until))
}

// CircuitClosed reports that this relay closed the subscriber's circuit,
// which was open until openUntil.
func (p *Publisher) CircuitClosed(subscriber string, openUntil time.Time) {
	if p == nil {
		return
	}
	p.announce(Event{Type: CircuitClosed, Subscriber: subscriber, At: p.cfg.Clock.Now()}, millis(openUntil))
}

// Dead counts one dead letter of the subscriber, of an event of eventType,
// for the relay.delivery.dead of its minute. A dead letter of an
// operational event is not counted.
func (p *Publisher) Dead(subscriber, reason, eventType string) {
	if p == nil || Is(eventType) {
		return
	}
	now := p.cfg.Clock.Now()
	k := deadKey{subscriber: subscriber, reason: reason, window: now.Truncate(DeadWindow)}
	p.mu.Lock()
	c := p.dead[k]
	if c == nil {
		c = &deadCount{from: now}
		p.dead[k] = c
	}
	c.n++
	c.to = now
	p.mu.Unlock()
}
