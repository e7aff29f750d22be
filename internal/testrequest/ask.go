package testrequest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/relay-dev/relay/internal/subscribers"
)

// Ask has a running relay make the test request r and returns its answer,
// waiting until ctx ends: bound it by the subscriber's timeout and a
// margin. The error wraps [ErrInvalid] for a request that cannot be made
// (nothing is asked), [ErrNoRelay] when no relay answers on [Subject],
// [subscribers.ErrNotFound] when the relay knows no such subscriber (with
// the answer), and ctx's error when the answer did not come in time. A
// request that was sent returns no error, whatever its reply: the answer
// says what came back.
func Ask(ctx context.Context, nc *nats.Conn, r Request) (Answer, error) {
	if err := r.Check(); err != nil {
		return Answer{}, err
	}
	data, err := json.Marshal(r)
	if err != nil {
		return Answer{}, fmt.Errorf("encoding the request: %w", err)
	}
	msg, err := nc.RequestWithContext(ctx, Subject, data)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return Answer{}, fmt.Errorf("%w on %s", ErrNoRelay, Subject)
	case err != nil:
		return Answer{}, fmt.Errorf("asking a relay on %s: %w", Subject, err)
	}
	var a Answer
	if err := json.Unmarshal(msg.Data, &a); err != nil {
		return Answer{}, fmt.Errorf("%w: %w", ErrAnswer, err)
	}
	if a.NotFound {
		return a, fmt.Errorf("%w: %s (relay %s)", subscribers.ErrNotFound, r.Subscriber, a.Relay)
	}
	return a, nil
}
