package retry

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

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

// Move puts due deliveries back on DELIVERIES until ctx is cancelled.
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
	return consumer.Run(ctx, cfg.JS, streams.Retries, jetstream.ConsumerConfig{
		Durable:       MoverName,
		Description:   "relay: moves due retries back to DELIVERIES",
		FilterSubject: DuePrefix + ">",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       cfg.AckWait,
		MaxDeliver:    -1,
		MaxAckPending: 4096,
	}, 256, cfg.Logger, func(msg jetstream.Msg) { moveOne(context.WithoutCancel(ctx), cfg, msg) })
}

// moveOne republishes one due delivery on its subscriber's lane and acks it
// once the copy is stored. A subscriber this relay's view lacks goes to its
// shared lane, whose relay asks the bucket and holds or dead-letters it:
// nothing leaves RETRIES without a trace.
func moveOne(ctx context.Context, cfg MoverConfig, msg jetstream.Msg) {
	id := strings.TrimPrefix(msg.Subject(), DuePrefix)
	lane := subscribers.LaneFor(id, cfg.SharedLanes)
	if sub, ok := cfg.Subscribers.Get(id); ok {
		lane = sub.Lane(cfg.SharedLanes)
	}
	var seq uint64
	if md, err := msg.Metadata(); err == nil {
		seq = md.Sequence.Stream
	}
	out := &nats.Msg{Subject: "deliveries." + lane + "." + id, Header: streams.CopyHeader(msg.Headers(), 0), Data: msg.Data()}
	pubCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := cfg.JS.PublishMsg(pubCtx, out, jetstream.WithMsgID(movedID(msg.Headers(), seq))); err != nil {
		// DELIVERIES full (discard-new) or no leader: leave it due and try
		// again shortly; nothing is lost.
		cfg.Logger.Warn("retry: moving a due delivery", "subscriber", id, "err", err)
		_ = msg.NakWithDelay(time.Second)
		return
	}
	if err := msg.Ack(); err != nil {
		cfg.Logger.Warn("retry: ack", "err", err)
	}
}
