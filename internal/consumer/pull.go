package consumer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/streams"
)

// requestLife is how long after it was sent (the time spent handling its
// messages aside) a pull request is taken as ended though the server said
// nothing: the server ends it after MaxWait.
const requestLife = MaxWait + MaxWait/2

// lateLogEvery is how often, at most, one pull loop logs that it gave up
// on requests the server did not end in time.
const lateLogEvery = 10 * time.Second

// pullRequest is the body of a JetStream pull request
// ($JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>).
type pullRequest struct {
	Batch    int           `json:"batch"`
	MaxBytes int           `json:"max_bytes"`
	Expires  time.Duration `json:"expires"`
}

// PullBytes bounds the bytes one pull request may bring. A loop has at most
// two requests out, so a relay's pulls have at most about 2 MiB per consumer
// on their way from the server (36 MiB for the default 16 lanes, the
// fan-out and the retry mover), well under the 64 MiB a nats-server lets
// wait for a client by default (max_pending) before it cuts it off as a
// slow consumer. Bounded by count alone, a lane's batch of 16 KiB copies
// was 4 MiB, and when the relay's host lagged in reading, the server cut
// the connection: every ack sent meanwhile was lost and its delivery was
// sent twice.
const PullBytes = 1 << 20

// pullBytes is the max_bytes of a pull request on nc: PullBytes, or more
// when the server allows larger messages, since a request whose max_bytes
// is smaller than the next message brings nothing (the server ends it at
// once) and the loop would never get past it.
func pullBytes(nc *nats.Conn) int {
	return max(PullBytes, int(nc.MaxPayload())+messageOverhead)
}

// messageOverhead is more than the subject and the store's framing add to a
// message's headers and body as the server counts it against max_bytes.
const messageOverhead = 64 << 10

// puller is one pull loop: its inbox, which lives as long as the loop, and
// the pull requests it has out. Each request has a reply subject of its own
// under the inbox (<inbox>.<n>): the server's word that a request ended
// comes on that subject, so a late one, about a request the loop had given
// up on, is known for what it is and ends no other. (The messages come with
// their stream subjects, and are counted against the requests out as a
// whole.)
type puller struct {
	nc    *nats.Conn
	sub   *nats.Subscription
	queue *arrivals
	inbox string
	// next numbers the requests' reply subjects.
	next    uint64
	subject string
	body    []byte
	name    string
	batch   int
	// life is requestLife, but in tests.
	life time.Duration

	// out lists the pull requests not known to have ended, oldest first.
	out []request
	// lost holds the requests given up on without a word from the server,
	// by reply subject, with when: the server may still be filling them,
	// so a stopping loop reads on until they end (see [puller.drain]).
	lost map[string]time.Time
	// gaveUp is when a request was last given up on. What such a request
	// brings is counted against the requests out, so for a while after it
	// the loop may take a request as filled that the server still holds.
	gaveUp time.Time
	// credit is how many messages the requests out may still bring.
	credit int
	// handling is the time spent in handle so far.
	handling time.Duration
}

// request is one pull request out.
type request struct {
	reply string
	sent  time.Time
	// handling is the puller's handling when it was sent: the time spent
	// handling messages since does not count against its life.
	handling time.Duration
}

func newPuller(nc *nats.Conn, stream, name string, batch int) (*puller, error) {
	inbox := nc.NewInbox()
	queue := newArrivals()
	// A handler of its own, not a synchronous subscription: it stamps each
	// message as the client reads it, before it waits its turn behind the
	// loop's handler (see [arrivals]).
	sub, err := nc.Subscribe(inbox+".*", queue.push)
	if err != nil {
		return nil, fmt.Errorf("pulling from %s: %w", name, err)
	}
	// What arrives is bounded by the requests out (a few batches): the
	// client must never drop it as a slow consumer while a handler is busy.
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("pulling from %s: %w", name, err)
	}
	body, err := json.Marshal(pullRequest{Batch: batch, MaxBytes: pullBytes(nc), Expires: MaxWait})
	if err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("pulling from %s: %w", name, err)
	}
	return &puller{
		nc: nc, sub: sub, queue: queue, inbox: inbox, body: body, name: name, batch: batch, life: requestLife,
		lost:    make(map[string]time.Time),
		subject: "$JS.API.CONSUMER.MSG.NEXT." + stream + "." + name,
	}, nil
}

func (p *puller) close() { _ = p.sub.Unsubscribe() }

