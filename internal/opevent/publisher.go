package opevent

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/internal/clock"
)

// The publisher's tuning, in one place.
const (
	// QueueSize bounds the events waiting for their PubAck: past it a new
	// one is dropped (and logged) rather than hold a lane or the fan-out.
	QueueSize = 1024
	// DeadWindow is the span over which a subscriber's dead letters of one
	// reason make one relay.delivery.dead.
	DeadWindow = time.Minute
	// tries bounds the publishes of one event; between two, a second
	// doubling to maxBackoff, while EVENTS refuses it (a full stream, no
	// leader).
	tries      = 6
	maxBackoff = 8 * time.Second
	// tick is how often due counts and resumes are looked for.
	tick = time.Second
	// ResumeQuiet is how long after the end of a pause this relay
	// announced its resume waits: a pause stored again within it (a
	// subscriber whose every Retry-After is followed by another) continues
	// the one announced, so such a subscriber makes one
	// relay.subscriber.paused and one relay.subscriber.resumed, not a pair
	// per Retry-After.
	ResumeQuiet = 30 * time.Second
)

// ErrConfig is returned by [New] for a Config without JetStream.
var ErrConfig = errors.New("opevent: config needs JS")

// Config is what a [Publisher] needs.
type Config struct {
	// JS publishes the events into EVENTS.
	JS jetstream.JetStream
	// Relay names this relay in every event it makes (Event.Relay).
	Relay string
	// PausedUntil, when set, is the end of the subscriber's pause as this
	// relay knows it: a resume is announced only once no later pause holds
	// the subscriber (another relay may have stored one).
	PausedUntil func(subscriber string) time.Time
	// Logger defaults to slog.Default(); Clock to the real one.
	Logger *slog.Logger
	Clock  clock.Clock
}

// Publisher publishes operational events. A nil *Publisher is valid and
// publishes nothing, so that the parts that report can run without one.
type Publisher struct {
	cfg   Config
	queue chan outgoing

	mu      sync.Mutex
	dead    map[deadKey]*deadCount
	resumes map[string]time.Time // subscriber -> the end of the pause it announced
	dropped int
}

// outgoing is one event and its Nats-Msg-Id.
type outgoing struct {
	id string
	ev Event
}

// deadKey is one relay.delivery.dead to come: a subscriber, a reason, the
// start of a DeadWindow.
type deadKey struct {
	subscriber, reason string
	window             time.Time
}

// deadCount is what it counts.
type deadCount struct {
	n        int
	from, to time.Time
}

// New returns a publisher; run it with [Publisher.Run].
func New(cfg Config) (*Publisher, error) {
	if cfg.JS == nil {
		return nil, ErrConfig
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real
	}
	return &Publisher{cfg: cfg, queue: make(chan outgoing, QueueSize), dead: map[deadKey]*deadCount{},
		resumes: map[string]time.Time{}}, nil
}

// Run publishes what is announced until ctx ends, then what is still
// queued or counted, for a few seconds at most.
func (p *Publisher) Run(ctx context.Context) error {
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			p.drain()
			return nil
		case o := <-p.queue:
			p.publish(ctx, o)
		case <-t.C:
			p.due(p.cfg.Clock.Now(), false)
		}
	}
}

// drain publishes, after the stop, every count however young and what is
// queued, within a few seconds.
func (p *Publisher) drain() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	p.due(p.cfg.Clock.Now(), true)
	for ctx.Err() == nil {
		select {
		case o := <-p.queue:
			p.publish(ctx, o)
		default:
			return
		}
	}
}

// announce queues ev, without waiting.
func (p *Publisher) announce(ev Event, discriminator ...string) {
	ev.Relay = p.cfg.Relay
	ev.At = ev.At.UTC()
	o := outgoing{id: id(ev.Type, ev.Subscriber, discriminator...), ev: ev}
	select {
	case p.queue <- o:
	default:
		p.mu.Lock()
		p.dropped++
		n := p.dropped
		p.mu.Unlock()
		p.cfg.Logger.Warn("opevent: queue full, an operational event is dropped", "type", ev.Type,
			"subscriber", ev.Subscriber, "dropped", n)
	}
}

// publish stores one event in EVENTS, trying again while it is refused.
func (p *Publisher) publish(ctx context.Context, o outgoing) {
	body, err := json.Marshal(o.ev)
	if err != nil { // an Event always marshals
		p.cfg.Logger.Error("opevent: encoding", "type", o.ev.Type, "err", err)
		return
	}
	m := &nats.Msg{Subject: "events." + o.ev.Type, Data: body, Header: nats.Header{}}
	m.Header.Set(nats.MsgIdHdr, o.id)
	m.Header.Set("Content-Type", "application/json")
	wait := time.Second
	for try := 1; ; try++ {
		// Each try has its time even once ctx ends: the stop's drain
		// publishes with a context of its own, and one queued as the
		// stop came is tried once.
		pubCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_, err = p.cfg.JS.PublishMsg(pubCtx, m)
		cancel()
		if err == nil {
			return
		}
		if try == tries || ctx.Err() != nil {
			p.cfg.Logger.Warn("opevent: an operational event could not be published", "type", o.ev.Type,
				"subscriber", o.ev.Subscriber, "id", o.id, "err", err)
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		wait = min(2*wait, maxBackoff)
	}
}

// due queues the counts whose window has ended (all of them when all is
// set) and the resumes whose pause ended ResumeQuiet ago (whose pause ended
// at all, when all is set: the relay stops).
func (p *Publisher) due(now time.Time, all bool) {
	p.mu.Lock()
	var out []Event
	var keys []deadKey
	for k, c := range p.dead {
		if all || !now.Before(k.window.Add(DeadWindow)) {
			out = append(out, Event{Type: DeliveryDead, Subscriber: k.subscriber, Reason: k.reason, Count: c.n,
				From: c.from.UTC(), To: c.to.UTC(), At: now})
			keys = append(keys, k)
			delete(p.dead, k)
		}
	}
	var resumed []Event
	for sub, until := range p.resumes {
		if now.Before(until) || !all && now.Before(until.Add(ResumeQuiet)) {
			continue // not ended, or ended too lately to tell it from a pause again
		}
		delete(p.resumes, sub)
		if p.cfg.PausedUntil != nil && p.cfg.PausedUntil(sub).After(until) {
			continue // a later pause holds it: its own end is announced
		}
		resumed = append(resumed, Event{Type: SubscriberResumed, Subscriber: sub, Until: until.UTC(), At: now})
	}
	p.mu.Unlock()
	for i, ev := range out {
		p.announce(ev, keys[i].reason, strconv.FormatInt(keys[i].window.Unix(), 10))
	}
	for _, ev := range resumed {
		p.announce(ev, millis(ev.Until))
	}
}
