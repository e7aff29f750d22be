package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/internal/fanout"
	"github.com/relay-dev/relay/streams"
)

// ---- throughput: the two-hop loop, the baseline with relay's second hop ----

// The two-hop loop's streams and durable consumers, on a server of its own
// as the baseline's are: HOPA takes the events (relay's EVENTS), HOPB one
// copy of each (relay's DELIVERIES, for one subscriber).
const (
	hopAStream   = "HOPA"
	hopASubject  = "hopa.x"
	hopAConsumer = "hop"
	hopBStream   = "HOPB"
	hopBSubject  = "hopb.x"
	hopBConsumer = "drain"
	// hopSubscriber ends each copy's Nats-Msg-Id, as a subscriber's id ends
	// the fan-out's (<event id>.<subscriber id>).
	hopSubscriber = "hop"
)

// The hop loop's windows, relay's fan-out's (internal/fanout), so that the
// second hop costs here what it costs there: the async-publish window and
// its timeout, the events waiting for their copies' PubAcks, the batch it
// pulls and the consumer's MaxAckPending.
const (
	hopPublishWindow  = 4096
	hopPublishTimeout = 10 * time.Second
	hopAckQueue       = 2048
	hopPullBatch      = 512
	hopMaxAckPending  = 8192
)

// twoHopOne is the baseline with one more JetStream hop, the one relay's
// fan-out makes: the events are published to HOPA; a hop loop on a durable
// pull consumer of HOPA republishes each one to HOPB with an async PubAck
// and acks it once that copy is stored; the baseline's own signed loop
// drains HOPB. It is the floor of any design that keeps a durable copy per
// subscriber: whatever relay does beyond it (subscriber matching, lanes,
// rate limits, retries, a process of its own) is what the rest of the gap
// to the baseline is made of.
func (e *env) twoHopOne(ctx context.Context, i int, rcv *receiver, url string, key []byte) (burstRun, error) {
	return e.loopOne(ctx, i, twoHopSpec(fmt.Sprintf("hop%02d", i), "two-hop deliveries", fmt.Sprintf("%shop%02d-", eventPrefix, i)), rcv, url, key)
}

// twoHopSpec is the two-hop loop as a loopSpec: the stack and subscriber
// id, what its wait is called and the prefix of its run's event ids.
func twoHopSpec(id, what, prefix string) loopSpec {
	return loopSpec{
		id: id, what: what, subject: hopASubject, prefix: prefix,
		setup: func(ctx context.Context, s *stack) (jetstream.Consumer, []func(context.Context) error, error) {
			a, b, err := twoHopStreams()
			if err != nil {
				return nil, nil, err
			}
			for _, cfg := range []jetstream.StreamConfig{a, b} {
				if _, err := s.js.CreateStream(ctx, cfg); err != nil {
					return nil, nil, err
				}
			}
			// The fan-out consumer's settings (internal/fanout's Run), less
			// its description.
			hop, err := s.js.CreateOrUpdateConsumer(ctx, hopAStream, jetstream.ConsumerConfig{
				Durable: hopAConsumer, AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second,
				MaxDeliver: -1, MaxAckPending: hopMaxAckPending, DeliverPolicy: jetstream.DeliverAllPolicy,
			})
			if err != nil {
				return nil, nil, err
			}
			// The drain is the baseline's consumer, on HOPB.
			drain, err := s.js.CreateOrUpdateConsumer(ctx, hopBStream, jetstream.ConsumerConfig{
				Durable: hopBConsumer, AckPolicy: jetstream.AckExplicitPolicy,
			})
			if err != nil {
				return nil, nil, err
			}
			return drain, []func(context.Context) error{func(ctx context.Context) error {
				return hopLoop(ctx, s.nc, hop, hopBSubject)
			}}, nil
		},
	}
}

