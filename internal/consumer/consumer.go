// Package consumer runs the relay's durable pull consumers that are read in
// order by one loop: the fan-out on EVENTS and the retry mover on RETRIES.
//
// Every relay on a cluster shares each of these consumers, and a consumer can
// fail under a running relay (deleted by an operator, a leader lost), so the
// loop re-creates it and goes on rather than leave the relay half alive.
// On shutdown it drains: the messages the client has already buffered are
// handled, not left to wait out their ack wait.
package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// restartDelay is how long a failed consumer waits before it is re-created.
const restartDelay = time.Second

// Run creates or updates the durable consumer cfg on stream and calls handle
// with every message, one at a time, until ctx is cancelled; then it returns
// nil. batch is how many messages it pulls at once.
func Run(ctx context.Context, js jetstream.JetStream, stream string, cfg jetstream.ConsumerConfig, batch int, log *slog.Logger, handle func(jetstream.Msg)) error {
	for {
		err := run(ctx, js, stream, cfg, batch, handle)
		if ctx.Err() != nil {
			return nil
		}
		log.Error("consuming, starting again", "stream", stream, "consumer", cfg.Durable, "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(restartDelay):
		}
	}
}

func run(ctx context.Context, js jetstream.JetStream, stream string, cfg jetstream.ConsumerConfig, batch int, handle func(jetstream.Msg)) error {
	cons, err := js.CreateOrUpdateConsumer(ctx, stream, cfg)
	if err != nil {
		return fmt.Errorf("creating consumer %s: %w", cfg.Durable, err)
	}
	iter, err := cons.Messages(jetstream.PullMaxMessages(batch))
	if err != nil {
		return fmt.Errorf("pulling from %s: %w", cfg.Durable, err)
	}
	stop := context.AfterFunc(ctx, iter.Drain)
	defer stop()
	for {
		msg, err := iter.Next()
		if err != nil {
			iter.Stop()
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) && ctx.Err() != nil {
				return nil
			}
			return err
		}
		handle(msg)
	}
}
