package lanes

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/internal/bodies"
	"github.com/relay-dev/relay/internal/deadletter"
	"github.com/relay-dev/relay/streams"
)

// A delivery of an event fanned out to several subscribers carries its
// event's sequence (Relay-Event-Seq) instead of the body, which BODIES
// holds once for all of them (see package bodies). The lane reads the body
// when it sends the request, and writes it back into whatever it writes
// anew (a parked retry, a copy held until due, a move to overflow or
// RETRIES, a dead letter): only a delivery fresh from the fan-out, on its
// lane, depends on BODIES, and BODIES keeps a body as long as such a
// delivery may wait (see package retention). A body BODIES cannot give is
// read from EVENTS; one neither gives (see package bodies) is the death of
// its delivery, as body_lost, with no body; a read that failed otherwise
// hands the delivery back, to be read again.

// errBodyGone marks, for the dead letter of a delivery, a body that
// neither BODIES nor EVENTS could give: [bodies.ErrGone] (both answered
// without it) or [bodies.ErrUnreadable] (neither gave it for
// bodies.GiveUp). Any other error of a read is handed back and read again.
var errBodyGone = errors.New("no request made")

// bodyOf returns the body a delivery is sent with: its own, or its event's.
func (e *engine) bodyOf(ctx context.Context, msg jetstream.Msg) ([]byte, error) {
	seq, ok := eventSeqOf(msg.Headers())
	if !ok {
		return msg.Data(), nil
	}
	body, err := e.bodies.Body(ctx, seq, msg.Headers().Get(streams.HeaderEventID))
	if errors.Is(err, bodies.ErrGone) || errors.Is(err, bodies.ErrUnreadable) {
		return nil, fmt.Errorf("%w, %w", err, errBodyGone)
	}
	return body, err
}

// whole returns a delivery as it is written anew: its body read into it
// and its Relay-Event-Seq dropped, or, for one that carries its body, its
// own body and headers (not copied: the writers copy the headers they
// change). On errBodyGone the headers are returned as they are, for the
// dead letter: its Relay-Event-Seq says that it has no body, and a replay
// leaves it alone.
func (e *engine) whole(ctx context.Context, msg jetstream.Msg) ([]byte, nats.Header, error) {
	h := msg.Headers()
	if _, ok := eventSeqOf(h); !ok {
		return msg.Data(), h, nil
	}
	body, err := e.bodyOf(ctx, msg)
	if err != nil {
		return nil, h, err
	}
	h = maps.Clone(h)
	h.Del(streams.HeaderEventSeq)
	return body, h, nil
}

// eventSeqOf reads Relay-Event-Seq; false when the delivery carries its
// body.
func eventSeqOf(h nats.Header) (uint64, bool) {
	v := h.Get(streams.HeaderEventSeq)
	if v == "" {
		return 0, false
	}
	seq, err := strconv.ParseUint(v, 10, 64)
	return seq, err == nil && seq > 0
}

// bodyLost is the death of a delivery whose body is gone, with what was
// read and what each stream answered in its error.
func bodyLost(err error) deadletter.Death {
	return deadletter.Death{Reason: deadletter.BodyLost, LastError: deadletter.CleanError(err.Error())}
}
