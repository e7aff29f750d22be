package lanes

import (
	"context"
	"net/http"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/internal/deliver"
	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/streams"
)

// request builds the HTTP delivery of one DELIVERIES message.
func request(msg jetstream.Msg, sub subscribers.Subscriber) (deliver.Request, error) {
	h := msg.Headers()
	keys, err := sub.Keys()
	if err != nil {
		return deliver.Request{}, err
	}
	id := h.Get(streams.HeaderEventID)
	if id == "" {
		// A message published on DELIVERIES by hand: its stream sequence is
		// the most stable id it has.
		if md, err := msg.Metadata(); err == nil {
			id = "DELIVERIES-" + strconv.FormatUint(md.Sequence.Stream, 10)
		}
	}
	var header http.Header
	if len(sub.Headers) > 0 {
		header = make(http.Header, len(sub.Headers))
		for k, v := range sub.Headers {
			header.Set(k, v)
		}
	}
	return deliver.Request{
		URL:         sub.URL,
		ID:          id,
		Body:        msg.Data(),
		ContentType: streams.HeaderValue(h, streams.HeaderContentType),
		Header:      header,
		Keys:        keys,
		Timeout:     sub.Timeout.Std(),
	}, nil
}

// send makes one attempt and settles the message by its outcome.
func (l *lane) send(ctx context.Context, msg jetstream.Msg, sub subscribers.Subscriber) {
	req, err := request(msg, sub)
	if err != nil {
		l.log.Error("lanes: building request", "subscriber", sub.ID, "err", err)
		_ = msg.NakWithDelay(l.cfg.RetryDelay)
		return
	}
	out := l.cfg.Client.Send(ctx, req)
	l.cfg.Metrics.Attempt(out.Class.String(), out.Duration)
	if out.Class == deliver.Delivered {
		if err := msg.Ack(); err != nil {
			l.log.Warn("lanes: ack", "subscriber", sub.ID, "err", err)
		}
		return
	}
	l.log.Info("lanes: delivery failed, will retry", "subscriber", sub.ID, "event", req.ID,
		"outcome", out.Class.String(), "status", out.Status, "err", out.Err)
	_ = msg.NakWithDelay(l.cfg.RetryDelay)
}
