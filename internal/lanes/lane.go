package lanes

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/sourcegraph/conc"

	"github.com/relay-dev/relay/internal/consumer"
	"github.com/relay-dev/relay/internal/deadletter"
	"github.com/relay-dev/relay/internal/metrics"
	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/streams"
)

// lane is one durable pull consumer and the schedulers of the subscribers
// whose messages it carries.
type lane struct {
	cfg  Config
	env  *engine
	name string
	log  *slog.Logger
	// runCtx is the lane's own context, for the schedulers that others
	// (a sweep, a subscriber change) start.
	runCtx context.Context

	stopping atomic.Bool
	// starting is held (read) by whoever starts a scheduler from outside
	// the lane's own goroutines, and taken (write) before the lane waits
	// for them, so that none starts once it waits.
	starting sync.RWMutex
	// busy counts the schedulers that hold, send or have a backlog: they
	// share the lane's MaxAckPending.
	busy atomic.Int64
	// active holds those busy schedulers (see [scheduler.syncLocked]):
	// what a keep-alive round renews is theirs alone, so that a lane of a
	// hundred thousand idle subscribers renews nothing for them. activeMu
	// comes after every scheduler's mu.
	activeMu sync.Mutex
	active   map[*scheduler]struct{}
	// marked holds the schedulers that take their subscriber for one with
	// a backlog in overflow (s.marked, see [scheduler.syncLocked]): the
	// sweep and a subscriber change look at them and the busy ones alone,
	// not at every subscriber the lane has met. Under activeMu.
	marked map[*scheduler]struct{}
	// confirmed is when the last keep-alive round that the server is known
	// to have received began (unix nanoseconds, real time).
	confirmed atomic.Int64
	// gapAt is when the last confirmed round began that came three quarters
	// of an ack wait or more after the one before (see [lane.renewedAt]).
	gapAt atomic.Int64
	// stamps guards the oldest receipts (unix nanoseconds; noStamp when
	// none) of the messages stamped as held since the last confirmed
	// round began, and since the round in progress began: how late a
	// round's answer may come is bounded by them (see [lane.confirmWait]).
	stamps                                 sync.Mutex
	oldestSinceConfirmed, oldestSinceRound int64
	// flight counts its requests in flight, for relay_lane_in_flight.
	flight *metrics.Lane
	// requests counts its requests in flight, waiting its schedulers in a
	// wait their subscriber explains, and lastSent is when it last began a
	// request (unix nanoseconds, by Config.Clock): the stall watch's view
	// (see stall.go).
	requests, waiting, lastSent atomic.Int64

	mu     sync.Mutex
	scheds map[string]*scheduler
	// returning holds what the last pull request brings once the lane
	// stops, kept alive with the held messages until handBackAll returns
	// them all at once.
	returning []jetstream.Msg
	// spare holds the request slots handed to its schedulers once it
	// stopped, given back when spareDone (see [lane.unqueue]).
	spare     []func()
	spareDone bool
	// work owns every scheduler loop and every request goroutine.
	work conc.WaitGroup
	// puts makes the lane's moves to overflow; it stops after work.
	puts *putter
	// scheduling keeps the originals of the deliveries on their way to be
	// scheduled in RETRIES, renewed by the keep-alive rounds (a schedule
	// runs apart from any scheduler).
	scheduling *renewed
	// dispatching is held by the pull loop while it stamps a message as
	// held and hands it to its scheduler (see [lane.hold]), taken by a
	// keep-alive round as it begins, so that a message stamped before a
	// round began is among those the round renews (see [lane.renewedAt]),
	// and by a prune, so that it never drops the scheduler a message is
	// being handed to. It comes before mu.
	dispatching sync.Mutex
}