// twoHopStreams are HOPA and HOPB, with the settings of relay's own
// definitions (streams.Config) that bear on the cost of a message, so that
// the second hop here stores and dedupes as relay's does. Copied from
// EVENTS to HOPA and from DELIVERIES to HOPB: the retention (limits for
// EVENTS, work-queue for DELIVERIES, which deletes each copy once it is
// acked), the storage (file), the duplicate window (2 minutes, which every
// Nats-Msg-Id is checked against), the discard policy and the byte limit
// (DELIVERIES: 4 GiB, discard new). Not copied: the names and subjects,
// the description, EVENTS' max age and max message size and DELIVERIES'
// direct get, which a run of this size never reaches or uses.
func twoHopStreams() (a, b jetstream.StreamConfig, err error) {
	ev, err := streams.Config(streams.Events)
	if err != nil {
		return a, b, err
	}
	dl, err := streams.Config(streams.Deliveries)
	if err != nil {
		return a, b, err
	}
	a = jetstream.StreamConfig{
		Name: hopAStream, Subjects: []string{"hopa.>"},
		Retention: ev.Retention, Storage: ev.Storage, Duplicates: ev.Duplicates, Discard: ev.Discard, MaxBytes: ev.MaxBytes,
	}
	b = jetstream.StreamConfig{
		Name: hopBStream, Subjects: []string{"hopb.>"},
		Retention: dl.Retention, Storage: dl.Storage, Duplicates: dl.Duplicates, Discard: dl.Discard, MaxBytes: dl.MaxBytes,
	}
	return a, b, nil
}

// hopCopy is one source message whose copy is on its way, as the fan-out's
// pending is for an event with one subscriber.
type hopCopy struct {
	msg jetstream.Msg
	ack jetstream.PubAckFuture
}

// hopLoop is relay's fan-out for one subscriber, without the subscriber
// view: it pulls from cons and publishes a copy of each message to subject
// (its body, relay's copy headers, Nats-Msg-Id <event id>.hop) with an async
// PubAck on a JetStream context of its own, and a second goroutine acks the
// source messages in order, each once its copy's PubAck has arrived (NAKs
// it if the publish failed), until ctx is cancelled. It returns once every
// copy it started has been answered and its source acked.
func hopLoop(ctx context.Context, nc *nats.Conn, cons jetstream.Consumer, subject string) error {
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(hopPublishWindow),
		jetstream.WithPublishAsyncTimeout(hopPublishTimeout))
	if err != nil {
		return err
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(hopPullBatch))
	if err != nil {
		return err
	}
	stopped := make(chan struct{})
	defer close(stopped)
	go func() {
		select {
		case <-ctx.Done():
		case <-stopped:
		}
		it.Stop()
	}()
	copies := make(chan hopCopy, hopAckQueue)
	acked := make(chan struct{})
	go func() {
		defer close(acked)
		for c := range copies {
			select {
			case <-c.ack.Ok():
				_ = c.msg.Ack()
			case <-c.ack.Err():
				_ = c.msg.Nak()
			}
		}
	}()
	defer func() {
		close(copies)
		<-acked
	}()
	for {
		msg, err := it.Next()
		switch {
		case errors.Is(err, jetstream.ErrMsgIteratorClosed):
			return nil
		case errors.Is(err, jetstream.ErrNoHeartbeat):
			continue // the iterator sends a new pull request
		case err != nil:
			return err
		}
		md, err := msg.Metadata()
		if err != nil {
			return err
		}
		id := fanout.EventID(msg.Headers(), md.Sequence.Stream)
		m := &nats.Msg{
			Subject: subject,
			Header:  fanout.CopyHeader(msg.Headers(), id, fanout.EventType(msg.Subject()), md.Timestamp),
			Data:    msg.Data(),
		}
		f, err := fanout.PublishCopy(ctx, js, m, streams.CopyID(id, hopSubscriber))
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		select {
		case copies <- hopCopy{msg: msg, ack: f}:
		case <-ctx.Done():
			return nil
		}
	}
}
