package streams

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
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
	// TimelinessBucket holds, per subscriber, how many deliveries were
	// accepted within their deadline and how many missed it, summed over
	// every relay, for `relay status`.
	TimelinessBucket = "relay_timeliness"
)

// DuplicateWindow is the Nats-Msg-Id duplicate window of every relay stream
// (their duplicate_window; Ensure puts it back if it was changed). A copy, a
// retry or a dead letter written again within it is dropped as a duplicate:
// that is what makes a crash between a write and its ack harmless, as long
// as the crashed relay's messages come back, and are written again, before
// the window closes. `relay run --ack-wait` is bounded by it for that.
const DuplicateWindow = 2 * time.Minute

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

// Options tune what Ensure creates.
type Options struct {
	// Replicas of every stream and bucket. Zero keeps the replicas of a
	// stream that exists already (an operator who made it R3 with
	// `nats stream add` is not overruled) and creates new ones with 1,
	// which is what an embedded server can hold.
	Replicas int
	// DLQMaxAge is how long the DLQ stream keeps a dead letter. Zero keeps
	// the age of a DLQ stream that exists already (an operator who changed
	// it with `nats stream edit` is not overruled by a restart) and creates
	// a new one with DLQ.json's 30 days.
	DLQMaxAge time.Duration
}

// Ensure creates the relay streams and KV buckets, or updates them to the
// embedded definitions, so that every `relay run` starts on the same layout.
// It is idempotent and safe to run from several relays at once.
func Ensure(ctx context.Context, js jetstream.JetStream, opts Options) error {
	if r := opts.Replicas; r != 0 && r != 1 && r != 3 && r != 5 {
		return fmt.Errorf("%w: got %d", ErrInvalidReplicas, r)
	}
	// existingConfig is the definition of a stream that exists, nil when
	// it does not or when nothing asks (unless is set): one look gives both
	// the replicas to keep and the DLQ's max age.
	existingConfig := func(name string, unless bool) *jetstream.StreamConfig {
		if unless {
			return nil
		}
		if s, err := look(ctx, js, name); err == nil {
			return &s.CachedInfo().Config
		}
		return nil
	}
	replicas := func(have *jetstream.StreamConfig) int {
		if opts.Replicas != 0 {
			return opts.Replicas
		}
		if have != nil {
			return have.Replicas
		}
		return 1
	}
	// ensured lists every stream made sure of, buckets' included, for the
	// look at the end.
	var ensured []string
	for _, name := range []string{Events, Deliveries, DLQ, Retries} {
		ensured = append(ensured, name)
		cfg, err := Config(name)
		if err != nil {
			return err
		}
		have := existingConfig(name, opts.Replicas != 0 && (name != DLQ || opts.DLQMaxAge > 0))
		cfg.Replicas = replicas(have)
		if name == DLQ {
			cfg.MaxAge = dlqMaxAge(have, cfg.MaxAge, opts.DLQMaxAge)
		}
		if err := AskAgain(ctx, func(ctx context.Context) error {
			// Create first, update only what exists with another
			// definition: see AskAgain.
			_, err := js.CreateStream(ctx, cfg)
			if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
				err = updateStream(ctx, js, cfg)
			}
			return err
		}); err != nil {
			return fmt.Errorf("streams: creating or updating %s: %w", name, err)
		}
	}
	for _, kv := range []jetstream.KeyValueConfig{
		{
			Bucket:      SubscribersBucket,
			Description: "relay subscribers: key = subscriber id, value = JSON",
			// One value a key: an older value holds secrets that a
			// rotation retired, and must not stay readable.
			History: 1,
		},
		{
			Bucket:      RateLimitBucket,
			Description: "relay shared rate-limit state: key = subscriber id",
			History:     1,
			TTL:         24 * time.Hour,
		},
		{
			Bucket:      TimelinessBucket,
			Description: "relay deadline outcomes: key = subscriber id, value = JSON {met, missed} summed over every relay",
			// Counts that only grow, read by relay status: no history
			// to keep, and no TTL, which would reset a quiet
			// subscriber's figures.
			History: 1,
		},
	} {
		ensured = append(ensured, "KV_"+kv.Bucket)
		kv.Replicas = replicas(existingConfig("KV_"+kv.Bucket, opts.Replicas != 0))
		if err := AskAgain(ctx, func(ctx context.Context) error {
			_, err := js.CreateKeyValue(ctx, kv)
			if errors.Is(err, jetstream.ErrBucketExists) {
				err = updateBucket(ctx, js, kv)
			}
			return err
		}); err != nil {
			return fmt.Errorf("streams: creating or updating bucket %s: %w", kv.Bucket, err)
		}
	}
	// On a cluster a stream that another relay (or this one) has just
	// created can answer "not found" for a moment after its create
	// returned: one CI run's second relay on a fresh cluster exited with
	// "bucket not found" opening the timeliness bucket right after Ensure.
	// Ensure returns once each can be looked up, so what the relay opens
	// next is there.
	for _, name := range ensured {
		if err := AskAgain(ctx, func(ctx context.Context) error {
			_, err := existing(ctx, js, name)
			return err
		}); err != nil {
			return fmt.Errorf("streams: looking up %s: %w", name, err)
		}
	}
	return nil
}

