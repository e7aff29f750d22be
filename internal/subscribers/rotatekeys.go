package subscribers

import (
	"context"
	"time"
)

// Rotate rotates subscriber id's keys to given ([Store.RotateSecret]), or,
// when none is given, to a new key of each kind it signs with, which it
// returns as generated: `relay sub rotate-secret` prints them, the API
// answers the secret once. generated is returned with an error too, but
// for a subscriber not found or input refused: the write may have landed
// with its reply lost, and nobody else knows the keys.
func Rotate(ctx context.Context, s *Store, id string, given []string, grace time.Duration) (sub Subscriber, generated []string, err error) {
	if err := ValidateID(id); err != nil {
		return Subscriber{}, nil, err
	}
	if err := ValidateGrace(grace); err != nil {
		return Subscriber{}, nil, err
	}
	keys := given
	if len(keys) == 0 {
		cur, err := s.Get(ctx, id)
		if err != nil {
			return Subscriber{}, nil, err
		}
		if keys, err = NewKeys(cur.Signing()); err != nil {
			return Subscriber{}, nil, err
		}
		generated = keys
	}
	sub, err = s.RotateSecret(ctx, id, keys, grace)
	return sub, generated, err
}
