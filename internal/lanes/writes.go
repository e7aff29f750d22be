package lanes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sourcegraph/conc"

	"github.com/relay-dev/relay/internal/overflow"
	"github.com/relay-dev/relay/streams"
)

// The writes the lanes make on a delivery's way (an overflow put, a refill,
// a park or schedule in RETRIES, a dead letter) each have a JetStream context
// and a bounded window of their own. A server slow to answer then costs
// each kind of write its own window and never another's: a refill of a
// thousand copies cannot fill the window the overflow puts need, nor either
// of them the relay's shared context (the fan-out's). And no write is made
// on a lane's pull loop: an overflow put is queued for the lane's putter
// below, a park, a schedule or a dead letter runs in a goroutine of the lane,
// so a pull loop never waits on a PubAck, nor on a place in a window.

// renewed is a set of originals waiting on a write (a put, a schedule), by
// DELIVERIES sequence, that the lane's keep-alive rounds renew as they do
// held messages: a write that waits for its place or its PubAck on a slow
// server must not outlast its original's ack wait, or JetStream gives the
// original to another relay while its copy is being stored, and it is
// sent twice.
type renewed struct {
	mu   sync.Mutex
	msgs map[uint64]jetstream.Msg
}

func newRenewed() *renewed { return &renewed{msgs: make(map[uint64]jetstream.Msg)} }

// add renews msg from the next keep-alive round on.
func (r *renewed) add(seq uint64, msg jetstream.Msg) {
	r.mu.Lock()
	r.msgs[seq] = msg
	r.mu.Unlock()
}

// forget stops renewing msg: it was acked, handed back or let go. A later
// delivery of the same sequence, added since, is kept.
func (r *renewed) forget(seq uint64, msg jetstream.Msg) {
	r.mu.Lock()
	if r.msgs[seq] == msg {
		delete(r.msgs, seq)
	}
	r.mu.Unlock()
}

// list returns the messages renewed, for a keep-alive round.
func (r *renewed) list() []jetstream.Msg {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]jetstream.Msg, 0, len(r.msgs))
	for _, msg := range r.msgs {
		out = append(out, msg)
	}
	return out
}

// window bounds the writes of one kind in flight at once.
type window chan struct{}

// enter takes a place in the window, waiting for one; it fails once ctx
// ends.
func (w window) enter(ctx context.Context) error {
	select {
	case w <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("lanes: waiting to write: %w", ctx.Err())
	}
}

// leave gives the place back.
func (w window) leave() { <-w }

// writers are the JetStream contexts of the lanes' writes, and their
// windows, shared by every lane of one relay. Each context that publishes
// asynchronously subscribes once to its PubAcks; the subscription lasts as
// long as the connection, as the relay's own context's does.
type writers struct {
	// refill is the Refiller's context, its window refillWindow copies.
	refill jetstream.JetStream
	// put is the context of the overflow puts, its window putWindow.
	put jetstream.JetStream
	// park stores parks and schedules in RETRIES, dead stores dead letters;
	// parks and deads bound how many of each are in flight, spills how
	// many spills of refused puts.
	park, dead           jetstream.JetStream
	parks, deads, spills window
}

func newWriters(js jetstream.JetStream) (*writers, error) {
	nc := js.Conn()
	refill, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(refillWindow),
		jetstream.WithPublishAsyncTimeout(refillAckWait))
	if err != nil {
		return nil, fmt.Errorf("lanes: %w", err)
	}
	put, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(putWindow),
		jetstream.WithPublishAsyncTimeout(putAckWait))
	if err != nil {
		return nil, fmt.Errorf("lanes: %w", err)
	}
	park, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("lanes: %w", err)
	}
	dead, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("lanes: %w", err)
	}
	return &writers{
		refill: refill, put: put, park: park, dead: dead,
		parks: make(window, settleWindow), deads: make(window, settleWindow), spills: make(window, settleWindow),
	}, nil
}

// put is one delivery on its way to its subscriber's overflow.
type put struct {
	l      *lane
	d      delivery
	id     string
	stored func()
}

// putting is a put sent, waiting for its PubAck until until, with the
// body and headers it was written with (a spill writes them again).
type putting struct {
	put
	f      jetstream.PubAckFuture
	until  time.Time
	body   []byte
	header nats.Header
}

// putter makes the overflow puts of one lane, apart from its pull loop: one
// goroutine sends them (waiting, when the relay's window is full, for a
// place in it), another waits for their PubAcks, in the order they were
// sent (one connection, one stream: the order they come in), and acks each
// original once its copy is stored. The lane owns it: it starts with the
// lane and stops once the lane's own goroutines have.
type putter struct {
	js    jetstream.JetStream
	log   *slog.Logger
	queue chan put
	sent  chan putting
	done  chan struct{}
	work  conc.WaitGroup
	// spills bounds the spills waiting for their PubAck at once, over all
	// lanes (the writers' window).
	spills window
	// pending holds the originals of the puts queued or waiting for their
	// PubAck, which the lane's keep-alive rounds renew.
	pending *renewed
}

func newPutter(js jetstream.JetStream, spills window, log *slog.Logger) *putter {
	p := &putter{js: js, log: log, queue: make(chan put, putQueue), sent: make(chan putting, putWindow),
		done: make(chan struct{}), pending: newRenewed(), spills: spills}
	p.work.Go(p.sendLoop)
	p.work.Go(p.ackLoop)
	return p
}

