package testrequest

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/sourcegraph/conc"

	"github.com/relay-dev/relay/internal/deliver"
	"github.com/relay-dev/relay/internal/service"
	"github.com/relay-dev/relay/internal/subscribers"
)

// MaxConcurrent bounds the test requests one relay makes at once: a test
// is a person's, one at a time, and a script looping on `relay sub test`
// must not open connections without end beside the deliveries. A request
// beyond it is answered at once that the relay is busy.
const MaxConcurrent = 16

// syncWait bounds how long a relay waits for its view of the subscribers
// to catch up with the bucket before it reads the subscriber to test (a
// `relay sub add` just before the test is then seen); past it, it tests
// with the view it has, as the fan-out does.
const syncWait = 2 * time.Second

// Config is what a [Responder] answers with: the relay's own connection,
// view of the subscribers and HTTP client, the very ones its lanes deliver
// with.
type Config struct {
	// Conn is the connection [Subject] is subscribed on and answered from:
	// the relay's service connection, whose user may publish to inboxes
	// only (see package service).
	Conn *nats.Conn
	// Subscribers is the relay's live view of relay_subscribers.
	Subscribers *subscribers.Live
	// Client sends the request, with the relay's SSRF guard, egress proxy
	// and connections.
	Client *deliver.Client
	// Relay names the relay in its answers; "" is [Name].
	Relay string
	// Logger gets a line for every test request made (nil: none).
	Logger *slog.Logger
	// Now is the clock the request is signed by (nil: time.Now).
	Now func() time.Time
}

// flushWait bounds how long Start waits for the server to confirm the
// subscription.
const flushWait = 5 * time.Second

// Responder answers test requests on [Subject] for one relay: see [Start].
type Responder struct {
	cfg  Config
	sub  *nats.Subscription
	msgs chan *nats.Msg
}

// Start subscribes to [Subject] in the queue group [Queue] and returns once
// the server has the subscription (or flushWait has passed), so that a
// `relay sub test` run after the relay says it runs finds it; [Responder.Run]
// answers. It returns an error only when it cannot subscribe.
//
// A subscription NATS refuses this relay's user is reported to the
// connection's error handler, as every refusal is, not here: the relay
// goes on delivering, and `relay sub test` finds no relay to answer.
func Start(cfg Config) (*Responder, error) {
	if cfg.Conn == nil || cfg.Subscribers == nil || cfg.Client == nil {
		return nil, fmt.Errorf("%w: Start needs a connection, a view of the subscribers and a client", ErrConfig)
	}
	if cfg.Relay == "" {
		cfg.Relay = Name()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	r := &Responder{cfg: cfg, msgs: make(chan *nats.Msg, MaxConcurrent)}
	var err error
	if r.sub, err = cfg.Conn.ChanQueueSubscribe(Subject, Queue, r.msgs); err != nil {
		return nil, fmt.Errorf("subscribing to %s: %w", Subject, err)
	}
	// Not confirmed in time (NATS away for a moment), the subscription
	// still stands, and is made again on every reconnect.
	_ = cfg.Conn.FlushTimeout(flushWait)
	return r, nil
}

// Run answers test requests, each on a goroutine of its own (at most
// [MaxConcurrent] at once), until ctx ends; then it unsubscribes, answers
// what came before that it had not taken, cancels the requests in flight
// (each still answered, the cancellation its error) and returns once every
// one has been answered.
func (r *Responder) Run(ctx context.Context) {
	var inFlight conc.WaitGroup
	slots := make(chan struct{}, MaxConcurrent)
	for {
		select {
		case <-ctx.Done():
			_ = r.sub.Unsubscribe()
			for stopped := false; !stopped; {
				select {
				case m := <-r.msgs:
					r.cfg.respond(m, Answer{Error: "this relay is stopping; ask again"})
				default:
					stopped = true
				}
			}
			inFlight.Wait()
			return
		case m := <-r.msgs:
			if err := service.CheckReply(m.Reply); err != nil {
				// Not asked from an inbox: nobody may get the answer, so
				// the request is not made.
				r.cfg.Logger.Warn("relay sub test: request ignored", "err", err)
				continue
			}
			select {
			case slots <- struct{}{}:
				inFlight.Go(func() {
					defer func() { <-slots }()
					r.cfg.respond(m, r.cfg.answer(ctx, m.Data))
				})
			default:
				r.cfg.respond(m, Answer{Error: fmt.Sprintf("this relay is making %d test requests already; try again", MaxConcurrent)})
			}
		}
	}
}

// respond sends a on m's inbox, and nowhere else ([service.Respond]). An
// asker that gave up is no longer there, which is no error of the relay's.
func (cfg Config) respond(m *nats.Msg, a Answer) {
	a.Relay = cfg.Relay
	data, err := json.Marshal(a)
	if err == nil {
		err = service.Respond(m, data)
	}
	if err != nil {
		cfg.Logger.Warn("relay sub test: answering", "subscriber", a.Subscriber, "err", err)
	}
}

// answer makes the test request data asks for and says what came back.
func (cfg Config) answer(ctx context.Context, data []byte) Answer {
	var req Request
	if err := json.Unmarshal(data, &req); err != nil {
		return Answer{Error: fmt.Sprintf("%s: not a test request: %v", ErrInvalid, err)}
	}
	if err := req.Check(); err != nil {
		return Answer{Subscriber: req.Subscriber, Error: err.Error()}
	}
	syncCtx, cancel := context.WithTimeout(ctx, syncWait)
	err := cfg.Subscribers.Sync(syncCtx)
	cancel()
	if err != nil && ctx.Err() == nil {
		cfg.Logger.Warn("relay sub test: the view of the subscribers may be behind the bucket; testing with it", "subscriber", req.Subscriber, "err", err)
	}
	sub, ok := cfg.Subscribers.Lookup(req.Subscriber)
	if !ok {
		return Answer{Subscriber: req.Subscriber, NotFound: true, Error: fmt.Sprintf("%s: %s", subscribers.ErrNotFound, req.Subscriber)}
	}
	id := NewWebhookID()
	r, err := sub.Request(id, req.body(), "", cfg.Now())
	if err != nil {
		return Answer{Subscriber: req.Subscriber, Error: fmt.Sprintf("building the request: %v", err)}
	}
	r.Inspect = true
	out := cfg.Client.Send(ctx, r)
	a := answerOf(sub.ID, id, out)
	if len(a.Body) > MaxBodyCut {
		a.Body, a.BodyCut = a.Body[:MaxBodyCut], true
	}
	attrs := []any{"subscriber", sub.ID, "webhook_id", id, "status", out.Status, "outcome", a.Outcome, "took", out.Duration}
	if out.Err != nil {
		attrs = append(attrs, "err", out.Err)
	}
	cfg.Logger.Info("relay sub test: test request sent", attrs...)
	return a
}