// updateStream updates a stream that exists to cfg, unless it has cfg's
// definition already. A create refused because the stream exists is often
// another relay's creation, of the same definition, still in flight: an
// update then goes unanswered (see AskAgain), while a look at the stream
// answers, and says that there is nothing to update.
func updateStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) error {
	s, err := existing(ctx, js, cfg.Name)
	if err != nil {
		return err
	}
	if sameStream(cfg, s.CachedInfo().Config) {
		return nil
	}
	_, err = js.UpdateStream(ctx, cfg)
	return err
}

// sameStream reports whether have has every setting of want that the
// definitions in streams/*.json give.
func sameStream(want, have jetstream.StreamConfig) bool {
	return want.Description == have.Description && slices.Equal(want.Subjects, have.Subjects) &&
		want.Retention == have.Retention && want.MaxConsumers == have.MaxConsumers &&
		want.MaxMsgs == have.MaxMsgs && want.MaxBytes == have.MaxBytes && want.MaxAge == have.MaxAge &&
		want.MaxMsgsPerSubject == have.MaxMsgsPerSubject && want.MaxMsgSize == have.MaxMsgSize &&
		want.Discard == have.Discard && want.Storage == have.Storage && want.Replicas == have.Replicas &&
		want.Duplicates == have.Duplicates && want.AllowRollup == have.AllowRollup &&
		want.DenyPurge == have.DenyPurge && want.AllowDirect == have.AllowDirect &&
		want.AllowMsgSchedules == have.AllowMsgSchedules
}

// updateBucket is [updateStream] for a KV bucket.
func updateBucket(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValueConfig) error {
	s, err := existing(ctx, js, "KV_"+kv.Bucket)
	if err != nil {
		return err
	}
	have := s.CachedInfo().Config
	if kv.Description == have.Description && int64(max(kv.History, 1)) == have.MaxMsgsPerSubject &&
		kv.TTL == have.MaxAge && max(kv.Replicas, 1) == have.Replicas {
		return nil
	}
	_, err = js.UpdateKeyValue(ctx, kv)
	return err
}

// existing looks up a stream whose create was refused because it exists:
// one still being created elsewhere may not be found yet, so it looks again
// every existingPoll until ctx ends.
func existing(ctx context.Context, js jetstream.JetStream, name string) (jetstream.Stream, error) {
	for {
		s, err := js.Stream(ctx, name)
		if !errors.Is(err, jetstream.ErrStreamNotFound) {
			return s, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(existingPoll):
		}
	}
}

// existingPoll is how often [existing] looks again.
const existingPoll = 100 * time.Millisecond

// askAttempt bounds one create-or-update request of AskAgain, and
// askAttempts how many it makes while they go unanswered.
const (
	askAttempt  = 5 * time.Second
	askAttempts = 3
)

// AskAgain runs one create-or-update request of the JetStream API (a
// stream, a bucket, a consumer), and runs it again while it goes
// unanswered, up to three times in all, returning the last error: the
// caller logs it and decides. On a cluster, two relays that start at once
// must not both update a replicated stream one of them is creating:
// nats-server v2.15.2 leaves such an update without a reply (nats.go's
// CreateOrUpdate calls update first), so the relay creates first and
// updates only what exists with another definition. A request left
// unanswered all the same is asked again: the resource exists by then.
func AskAgain(ctx context.Context, request func(context.Context) error) error {
	var err error
	for range askAttempts {
		attemptCtx, cancel := context.WithTimeout(ctx, askAttempt)
		err = request(attemptCtx)
		cancel()
		if err == nil || ctx.Err() != nil || !unanswered(err) {
			return err
		}
	}
	return err
}

// unanswered reports whether a JetStream API request got no reply in time.
func unanswered(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout)
}

// Transient reports whether a JetStream API request failed in a way that
// asking again later may mend: no reply in time, no server to answer it, the
// connection away, or a cluster without a leader for it yet (503).
func Transient(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.Code == 503 {
		return true
	}
	return unanswered(err) ||
		errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, nats.ErrDisconnected) ||
		errors.Is(err, nats.ErrConnectionReconnecting)
}

// dlqMaxAge is the max age the DLQ stream gets: the one asked for, else the
// existing stream's (have, nil when there is none), else the definition's.
func dlqMaxAge(have *jetstream.StreamConfig, def, asked time.Duration) time.Duration {
	if asked > 0 {
		return asked
	}
	if have != nil {
		return have.MaxAge
	}
	return def
}

// look reads a stream's info, asking again while the request goes
// unanswered (see [AskAgain]): on a cluster, the info of a stream another
// relay is still creating can go unanswered, and a look bounded only by
// the caller's context would spend all of it on one request.
func look(ctx context.Context, js jetstream.JetStream, name string) (jetstream.Stream, error) {
	var s jetstream.Stream
	err := AskAgain(ctx, func(ctx context.Context) error {
		var err error
		s, err = js.Stream(ctx, name)
		return err
	})
	return s, err
}
