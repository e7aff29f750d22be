package subscribers

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/internal/ratelimit"
)

// ResetError means a resume ended the operator's pause but could not reset
// the subscriber's flow control (a Retry-After's pause, an open circuit):
// resuming again does it.
type ResetError struct {
	ID  string
	Err error
}

func (e *ResetError) Error() string {
	return fmt.Sprintf("subscriber %s: its pause or circuit was not reset (resume it again): %v", e.ID, e.Err)
}

func (e *ResetError) Unwrap() error { return e.Err }

// Resume ends subscriber id's pause ([Store.Resume]) and resets its flow
// control ([ratelimit.Reset]): a Retry-After's pause ends and its circuit
// closes, on every relay. It reports whether it was paused, and the flow
// control as it was before.
func Resume(ctx context.Context, js jetstream.JetStream, s *Store, id string) (bool, ratelimit.State, error) {
	if err := ValidateID(id); err != nil {
		return false, ratelimit.State{}, err
	}
	was, err := s.Resume(ctx, id)
	if err != nil {
		return false, ratelimit.State{}, err
	}
	flow, err := ratelimit.Reset(ctx, js, id)
	if err != nil {
		return was, flow, &ResetError{ID: id, Err: err}
	}
	return was, flow, nil
}