// run is [Pull]'s loop.
func (p *puller) run(ctx context.Context, log *slog.Logger, handle func(jetstream.Msg)) error {
	failures := 0
	// late counts the requests given up on in a row: one is a busy
	// server's or host's moment, said at Info; more in a row are
	// worth a warning. A loop says so at most once per lateLogEvery,
	// with how many it gave up on since: on a starved host every pull
	// loop gave up several times a second, and a line each time kept
	// the loops waiting on the log.
	late, unsaid := 0, 0
	var said time.Time
	for {
		if ctx.Err() == nil && p.wantMore() {
			if err := p.send(p.body); err != nil {
				return err
			}
		}
		if len(p.out) == 0 {
			p.drain(handle)
			return nil
		}
		msg, at, err := p.queue.next(p.untilOldestEnds())
		if errors.Is(err, nats.ErrTimeout) {
			if p.oldestEnded() {
				// The server neither filled nor ended it in time (the time
				// spent handling aside): it had lost it, or this process got
				// no CPU for a while. Anything it still sends arrives here.
				level := slog.LevelInfo
				if late++; late > 1 {
					level = slog.LevelWarn
				}
				if unsaid++; said.IsZero() || time.Since(said) >= lateLogEvery {
					log.Log(ctx, level, "pull request not ended by the server in time, pulling again",
						"consumer", p.name, "in_a_row", late, "given_up", unsaid)
					said, unsaid = time.Now(), 0
				}
				p.giveUp()
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("pulling from %s: %w", p.name, err)
		}
		late = 0
		if isStatus(msg) {
			err := p.ended(msg)
			if err == nil {
				failures = 0
				continue
			}
			if errors.Is(err, jetstream.ErrConsumerDeleted) {
				return fmt.Errorf("pulling from %s: %w", p.name, err)
			}
			if failures++; failures >= 3 {
				return fmt.Errorf("pulling from %s: %w", p.name, err)
			}
			log.Warn("pull ended with an error, pulling again", "consumer", p.name, "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(restartDelay):
			}
			continue
		}
		failures = 0
		p.received()
		p.handle(msg, at, handle)
	}
}

// send sends a pull request with body, on a reply subject of its own, and
// counts it out.
func (p *puller) send(body []byte) error {
	p.next++
	reply := p.inbox + "." + strconv.FormatUint(p.next, 10)
	if err := p.nc.PublishRequest(p.subject, reply, body); err != nil {
		return fmt.Errorf("pulling from %s: %w", p.name, err)
	}
	p.out = append(p.out, request{reply: reply, sent: time.Now(), handling: p.handling})
	p.credit += p.batch
	return nil
}

func (p *puller) handle(msg *nats.Msg, at time.Time, handle func(jetstream.Msg)) {
	start := time.Now()
	handle(&message{msg: msg, nc: p.nc, received: at})
	p.handling += time.Since(start)
}

// wantMore reports whether to send a pull request now: none is out, or the
// one out has brought half its batch (the next one then waits on the
// server while the rest arrives).
func (p *puller) wantMore() bool {
	return len(p.out) == 0 || (len(p.out) == 1 && p.credit <= p.batch/2)
}

// untilOldestEnds is how long the oldest request out may still live.
func (p *puller) untilOldestEnds() time.Duration {
	r := p.out[0]
	return max(0, p.life-(time.Since(r.sent)-(p.handling-r.handling)))
}

func (p *puller) oldestEnded() bool { return p.untilOldestEnds() <= 0 }

// end forgets the i-th request out, and what it could still bring beyond
// the batches of the others.
func (p *puller) end(i int) {
	p.out = append(p.out[:i], p.out[i+1:]...)
	p.credit = min(p.credit, len(p.out)*p.batch)
}

// find returns the index of the request out with this reply subject, or -1
// for one that is not out (ended already, or given up on).
func (p *puller) find(reply string) int {
	for i, r := range p.out {
		if r.reply == reply {
			return i
		}
	}
	return -1
}

// giveUp ends the oldest request out without a word from the server, and
// keeps it among the lost for a while.
func (p *puller) giveUp() {
	now := time.Now()
	for reply, at := range p.lost {
		if now.Sub(at) > lostFor {
			delete(p.lost, reply)
		}
	}
	p.lost[p.out[0].reply] = now
	p.gaveUp = now
	p.end(0)
}

// lostFor is how long a request given up on is remembered: far longer than
// a server that received it late would take to end it.
const lostFor = 30 * time.Second

// drain handles, once the last request out has ended as the loop stops,
// what is already in the inbox, and what the requests given up on still
// bring until the server ends them (at most requestLife from now): a
// message the server sends to an inbox dropped would wait out its ack wait.
// Soon after a request was given up on, the count of what the others may
// still bring is not to be trusted (see [puller.gaveUp]): the loop then reads
// on for requestLife, by when every request it sent has ended, whatever the
// server says of the lost ones.
func (p *puller) drain(handle func(jetstream.Msg)) {
	now := time.Now()
	until := now.Add(requestLife)
	unsure := !p.gaveUp.IsZero() && now.Sub(p.gaveUp) < lostFor+requestLife
	for {
		wait := time.Duration(0)
		if unsure || len(p.lost) > 0 {
			wait = max(0, time.Until(until))
		}
		msg, at, err := p.queue.next(wait)
		if err != nil {
			return
		}
		if isStatus(msg) {
			delete(p.lost, msg.Subject)
			continue
		}
		p.handle(msg, at, handle)
	}
}

// received counts one message against the requests out. The server takes
// its waiting requests in turns, so which one it filled is not known: the
// oldest is taken as filled once the credit left fits in the others. A
// guess wrong either way costs at most an extra request, or a request
// waited for until its life ends.
func (p *puller) received() {
	p.credit = max(0, p.credit-1)
	for len(p.out) > 0 && p.credit <= (len(p.out)-1)*p.batch {
		p.end(0)
	}
}

// ended handles a status message: the end of a request (nil, or an error
// to report), or a heartbeat. The end of a request that is not out any more
// changes nothing but an error's count.
func (p *puller) ended(msg *nats.Msg) error {
	status, desc := msg.Header.Get(streams.HeaderStatus), msg.Header.Get(streams.HeaderDescription)
	var err error
	switch status {
	case "100": // a heartbeat or flow control: none is asked for
		return nil
	case "408", "404": // the request expired, or found nothing
	case "409":
		switch desc {
		case "Consumer Deleted":
			return jetstream.ErrConsumerDeleted
		case "Exceeded MaxWaiting", "Leadership Change", "Server Shutdown", "Batch Completed",
			"Message Size Exceeds MaxBytes":
			// The request ended; the next goes to whoever leads now.
		default:
			err = fmt.Errorf("status %s %s", status, desc)
		}
	default: // 503: no consumer (or no JetStream) answers; 400: refused
		err = fmt.Errorf("status %s %s", status, desc)
	}
	i := p.find(msg.Subject)
	if i < 0 {
		delete(p.lost, msg.Subject)
		return err
	}
	if n, perr := strconv.Atoi(msg.Header.Get("Nats-Pending-Messages")); perr == nil {
		p.credit = max(0, p.credit-n)
	}
	p.end(i)
	return err
}

// isStatus reports whether msg is the server's word about a pull request
// rather than a message of the stream. Only the server's own words come
// without a reply subject: a stream's message always has one to ack, even an
// empty event published with a Status header of its own.
func isStatus(msg *nats.Msg) bool {
	return msg.Reply == "" && msg.Header.Get(streams.HeaderStatus) != ""
}

// arrivals is a pull loop's inbox as the client reads it: every message in
// the order it came, with the time it came. JetStream starts a message's
// ack wait as it sends it, so the time a message then spends behind others
// (while the loop's handler is busy with them) is part of its ack wait: a
// synchronous subscription's queue would hide it, and a lane would count
// its message's time in relay memory from too late. Unbounded, as the
// subscription's own pending limits are: what arrives is bounded by the
// requests out.
type arrivals struct {
	mu   sync.Mutex
	msgs []arrival
	// ready has a token while msgs may hold something.
	ready chan struct{}
}

// arrival is one message of a pull loop's inbox and when the client read it.
type arrival struct {
	msg *nats.Msg
	at  time.Time
}

func newArrivals() *arrivals { return &arrivals{ready: make(chan struct{}, 1)} }

// push is the subscription's handler: it only stamps and queues, so it
// keeps up with the connection whatever the loop's handler does.
func (q *arrivals) push(msg *nats.Msg) {
	at := time.Now()
	q.mu.Lock()
	q.msgs = append(q.msgs, arrival{msg: msg, at: at})
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// next returns the oldest message not returned yet and when it came,
// waiting at most wait for one; nats.ErrTimeout when none came.
func (q *arrivals) next(wait time.Duration) (*nats.Msg, time.Time, error) {
	var timeout <-chan time.Time
	for {
		q.mu.Lock()
		if len(q.msgs) > 0 {
			a := q.msgs[0]
			q.msgs[0] = arrival{}
			q.msgs = q.msgs[1:]
			if len(q.msgs) == 0 {
				q.msgs = nil // the array goes with the last of a burst
			}
			q.mu.Unlock()
			return a.msg, a.at, nil
		}
		q.mu.Unlock()
		if wait <= 0 {
			return nil, time.Time{}, nats.ErrTimeout
		}
		if timeout == nil {
			t := time.NewTimer(wait)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-q.ready:
		case <-timeout:
			return nil, time.Time{}, nats.ErrTimeout
		}
	}
}
