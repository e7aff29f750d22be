package streams

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

//go:embed *.json
var definitions embed.FS

// Names of the streams and KV buckets. They are part of the contract: users
// publish to EVENTS with `nats pub` and operators inspect the others with the
// nats CLI.
const (
	Events            = "EVENTS"
	Deliveries        = "DELIVERIES"
	DLQ               = "DLQ"
	Retries           = "RETRIES"
	SubscribersBucket = "relay_subscribers"
	RateLimitBucket   = "relay_ratelimit"
)

// ErrInvalidReplicas is returned when a replica count JetStream cannot honour
// is asked for.
var ErrInvalidReplicas = errors.New("streams: replicas must be 1, 3 or 5")

// Config returns the definition of one of the relay streams, read from its
// embedded JSON file.
func Config(name string) (jetstream.StreamConfig, error) {
	var cfg jetstream.StreamConfig
	raw, err := definitions.ReadFile(name + ".json")
	if err != nil {
		return cfg, fmt.Errorf("streams: no definition for %q: %w", name, err)
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return cfg, fmt.Errorf("streams: decoding %s.json: %w", name, err)
	}
	return cfg, nil
}

// Options tune what Ensure creates. The zero value gives single-replica
// streams, which is what an embedded server can hold.
type Options struct {
	// Replicas for every stream and bucket. Defaults to 1.
	Replicas int
}

// Ensure creates the relay streams and KV buckets, or updates them to the
// embedded definitions, so that every `relay run` starts on the same layout.
// It is idempotent and safe to run from several relays at once.
func Ensure(ctx context.Context, js jetstream.JetStream, opts Options) error {
	replicas := opts.Replicas
	if replicas == 0 {
		replicas = 1
	}
	if replicas != 1 && replicas != 3 && replicas != 5 {
		return fmt.Errorf("%w: got %d", ErrInvalidReplicas, replicas)
	}
	for _, name := range []string{Events, Deliveries, DLQ, Retries} {
		cfg, err := Config(name)
		if err != nil {
			return err
		}
		cfg.Replicas = replicas
		if _, err := js.CreateOrUpdateStream(ctx, cfg); err != nil {
			return fmt.Errorf("streams: creating or updating %s: %w", name, err)
		}
	}
	for _, kv := range []jetstream.KeyValueConfig{
		{
			Bucket:      SubscribersBucket,
			Description: "relay subscribers: key = subscriber id, value = JSON",
			History:     5,
			Replicas:    replicas,
		},
		{
			Bucket:      RateLimitBucket,
			Description: "relay shared rate-limit state: key = subscriber id",
			History:     1,
			Replicas:    replicas,
			TTL:         24 * time.Hour,
		},
	} {
		if _, err := js.CreateOrUpdateKeyValue(ctx, kv); err != nil {
			return fmt.Errorf("streams: creating or updating bucket %s: %w", kv.Bucket, err)
		}
	}
	return nil
}