// offer queues a put without waiting; false: the queue is full. The put's
// original joins the messages the keep-alive rounds renew before it is
// stamped as kept, so a round that began after the stamp lists it (see
// [lane.renewedAt]).
func (p *putter) offer(pt put) bool {
	p.pending.add(pt.d.seq, pt.d.msg)
	pt.l.stamp(&pt.d)
	select {
	case p.queue <- pt:
		return true
	default:
		p.forget(pt)
		return false
	}
}

// forget takes a put's original out of the renewed messages: it was acked,
// handed back or let go.
func (p *putter) forget(pt put) { p.pending.forget(pt.d.seq, pt.d.msg) }

// stop makes the puts queued, waits for their PubAcks (each within
// putAckWait) and for the spills of those a full DELIVERIES refused, and
// returns once both loops and the spills have ended.
func (p *putter) stop() {
	close(p.done)
	p.work.Wait()
}

func (p *putter) sendLoop() {
	defer close(p.sent)
	for {
		select {
		case pt := <-p.queue:
			p.send(pt, false)
		case <-p.done:
			for {
				select {
				case pt := <-p.queue:
					p.send(pt, true)
				default:
					return
				}
			}
		}
	}
}

// send sends one put once there is a place in the window (PutAsync waits
// 200 ms for one, then the delivery is looked at again); a delivery that
// stopped being this relay's meanwhile (see [lane.alive]) is let go. A
// stopping relay does not wait for a place: it hands the delivery back.
func (p *putter) send(pt put, stopping bool) {
	for {
		if !pt.l.alive(pt.d) {
			p.forget(pt)
			pt.l.letGo(pt.d, pt.id)
			return
		}
		body, h, err := pt.l.env.whole(context.WithoutCancel(pt.l.ctx()), pt.d.msg)
		if err != nil {
			p.forget(pt)
			if errors.Is(err, errBodyGone) {
				pt.l.deadLetter(context.WithoutCancel(pt.l.ctx()), pt.d, pt.id, bodyLost(err))
				return
			}
			p.log.Warn("lanes: moving a delivery to overflow", "subscriber", pt.id, "err", err)
			pt.l.handBackIn(pt.d, settleRetry)
			return
		}
		f, err := overflow.PutAsync(p.js, pt.id, body, h, pt.d.seq)
		if errors.Is(err, jetstream.ErrTooManyStalledMsgs) && !stopping {
			continue
		}
		switch {
		case err != nil && stopping:
			p.forget(pt)
			pt.l.handBack(pt.d.msg)
			return
		case err != nil:
			p.forget(pt)
			p.log.Warn("lanes: moving a delivery to overflow", "subscriber", pt.id, "err", err)
			pt.l.handBackIn(pt.d, settleRetry)
			return
		}
		p.sent <- putting{put: pt, f: f, until: time.Now().Add(putAckWait), body: body, header: h}
		return
	}
}

// spill settles a put that a full DELIVERIES refused: the delivery goes
// to RETRIES instead (see overflow.SpillAsync), and its original is acked
// once it is stored there, which frees its room; else it is handed back.
// It runs apart from the loop that settles the puts in order, at most
// settleWindow at once over all lanes: a full stream refuses puts by the
// hundred, and their spills one after another would hold the others'
// settling past their wait.
func (p *putter) spill(pt putting) {
	p.spills <- struct{}{}
	p.work.Go(func() {
		defer func() { <-p.spills }()
		defer p.forget(pt.put)
		f, err := overflow.SpillAsync(p.js, pt.id, pt.body, pt.header, pt.d.seq)
		if err == nil {
			var answered bool
			if answered, err = awaitAck(f, time.Now().Add(putAckWait)); answered && err == nil {
				pt.l.ack(pt.d, pt.id, Parked)
				return
			}
			if !answered {
				err = errors.New("no PubAck")
			}
		}
		p.log.Warn("lanes: DELIVERIES is full, and moving a delivery to RETRIES failed", "subscriber", pt.id, "err", err)
		pt.l.handBackIn(pt.d, settleRetry)
	})
}

// awaitAck waits for f's PubAck until until (real time, as every wait
// for the server's answer); answered is false when none
// came. An answer already there is taken, however late the caller looks:
// a settling loop that fell behind must not take a stored copy for one
// that got no answer.
func awaitAck(f jetstream.PubAckFuture, until time.Time) (answered bool, err error) {
	select {
	case <-f.Ok():
		return true, nil
	case err := <-f.Err():
		return true, err
	default:
	}
	timeout := time.NewTimer(time.Until(until))
	defer timeout.Stop()
	select {
	case <-f.Ok():
		return true, nil
	case err := <-f.Err():
		return true, err
	case <-timeout.C:
		return false, nil
	}
}

func (p *putter) ackLoop() {
	for pt := range p.sent {
		p.settle(pt)
	}
}

// settle acks the original of a put whose copy is stored, and hands back
// one whose copy the server refused or did not confirm in time: it comes
// again, and a copy stored after all deduplicates its next put.
func (p *putter) settle(pt putting) {
	answered, err := awaitAck(pt.f, pt.until)
	switch {
	case answered && err == nil:
		if pt.stored != nil {
			pt.stored()
		}
		pt.l.ack(pt.d, pt.id, InOverflow)
	case answered && streams.NoRoom(err):
		p.spill(pt) // forgets it once settled
		return
	case answered:
		p.log.Warn("lanes: moving a delivery to overflow", "subscriber", pt.id, "err", err)
		pt.l.handBackIn(pt.d, settleRetry)
	default:
		p.log.Warn("lanes: moving a delivery to overflow: no PubAck", "subscriber", pt.id)
		pt.l.handBackIn(pt.d, settleRetry)
	}
	p.forget(pt.put)
}