func newLane(ctx context.Context, cfg Config, env *engine, name string) (*lane, error) {
	l := &lane{
		cfg:        cfg,
		env:        env,
		name:       name,
		runCtx:     ctx,
		log:        cfg.Logger.With("lane", name),
		scheds:     make(map[string]*scheduler),
		flight:     cfg.Metrics.Lane(name),
		scheduling: newRenewed(),
	}
	l.confirmed.Store(ackNow())
	l.oldestSinceConfirmed, l.oldestSinceRound = noStamp, noStamp
	// Bounded: the manager tries a lane that cannot start again later,
	// and meanwhile starts the others.
	createCtx, cancel := context.WithTimeout(ctx, laneCreateTimeout)
	defer cancel()
	if _, err := l.consumer(createCtx); err != nil {
		return nil, err
	}
	l.puts = newPutter(env.writes.put, env.writes.spills, l.log)
	return l, nil
}

func (l *lane) consumer(ctx context.Context) (jetstream.Consumer, error) {
	cons, err := consumer.Ensure(ctx, l.cfg.JS, streams.Deliveries, jetstream.ConsumerConfig{
		Durable:       streams.LaneConsumer(l.name),
		Description:   "relay lane " + l.name,
		FilterSubject: streams.LaneFilter(l.name),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       l.cfg.AckWait,
		MaxDeliver:    -1,
		MaxAckPending: l.cfg.MaxAckPending,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return nil, fmt.Errorf("lanes: creating consumer %s: %w", streams.LaneConsumer(l.name), err)
	}
	return cons, nil
}

// run consumes until ctx is cancelled. Then it stops pulling, handles what
// the last pull request brings (handing it back), hands back what it holds
// and waits for the requests in flight: nothing this relay was sent waits
// out its ack wait.
func (l *lane) run(ctx context.Context) {
	l.log.Info("lanes: lane started")
	defer l.log.Info("lanes: lane stopped")
	stopping := context.AfterFunc(ctx, func() { l.stopping.Store(true) })
	defer stopping()
	keepCtx, stopKeeping := context.WithCancel(context.WithoutCancel(ctx))
	var keep conc.WaitGroup
	keep.Go(func() { l.keepAliveLoop(keepCtx) })
	keep.Go(func() { l.watchStalls(keepCtx) })
	defer func() {
		stopKeeping()
		keep.Wait()
	}()
	for ctx.Err() == nil {
		cons, err := l.consumer(ctx)
		if err == nil {
			err = consumer.Pull(ctx, l.cfg.JS, cons, pullBatch, l.log, func(msg jetstream.Msg) { l.dispatch(ctx, msg) })
		}
		if ctx.Err() != nil {
			break
		}
		l.log.Error("lanes: consuming, starting again", "err", err)
		select {
		case <-ctx.Done():
		case <-l.cfg.Clock.After(failedRetry):
		}
	}
	l.starting.Lock()
	l.stopping.Store(true)
	l.starting.Unlock()
	l.unqueue()
	l.handBackAll()
	l.work.Wait()
	l.giveBackSpare()
	l.puts.stop()
	l.flight.Close()
}

// dispatch places one message with its subscriber's scheduler. It never
// blocks on a subscriber, nor on a write: what must be stored elsewhere
// (overflow, RETRIES, the DLQ) is queued or handed to a goroutine of the
// lane (see writes.go).
func (l *lane) dispatch(ctx context.Context, msg jetstream.Msg) {
	if l.stopping.Load() {
		l.mu.Lock()
		l.returning = append(l.returning, msg)
		l.mu.Unlock()
		return
	}
	d := newDelivery(msg)
	id, routable := subscriberOf(msg.Subject())
	if !routable {
		// Published by hand or by another writer: no subscriber can be
		// named so, and another token would route it to the last one.
		l.work.Go(func() {
			l.deadLetter(context.WithoutCancel(ctx), d, deadletter.NoSubscriber, deadletter.Death{Reason: deadletter.Unroutable,
				LastError: "the subject " + strconv.Quote(msg.Subject()) + " names no subscriber: deliveries.<lane>.<subscriber id> is expected"})
		})
		return
	}
	if !l.alive(d) {
		// It waited in this client past most of its ack wait (a process
		// starved of CPU): JetStream may have given it to another relay.
		l.letGo(d, id)
		return
	}
	sub, ok := l.cfg.Subscribers.Get(id)
	if !ok {
		l.work.Go(func() { l.unknownSubscriber(context.WithoutCancel(ctx), d, id) })
		return
	}
	now := l.cfg.Clock.Now()
	switch {
	case d.malformed != "":
		l.work.Go(func() {
			l.deadLetter(context.WithoutCancel(ctx), d, id, deadletter.Death{Reason: deadletter.Malformed, LastError: d.malformed})
		})
	case !d.dueBy(now) || d.dueTooLate():
		l.work.Go(func() {
			l.deadLetter(context.WithoutCancel(ctx), d, id, deadletter.Death{Reason: d.lateReason()})
		})
	case d.early(now):
		l.work.Go(func() { l.schedule(context.WithoutCancel(ctx), d, id) })
	default:
		l.hold(ctx, d, sub)
	}
}

// hold stamps d as held and hands it to its subscriber's scheduler, under
// dispatching: a keep-alive round that begins after the stamp renews it,
// and a prune cannot drop the scheduler between the lookup and the offer.
func (l *lane) hold(ctx context.Context, d delivery, sub subscribers.Subscriber) {
	l.dispatching.Lock()
	defer l.dispatching.Unlock()
	l.stamp(&d)
	l.scheduler(sub.ID).offer(ctx, d, sub)
}

// unknownSubscriber settles a message whose subscriber this relay's view
// does not hold. The bucket decides: a key that is there (a watch behind, or
// a value this build refuses) holds the message in the subscriber's overflow
// until the relay sees it; a key that relay sub rm removed drops it, as the
// removal asked (what this relay held, or what came back from overflow or
// RETRIES after the command purged them); a key that never was is a message
// nobody can take, dead-lettered as unroutable.
func (l *lane) unknownSubscriber(ctx context.Context, d delivery, id string) {
	known, removed, err := l.env.lookup(ctx, id, d.received)
	switch {
	case err != nil:
		l.env.logOnce("lookup."+id, "lanes: cannot tell whether a subscriber exists; handing its deliveries back for a moment", "subscriber", id, "err", err)
		l.handBackIn(d, settleRetry)
	case known:
		l.env.logOnce("unknown."+id, "lanes: keeping in overflow the deliveries of a subscriber this relay cannot use yet", "subscriber", id)
		l.toOverflow(d, id, nil)
	case removed:
		l.remove(d, id)
	default:
		l.deadLetter(ctx, d, id, deadletter.Death{Reason: deadletter.Unroutable, LastError: "no subscriber " + id + " in " + streams.SubscribersBucket})
	}
}

func (l *lane) ctx() context.Context { return l.runCtx }

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

// existing returns the subscriber's scheduler in the lane, nil when it has
// none.
func (l *lane) existing(id string) *scheduler {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.scheds[id]
}

// prune drops the idle schedulers of subscribers that are gone. It takes
// dispatching first, as hold does: a scheduler that hold has just looked up
// is idle until its offer, and dropped then it would take the delivery
// apart from the lane (a second scheduler for its subscriber beside it, its
// held messages renewed by no keep-alive round).
func (l *lane) prune(inView func(id string) bool) {
	l.dispatching.Lock()
	defer l.dispatching.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, s := range l.scheds {
		if !inView(id) && s.idle() {
			delete(l.scheds, id)
			// Its counts not written yet would bring back the key that
			// `relay sub rm` deleted, for a later subscriber of its id.
			l.cfg.Timeliness.Forget(id)
		}
	}
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

// busySchedulers lists the schedulers that hold, send, or bring back a
// backlog (see [scheduler.syncLocked]).
func (l *lane) busySchedulers() []*scheduler {
	l.activeMu.Lock()
	defer l.activeMu.Unlock()
	out := make([]*scheduler, 0, len(l.active))
	for s := range l.active {
		out = append(out, s)
	}
	return out
}

// markedSchedulers lists the schedulers that take their subscriber for one
// with a backlog in overflow, and with busy those that are busy besides:
// between them, every scheduler a sweep or a kick has anything to do for.
func (l *lane) markedSchedulers(busy bool) []*scheduler {
	l.activeMu.Lock()
	defer l.activeMu.Unlock()
	out := make([]*scheduler, 0, len(l.marked)+len(l.active))
	for s := range l.marked {
		out = append(out, s)
	}
	if busy {
		for s := range l.active {
			if _, ok := l.marked[s]; !ok {
				out = append(out, s)
			}
		}
	}
	return out
}

// keepAliveLoop extends the ack wait of every held and in-flight message
// every quarter of it, so a message waiting for its subscriber is not
// redelivered to another relay and POSTed twice at once. The last
// InProgress of a round is sent as a request, which the consumer's leader
// answers once it has taken it; the round counts from then. (It proves the
// round's other InProgress arrived too as far as one connection delivers in
// order; with none to send, a ping proves the connection.) A message
// settled meanwhile is never renewed (see consumer.KeepAlive).
func (l *lane) keepAliveLoop(ctx context.Context) {
	every := keepAliveEvery(l.cfg.AckWait)
	// The rounds run in real time, as the ack wait they renew does (see
	// ackNow).
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		l.stamps.Lock()
		l.oldestSinceRound = noStamp
		l.stamps.Unlock()
		l.dispatching.Lock()
		start := ackNow()
		l.dispatching.Unlock()
		l.stamps.Lock()
		oldest := l.oldestSinceConfirmed
		l.stamps.Unlock()
		var msgs []jetstream.Msg
		// Only a busy scheduler holds or sends; one held by hold before
		// start is among them (syncLocked, under dispatching).
		for _, s := range l.busySchedulers() {
			msgs = append(msgs, s.outstanding()...)
		}
		l.mu.Lock()
		msgs = append(msgs, l.returning...)
		l.mu.Unlock()
		msgs = append(msgs, l.puts.pending.list()...)
		msgs = append(msgs, l.scheduling.list()...)
		// A message settled since it was listed is skipped as its
		// keep-alive goes (see consumer.KeepAlive).
		err := consumer.KeepAlive(l.cfg.JS.Conn(), l.confirmWait(start, oldest, every), msgs...)
		if err != nil {
			l.log.Warn("lanes: keep-alive not confirmed", "err", err)
			continue
		}
		l.stamps.Lock()
		// What was stamped since this round began is renewed by the next.
		l.oldestSinceConfirmed = l.oldestSinceRound
		l.stamps.Unlock()
		if start-l.confirmed.Load() >= int64(aliveFor(l.cfg.AckWait)) {
			// Stored before confirmed: whoever reads the new confirmed
			// sees the gap before it.
			l.gapAt.Store(start)
		}
		l.confirmed.Store(start)
	}
}

// confirmWait is how long a keep-alive round that began at start waits for
// its confirmation: a quarter of the ack wait (every), or longer while the
// last confirmed round, and the oldest receipt of the messages stamped since
// it began (oldest), leave room. The round renews what the last confirmed
// one renewed, whose ack wait on the server runs from when the server took
// that round (after its start), and the messages stamped since, whose ack
// wait runs from their send (at most a quarter of the ack wait before their
// receipt; see [lane.alive]): an answer that comes within three quarters of
// an ack wait of the earlier of the two comes before any of them ran out.
// On a server or host too loaded to answer within a quarter of the ack
// wait, the rounds are then still confirmed, rather than each given up on
// in turn until the lane lets its deliveries go.
func (l *lane) confirmWait(start, oldest int64, every time.Duration) time.Duration {
	left := time.Duration(min(l.confirmed.Load(), oldest) + int64(aliveFor(l.cfg.AckWait)) - start)
	return max(every, left)
}

// noStamp is the oldest receipt when no message was stamped.
const noStamp = math.MaxInt64

// stamp marks d as held from now (see [lane.renewedAt]), and counts its
// receipt among those a keep-alive round's answer must come in time for
// (see [lane.confirmWait]).
func (l *lane) stamp(d *delivery) {
	l.stamps.Lock()
	defer l.stamps.Unlock()
	d.kept = ackNow()
	l.oldestSinceConfirmed = min(l.oldestSinceConfirmed, d.received)
	l.oldestSinceRound = min(l.oldestSinceRound, d.received)
}

// alive reports whether JetStream still counts d as this relay's: its ack
// wait was last reset (on delivery, or by a confirmed keep-alive round that
// renewed it) less than three quarters of it ago. Past that, after a NATS
// outage or a wait in this client, the server may have given it to another
// relay, and sending it would POST it twice at once. The quarter left
// covers the server's send to this client (see [consumer.ReceivedAt]).
func (l *lane) alive(d delivery) bool {
	return ackAge(l.renewedAt(d)) < aliveFor(l.cfg.AckWait)
}

// renewedAt is when d's ack wait was last reset, as far as this relay can
// tell (unix nanoseconds): when the client read it, or the start of the
// last confirmed keep-alive round that renewed it. A round renews only the
// messages held when it began (d.kept before its start), and only those
// whose ack wait had not run out by then: after a round that came more than
// three quarters of an ack wait after the one before (an outage), a message
// held since before it counts from its own renewals alone.
func (l *lane) renewedAt(d delivery) int64 {
	from := d.received
	confirmed := l.confirmed.Load()
	if d.kept == 0 || d.kept >= confirmed {
		return from
	}
	if gap := l.gapAt.Load(); d.kept < gap && gap-from >= int64(aliveFor(l.cfg.AckWait)) {
		return from
	}
	return max(from, confirmed)
}

// handBackAll returns every held message, and what the last pull request
// brought, to JetStream for another relay (or the next start) to deliver.
func (l *lane) handBackAll() {
	l.mu.Lock()
	msgs := l.returning
	l.returning = nil
	l.mu.Unlock()
	for _, s := range l.schedulers() {
		msgs = append(msgs, s.drain()...)
	}
	l.handBack(msgs...)
}

// unqueue withdraws every request for a request slot its schedulers queued
// in the gate (see [scheduler.acquire]) once the lane stops: no loop
// starts again. A slot handed over meanwhile is kept aside by
// [scheduler.granted] until giveBackSpare.
func (l *lane) unqueue() {
	for _, s := range l.schedulers() {
		s.mu.Lock()
		cancel := s.queued
		s.queued = nil
		s.mu.Unlock()
		if cancel != nil && cancel() {
			l.waiting.Add(-1)
		}
	}
}

// resume starts loop, a scheduler's loop with a request slot, unless the
// lane stops: the slot is then kept aside (see [lane.unqueue]), or, once
// the lane gave back what it kept, refused: false, and the caller gives it
// back.
func (l *lane) resume(loop, release func()) bool {
	l.starting.RLock()
	defer l.starting.RUnlock()
	if !l.stopping.Load() {
		l.work.Go(loop)
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.spareDone {
		return false
	}
	l.spare = append(l.spare, release)
	return true
}

// giveBackSpare gives back the request slots handed to the lane's
// schedulers as it stopped, and any handed to them from now on at once.
func (l *lane) giveBackSpare() {
	l.mu.Lock()
	spare := l.spare
	l.spare, l.spareDone = nil, true
	l.mu.Unlock()
	for _, release := range spare {
		release()
	}
}

// subscriberOf returns the subscriber token of deliveries.<lane>.<subscriber>;
// false when the subject has other tokens than these three, or a token no
// subscriber id can be.
func subscriberOf(subject string) (string, bool) {
	_, id, ok := streams.DeliveryOf(subject)
	return id, ok && subscribers.ValidateID(id) == nil
}
