// Package consumer is the relay's one pull loop: the fan-out on EVENTS, the
// retry mover on RETRIES and every lane on DELIVERIES read their durable
// consumers through it.
//
// It pulls with a sequence of short pull requests, each of which the server
// ends after at most [MaxWait] (or the loop, a little later, if the server
// has forgotten it), all answered on one inbox that lives as long as the
// loop. No pull request lives long enough to be lost unnoticed: a consumer
// with messages pending is never left without a pull outstanding for more
// than about two seconds, whatever happened to the previous request, and a
// request that the server did not end in time is logged at warn. (A
// long-lived Consume kept its own count of the messages its pull requests
// still had to bring; when the server ended a request without the client
// seeing it, the count stayed up and no new request was sent until the
// heartbeat check gave up, 30 s later.)
//
// The inbox outlives each request on purpose. A Fetch has an inbox of its
// own and drops it once its own timer ends the request; when the process
// was starved of CPU, the server could still be filling that request, and
// every message it sent to the dropped inbox sat unacknowledged, held by
// nobody, for the consumer's whole ack wait: a lane stalled for a minute
// after a few seconds of load. Here a message that arrives after its
// request was given up is handled like any other.
//
// Every relay on a cluster shares each of these consumers, and a consumer
// can fail under a running relay (deleted by an operator, a leader lost), so
// [Run] re-creates it and goes on rather than leave the relay half alive. On
// shutdown the last pull request is let end and its messages handled, so
// nothing this relay was sent waits out its ack wait.
package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/streams"
)

// restartDelay is how long a failed consumer waits before it is re-created.
const restartDelay = time.Second

// MaxWait is how long one pull request waits on the server for messages.
// Short, so that a stopping relay has nothing on its way to it a second
// later, and a lost request is replaced at once.
const MaxWait = time.Second

// Ensure creates the durable consumer cfg on stream, or updates it when it
// exists with another definition. Every relay on a cluster ensures the same
// consumers as it starts: creating first, and asking again when a request
// goes unanswered, keeps two relays that start at once from leaving each
// other without a reply (see [streams.AskAgain]).
func Ensure(ctx context.Context, js jetstream.JetStream, stream string, cfg jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	var cons jetstream.Consumer
	err := streams.AskAgain(ctx, func(ctx context.Context) error {
		var err error
		cons, err = js.CreateConsumer(ctx, stream, cfg)
		if errors.Is(err, jetstream.ErrConsumerExists) {
			cons, err = js.UpdateConsumer(ctx, stream, cfg)
		}
		return err
	})
	return cons, err
}

// Run creates or updates the durable consumer cfg on stream and calls handle
// with every message, one at a time, until ctx is cancelled; then it returns
// nil. batch is how many messages it pulls at once.
func Run(ctx context.Context, js jetstream.JetStream, stream string, cfg jetstream.ConsumerConfig, batch int, log *slog.Logger, handle func(jetstream.Msg)) error {
	for {
		cons, err := Ensure(ctx, js, stream, cfg)
		if err != nil {
			err = fmt.Errorf("creating consumer %s: %w", cfg.Durable, err)
		} else {
			err = Pull(ctx, js, cons, batch, log, handle)
		}
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

// Pull pulls from cons and calls handle with every message until ctx is
// cancelled (it returns nil once the last pull request has ended and its
// messages have been handled) or the consumer fails (it returns why: the
// caller re-creates it). batch is how many messages one pull request asks
// for; the next request goes out once half of them have arrived, so the
// server always has one waiting while messages are pending.
func Pull(ctx context.Context, js jetstream.JetStream, cons jetstream.Consumer, batch int, log *slog.Logger, handle func(jetstream.Msg)) error {
	info := cons.CachedInfo()
	p, err := newPuller(js.Conn(), info.Stream, info.Name, batch)
	if err != nil {
		return err
	}
	defer p.close()
	return p.run(ctx, log, handle)
}
