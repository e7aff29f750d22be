package lanes

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/sourcegraph/conc"

	"github.com/relay-dev/relay/internal/deadletter"
	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/streams"
)

// pullBatch is how many messages a lane asks for at once. Every message is
// dispatched at once (held, handed back or sent), so the client buffer never
// holds a message long enough for its ack wait to matter.
const pullBatch = 256

// disabledHold is how long a message of a disabled subscriber is parked in
// RETRIES for; `relay sub enable` resumes delivery within about that long.
// Parked, it holds none of the lane's MaxAckPending slots however long the
// subscriber stays disabled.
const disabledHold = 30 * time.Second

// lane is one durable pull consumer and the schedulers of the subscribers
// whose messages it carries.
type lane struct {
	cfg  Config
	name string
	log  *slog.Logger

	stopping atomic.Bool
	mu       sync.Mutex
	scheds   map[string]*scheduler
	// work owns every scheduler loop and every request goroutine.
	work conc.WaitGroup
}

func newLane(ctx context.Context, cfg Config, name string) (*lane, error) {
	l := &lane{
		cfg:    cfg,
		name:   name,
		log:    cfg.Logger.With("lane", name),
		scheds: make(map[string]*scheduler),
	}
	if _, err := l.consumer(ctx); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *lane) consumer(ctx context.Context) (jetstream.Consumer, error) {
	cons, err := l.cfg.JS.CreateOrUpdateConsumer(ctx, streams.Deliveries, jetstream.ConsumerConfig{
		Durable:       ConsumerName(l.name),
		Description:   "relay lane " + l.name,
		FilterSubject: "deliveries." + l.name + ".>",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       l.cfg.AckWait,
		MaxDeliver:    -1,
		MaxAckPending: l.cfg.MaxAckPending,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return nil, fmt.Errorf("lanes: creating consumer %s: %w", ConsumerName(l.name), err)
	}
	return cons, nil
}

// run consumes until ctx is cancelled, then stops pulling, hands back what
// it holds and waits for the requests in flight.
func (l *lane) run(ctx context.Context) {
	keepalive := time.NewTicker(l.cfg.AckWait / 4)
	defer keepalive.Stop()
	for ctx.Err() == nil {
		cc, err := l.consume(ctx)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			l.log.Error("lanes: consuming, starting again", "err", err)
			// Held messages stay alive meanwhile, or another relay would
			// take them over and POST them a second time.
			retry := time.After(time.Second)
		sleep:
			for {
				select {
				case <-ctx.Done():
					break sleep
				case <-retry:
					break sleep
				case <-keepalive.C:
					l.keepAlive()
				}
			}
			continue
		}
	wait:
		for {
			select {
			case <-ctx.Done():
				l.stopping.Store(true)
				cc.Drain()
				<-cc.Closed()
				break wait
			case <-cc.Closed():
				l.log.Warn("lanes: consumer closed, starting again")
				break wait
			case <-keepalive.C:
				l.keepAlive()
			}
		}
	}
	l.stopping.Store(true)
	l.handBackAll()
	l.work.Wait()
}

func (l *lane) consume(ctx context.Context) (jetstream.ConsumeContext, error) {
	cons, err := l.consumer(ctx)
	if err != nil {
		return nil, err
	}
	return cons.Consume(func(msg jetstream.Msg) { l.dispatch(ctx, msg) },
		jetstream.PullMaxMessages(pullBatch),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			l.log.Debug("lanes: pull", "err", err)
		}))
}

// dispatch places one message with its subscriber's scheduler. It never
// blocks on a subscriber.
func (l *lane) dispatch(ctx context.Context, msg jetstream.Msg) {
	if l.stopping.Load() {
		_ = msg.Nak()
		return
	}
	id := subscriberOf(msg.Subject())
	sub, ok := l.cfg.Subscribers.Get(id)
	if !ok {
		l.unknownSubscriber(msg, id)
		return
	}
	d := newDelivery(msg)
	if sub.Disabled {
		l.work.Go(func() { l.holdDisabled(context.WithoutCancel(ctx), d, sub) })
		return
	}
	if !d.dueBy(l.cfg.Clock.Now()) {
		l.work.Go(func() {
			l.deadLetter(context.WithoutCancel(ctx), d, sub, deadletter.Death{Reason: d.lateReason()})
		})
		return
	}
	l.scheduler(id).offer(ctx, d, sub)
}

// handBack returns a message its subscriber cannot take yet: a short wait
// with NakWithDelay, a longer one parked in RETRIES so that it holds none of
// the lane's MaxAckPending slots meanwhile.
func (l *lane) handBack(ctx context.Context, d delivery, sub subscribers.Subscriber, wait time.Duration) {
	l.cfg.Metrics.HandBack()
	if wait < parkAfter {
		_ = d.msg.NakWithDelay(wait)
		return
	}
	at := l.cfg.Clock.Now().Add(wait)
	l.work.Go(func() { l.park(context.WithoutCancel(ctx), d, sub, copyHeader(d.msg.Headers()), at) })
}

// unknownSubscriber settles a message whose subscriber this relay does not
// know. It may be new and this relay's view behind (a watch catching up
// after a reconnect): hand it back a few times before deciding it is gone.
// `relay sub rm` purges a removed subscriber's queue, so what is left is a
// race with it and has nowhere to go.
func (l *lane) unknownSubscriber(msg jetstream.Msg, id string) {
	if md, err := msg.Metadata(); err == nil && md.NumDelivered < unknownTries {
		_ = msg.NakWithDelay(unknownWait)
		return
	}
	l.log.Info("lanes: dropping delivery for removed subscriber", "subscriber", id)
	_ = msg.Term()
}

// How long and how often a message of an unknown subscriber is handed back
// before it is dropped.
const (
	unknownTries = 5
	unknownWait  = 2 * time.Second
)

// holdDisabled parks a disabled subscriber's delivery for disabledHold,
// without counting an attempt.
func (l *lane) holdDisabled(ctx context.Context, d delivery, sub subscribers.Subscriber) {
	l.cfg.Metrics.HandBack()
	l.park(ctx, d, sub, copyHeader(d.msg.Headers()), l.cfg.Clock.Now().Add(disabledHold))
}

func (l *lane) scheduler(id string) *scheduler {
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.scheds[id]
	if !ok {
		s = newScheduler(l, id)
		l.scheds[id] = s
	}
	return s
}

func (l *lane) schedulers() []*scheduler {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]*scheduler, 0, len(l.scheds))
	for _, s := range l.scheds {
		out = append(out, s)
	}
	return out
}

// keepAlive extends the ack wait of every held and in-flight message, so a
// message waiting for its subscriber is not redelivered to another relay and
// POSTed twice at once.
func (l *lane) keepAlive() {
	for _, s := range l.schedulers() {
		for _, msg := range s.outstanding() {
			_ = msg.InProgress()
		}
	}
}

// handBackAll returns every held message to JetStream for another relay (or
// the next start) to deliver.
func (l *lane) handBackAll() {
	for _, s := range l.schedulers() {
		for _, msg := range s.drain() {
			_ = msg.Nak()
		}
	}
}

// subscriberOf returns the subscriber token of deliveries.<lane>.<subscriber>.
func subscriberOf(subject string) string {
	return subject[strings.LastIndexByte(subject, '.')+1:]
}
