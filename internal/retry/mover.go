package retry

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sourcegraph/conc"

	"github.com/relay-dev/relay/internal/consumer"
	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/streams"
)

// MoverName is the durable consumer on RETRIES that every relay shares.
const MoverName = "retries"

// ErrConfig is returned for a MoverConfig missing a required field.
var ErrConfig = errors.New("retry: invalid mover config")

// MoverConfig wires a Mover.
type MoverConfig struct {
	// JS is the JetStream context; required.
	JS jetstream.JetStream
	// Subscribers is the live subscriber view; required. A due delivery goes
	// to its subscriber's lane as it is now, so a subscriber moved to a
	// dedicated lane while a retry waited is found there.
	Subscribers *subscribers.Live
	// SharedLanes is --lanes; required.
	SharedLanes int
	// AckWait of the consumer. Defaults to 30s.
	AckWait time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// moveWindow is how many moved copies may await their PubAck at once: a
// retry storm (a subscriber back after an outage) moves thousands a second,
// and one round trip each would cap that at what one round trip allows.
const moveWindow = 1024

// The mover's consumer on retries.due.>.
const (
	// movePull is how many due copies one pull request asks for.
	movePull = 256
	// movePending is the mover's consumer's MaxAckPending: what it may
	// hold at once, four move windows, so that pulling goes on while a
	// full window waits for its PubAcks.
	movePending = 4 * moveWindow
	// movePubAckWait bounds the wait for a moved copy's PubAck: a lost one
	// is then an error (and the due copy is taken again), not a wait
	// without end.
	movePubAckWait = 10 * time.Second
)

// moving is a due delivery whose copy is on its way to DELIVERIES.
type moving struct {
	msg jetstream.Msg
	ack jetstream.PubAckFuture
	id  string
}

// Move puts due deliveries back on DELIVERIES until ctx is cancelled. Copies
// are published asynchronously, up to moveWindow at once, and each due
// message is acked only once its copy is stored.
func Move(ctx context.Context, cfg MoverConfig) error {
	if cfg.JS == nil || cfg.Subscribers == nil || cfg.SharedLanes <= 0 {
		return ErrConfig
	}
	if cfg.AckWait == 0 {
		cfg.AckWait = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	// Its own context, so that the async window is the mover's alone; the
	// timeout makes a lost PubAck an error instead of a wait without end.
	js, err := jetstream.New(cfg.JS.Conn(),
		jetstream.WithPublishAsyncMaxPending(moveWindow),
		jetstream.WithPublishAsyncTimeout(movePubAckWait))
	if err != nil {
		return err
	}
	moves := make(chan moving, moveWindow)
	var wg conc.WaitGroup
	wg.Go(func() { settleMoves(moves, cfg.Logger) })
	defer wg.Wait()
	defer close(moves)
	return consumer.Run(ctx, cfg.JS, streams.Retries, jetstream.ConsumerConfig{
		Durable:       MoverName,
		Description:   "relay: moves due retries back to DELIVERIES",
		FilterSubject: streams.RetryDuePrefix + ">",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       cfg.AckWait,
		MaxDeliver:    -1,
		MaxAckPending: movePending,
	}, movePull, cfg.Logger, func(msg jetstream.Msg) {
		if mv, ok := moveOne(js, cfg, msg); ok {
			moves <- mv
		}
	})
}

// moveOne starts the republish of one due delivery on its subscriber's
// lane. A subscriber this relay's view lacks goes to its shared lane, whose
// relay asks the bucket and holds or dead-letters it: nothing leaves RETRIES
// without a trace.
func moveOne(js jetstream.JetStream, cfg MoverConfig, msg jetstream.Msg) (moving, bool) {
	id := strings.TrimPrefix(msg.Subject(), streams.RetryDuePrefix)
	lane := subscribers.LaneFor(id, cfg.SharedLanes)
	if sub, ok := cfg.Subscribers.Get(id); ok {
		lane = sub.Lane(cfg.SharedLanes)
	}
	var seq uint64
	if md, err := msg.Metadata(); err == nil {
		seq = md.Sequence.Stream
	}
	h := streams.CopyHeader(msg.Headers(), 0)
	h.Del(streams.HeaderEventSeq) // what RETRIES holds carries its body
	out := &nats.Msg{Subject: streams.DeliverySubject(lane, id), Header: h, Data: msg.Data()}
	f, err := js.PublishMsgAsync(out, jetstream.WithMsgID(movedID(msg.Headers(), seq)))
	if err != nil {
		retryMove(msg, id, err, cfg.Logger)
		return moving{}, false
	}
	return moving{msg: msg, ack: f, id: id}, true
}

// settleMoves acks each due delivery once its copy is stored, or leaves it
// due to be moved again shortly.
func settleMoves(moves <-chan moving, log *slog.Logger) {
	for mv := range moves {
		select {
		case <-mv.ack.Ok():
			if err := mv.msg.Ack(); err != nil {
				log.Warn("retry: ack", "err", err)
			}
		case err := <-mv.ack.Err():
			retryMove(mv.msg, mv.id, err, log)
		}
	}
}

// retryMove leaves a due delivery whose copy was not stored (DELIVERIES
// full, discard-new, or no leader) due, to be tried again in a second;
// nothing is lost, and the copy's Nats-Msg-Id keeps a second try from
// storing it twice.
func retryMove(msg jetstream.Msg, id string, err error, log *slog.Logger) {
	log.Warn("retry: moving a due delivery", "subscriber", id, "err", err)
	_ = msg.NakWithDelay(time.Second)
}
