package streams

import (
	"cmp"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
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
	Events     = "EVENTS"
	Deliveries = "DELIVERIES"
	DLQ        = "DLQ"
	Retries    = "RETRIES"
	// Bodies holds the body of each event fanned out to several
	// subscribers, once, on bodies.<EVENTS sequence> (see [BodySubject]):
	// those deliveries carry the sequence (Relay-Event-Seq) instead of a
	// copy of the body.
	Bodies = "BODIES"
	// Attempts holds small records of what became of each event: its
	// fan-out and every attempt to deliver it, on subjects derived from its
	// id (see [EventRecords]), for `relay trace` and `relay status
	// --subscriber`. A ring bounded by age and bytes: the oldest go first.
	Attempts          = "ATTEMPTS"
	SubscribersBucket = "relay_subscribers"
	RateLimitBucket   = "relay_ratelimit"
	// TimelinessBucket holds, per subscriber, how many deliveries were
	// accepted within their deadline and how many missed it, summed over
	// every relay, for `relay status`.
	TimelinessBucket = "relay_timeliness"
	// RefillBucket holds the refill leases: key = subscriber id, value =
	// the id of the relay bringing that subscriber's overflow back now
	// (empty: nobody), so that one relay at a time reads and republishes
	// it. A lease whose holder died goes with the bucket's TTL.
	RefillBucket = "relay_refill"
	// KeysBucket holds the keys of the HTTP API: key = the key's name,
	// value = JSON of its SHA-256, scopes and times, never the key
	// (internal/apikeys).
	KeysBucket = "relay_keys"
)

// RefillLeaseTTL is relay_refill's TTL: how long a lease outlives a relay
// that died holding it, before another relay may take it. A refill's reads,
// writes and their waits (a batch's PubAcks wait up to 10 s) end within
// five sixths of it, so the holder has purged what it stored before another
// relay can read the same messages.
const RefillLeaseTTL = 30 * time.Second

// DuplicateWindow is the Nats-Msg-Id duplicate window of every relay stream
// (their duplicate_window; Ensure puts it back if it was changed). A copy, a
// retry or a dead letter written again within it is dropped as a duplicate:
// that is what makes a crash between a write and its ack harmless, as long
// as the crashed relay's messages come back, and are written again, before
// the window closes. `relay run --ack-wait` is bounded by it for that.
const DuplicateWindow = 2 * time.Minute

// oldEventsMaxAge is the max_age EVENTS.json gave EVENTS before relay kept
// EVENTS' age itself (internal/retention): JetStream deleted an event at
// that age whether or not the fan-out had copied it. An EVENTS found with
// exactly this age is taken for relay's old definition, and [Ensure] sets it
// to none; any other age is an operator's, and is kept.
const oldEventsMaxAge = 7 * 24 * time.Hour

// ErrInvalidReplicas is returned when a replica count JetStream cannot honour
// is asked for.
var ErrInvalidReplicas = errors.New("replicas must be 1, 3 or 5")

// Config returns the definition of one of the relay streams, read from its
// embedded JSON file.
func Config(name string) (jetstream.StreamConfig, error) {
	var cfg jetstream.StreamConfig
	raw, err := definitions.ReadFile(name + ".json")
	if err != nil {
		return cfg, fmt.Errorf("no definition for %q: %w", name, err)
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return cfg, fmt.Errorf("decoding %s.json: %w", name, err)
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
	// AttemptsMaxAge is how long ATTEMPTS keeps a record. Zero keeps the
	// age of an ATTEMPTS that exists, and creates a new one with
	// ATTEMPTS.json's 72 hours.
	AttemptsMaxAge time.Duration
	// NoAttempts leaves ATTEMPTS alone: a relay that records no attempts
	// (relay run --record-attempts=false) neither creates it nor reserves
	// its bytes.
	NoAttempts bool
	// Logger gets the one line that says how the streams are sized, and a
	// warning for each limit tighter than relay advises, so that an
	// operator sees at start what the account allowed. Defaults to
	// slog.Default().
	Logger *slog.Logger
}

// Ensure creates the relay streams and KV buckets, or brings those that
// exist back to what relay's correctness depends on, so that every
// `relay run` starts on the same layout. It is idempotent and safe to run
// from several relays at once.
//
// A stream relay creates gets its definition from streams/*.json, with
// DELIVERIES sized within what the JetStream account (and the server) has
// left (see [fit]), and, on a bounded store, EVENTS within what DELIVERIES
// and ATTEMPTS leave, to half of it: EVENTS discards new, so a full store
// refuses the publisher while it still has room for the copies of every
// event EVENTS took. A stream that exists keeps its limits (max_bytes,
// max_msgs, max_age), replicas and the rest as an operator set them; relay
// puts back only the settings it relies on ([enforce]), and warns about a
// limit tighter than it advises. EVENTS' max_age is the one exception: the
// age of relay's old definition ([oldEventsMaxAge]) is set to none, since
// relay purges EVENTS itself. A limit that would make JetStream delete
// deliveries not yet made is not kept: Ensure returns [ErrLossyLimit]. It
// logs one line at Info with the sizes.
func Ensure(ctx context.Context, js jetstream.JetStream, opts Options) error {
	if r := opts.Replicas; r != 0 && r != 1 && r != 3 && r != 5 {
		return fmt.Errorf("%w: got %d", ErrInvalidReplicas, r)
	}
	// existingConfig is the definition of a stream that exists, nil when
	// it does not (or cannot be read: the create that follows says why).
	existingConfig := func(name string) *jetstream.StreamConfig {
		if s, err := look(ctx, js, name); err == nil {
			return &s.CachedInfo().Config
		}
		return nil
	}
	e := &ensurer{js: js, opts: opts, log: cmp.Or(opts.Logger, slog.Default())}
	// ensured lists every stream made sure of, buckets' included, for the
	// look at the end.
	var ensured []string
	sizes := map[string]int64{}
	// DELIVERIES and ATTEMPTS first: an EVENTS relay creates on a bounded
	// store is sized within what they leave (see [ensurer.create]).
	names := []string{Deliveries, Attempts, Events, DLQ, Retries, Bodies}
	if opts.NoAttempts {
		names = slices.DeleteFunc(names, func(n string) bool { return n == Attempts })
	}
	for _, name := range names {
		def, err := Config(name)
		if err != nil {
			return err
		}
		cfg, err := e.stream(ctx, def, existingConfig(name))
		if errors.Is(err, ErrNoRoomForRecords) {
			// Records are a view, not the ledger: the relay delivers
			// without them.
			e.log.Warn("streams: "+err.Error()+"; relay trace will show nothing of this relay's deliveries", "stream", name)
			continue
		}
		if err != nil {
			return fmt.Errorf("creating or updating %s: %w", name, err)
		}
		ensured = append(ensured, name)
		sizes[name] = cfg.MaxBytes
		if name == Deliveries {
			e.deliveriesBytes = cfg.MaxBytes
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
		{
			Bucket:      RefillBucket,
			Description: "relay refill leases: key = subscriber id, value = the relay bringing its overflow back",
			History:     1,
			TTL:         RefillLeaseTTL,
		},
	} {
		ensured = append(ensured, "KV_"+kv.Bucket)
		kv.Replicas = opts.Replicas
		if kv.Replicas == 0 {
			kv.Replicas = 1
			if have := existingConfig("KV_" + kv.Bucket); have != nil {
				kv.Replicas = have.Replicas
			}
		}
		if err := AskAgain(ctx, func(ctx context.Context) error {
			_, err := js.CreateKeyValue(ctx, kv)
			if errors.Is(err, jetstream.ErrBucketExists) {
				err = updateBucket(ctx, js, kv)
			}
			return err
		}); err != nil {
			return fmt.Errorf("creating or updating bucket %s: %w", kv.Bucket, err)
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
			return fmt.Errorf("looking up %s: %w", name, err)
		}
	}
	e.logSizes(ctx, sizes)
	return nil
}

// Restore makes the relay stream name again with its definition when it
// does not exist, as [Ensure] makes it at start: with opts.Replicas, or
// when zero with as many replicas as the other relay streams have. A
// running relay restores BODIES once it finds it deleted (see package
// retention). Several relays at once are safe: a create of the same
// definition is idempotent, and one that finds the stream made meanwhile
// keeps what it has, as Ensure does.
func Restore(ctx context.Context, js jetstream.JetStream, name string, opts Options) error {
	def, err := Config(name)
	if err != nil {
		return err
	}
	e := &ensurer{js: js, opts: opts, log: cmp.Or(opts.Logger, slog.Default())}
	for _, other := range []string{Events, Deliveries, DLQ, Retries, Bodies} {
		if other == name {
			continue
		}
		if s, err := js.Stream(ctx, other); err == nil {
			e.replicas = max(e.replicas, s.CachedInfo().Config.Replicas)
		}
	}
	var have *jetstream.StreamConfig
	if s, err := js.Stream(ctx, name); err == nil {
		have = &s.CachedInfo().Config
	} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("looking up %s: %w", name, err)
	}
	if _, err := e.stream(ctx, def, have); err != nil {
		return fmt.Errorf("creating or updating %s: %w", name, err)
	}
	return nil
}

// ensurer creates or updates the relay streams of one [Ensure], and reads
// the account's quota once, when a size must be chosen or logged.
type ensurer struct {
	js   jetstream.JetStream
	opts Options
	log  *slog.Logger
	// quota is the account's, once read; quotaRead reports whether it was
	// asked for (an account info that could not be read leaves it
	// unknown).
	quota     quota
	quotaRead bool
	// probed reports whether the server refused a size for lack of
	// storage, which the account info did not foresee.
	probed bool
	// deliveriesBytes is DELIVERIES' max_bytes once ensured, which bounds
	// ATTEMPTS' (see [fitRecords]).
	deliveriesBytes int64
	// replicas is the most replicas of the relay streams found existing:
	// without --replicas, a stream made new beside them (one a newer
	// version adds) gets as many.
	replicas int
}

// stream creates the stream of definition def when have is nil (it does
// not exist), or brings have back to what relay enforces, and returns the
// stream's settings.
func (e *ensurer) stream(ctx context.Context, def jetstream.StreamConfig, have *jetstream.StreamConfig) (jetstream.StreamConfig, error) {
	askedAge := e.askedAge(def.Name)
	if have != nil {
		e.replicas = max(e.replicas, have.Replicas)
	}
	if have == nil {
		cfg := def
		cfg.Replicas = max(e.opts.Replicas, 1)
		if e.opts.Replicas == 0 && e.replicas > 1 {
			cfg.Replicas = e.replicas
		}
		if askedAge > 0 {
			cfg.MaxAge = askedAge
		}
		created, err := e.create(ctx, cfg)
		if err == nil {
			warnLimits(e.log, def, created, askedAge > 0)
			return created, nil
		}
		if !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return cfg, err
		}
		// Another relay created it first, or it exists with another
		// definition: keep what it has, as for any stream that exists.
		s, err := existing(ctx, e.js, def.Name)
		if err != nil {
			return cfg, err
		}
		have = &s.CachedInfo().Config
	}
	cfg := enforce(def, *have, e.opts)
	if def.Name == Events && have.MaxAge == oldEventsMaxAge {
		// relay's own old definition, not an operator's choice: relay
		// purges EVENTS itself now, and only of what the fan-out copied.
		e.log.Info(fmt.Sprintf("streams: %s max_age %s was relay's old default: set to none; relay run purges %s itself of the events the fan-out has copied (--events-max-age)",
			def.Name, have.MaxAge, def.Name))
		cfg.MaxAge = 0
	}
	if cfg.MaxAge > 0 && cfg.MaxAge < cfg.Duplicates {
		// JetStream refuses a duplicate window longer than the max age,
		// and relay needs the window (see DuplicateWindow).
		e.log.Warn(fmt.Sprintf("streams: %s max_age %s is under its %s duplicate window, which relay needs: raised to it",
			def.Name, cfg.MaxAge, cfg.Duplicates))
		cfg.MaxAge = cfg.Duplicates
	}
	if err := lossyLimit(cfg); err != nil {
		return cfg, err
	}
	if (def.Name == Deliveries || def.Name == Events) && probing(*have) {
		// Created at the size that probed the account, and not lowered
		// since (a relay stopped in between, or the update failed): that
		// size is relay's, not an operator's, and is chosen again.
		e.log.Warn(fmt.Sprintf("streams: %s kept the %s it was created with to probe the account's storage: sized again",
			def.Name, FormatBytes(have.MaxBytes)))
		if def.Name == Events {
			// Lowering it deletes nothing: EVENTS discards new.
			return e.size(ctx, cfg, eventsCeiling, e.updateWith(cfg))
		}
		cfg.MaxBytes = 0
	}
	warnLimits(e.log, def, cfg, askedAge > 0)
	if def.Name == Deliveries && cfg.MaxBytes <= 0 {
		// Unbounded, DELIVERIES would never refuse a copy, and the
		// fan-out would fill the account instead of waiting.
		return e.bound(ctx, cfg, def.MaxBytes)
	}
	if sameStream(cfg, *have) {
		return cfg, nil
	}
	return cfg, e.update(ctx, cfg)
}

// askedAge is the max age relay run was asked to give stream name
// (--dlq-max-age, --attempts-max-age), 0 when none.
func (e *ensurer) askedAge(name string) time.Duration {
	switch name {
	case DLQ:
		return e.opts.DLQMaxAge
	case Attempts:
		return e.opts.AttemptsMaxAge
	}
	return 0
}

// create creates the stream cfg; DELIVERIES sized by [fit] within what the
// account and the server have left, ATTEMPTS by [fitRecords], and EVENTS,
// on a bounded store, by [fit] within what those two left.
func (e *ensurer) create(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.StreamConfig, error) {
	createWith := func(ctx context.Context, maxBytes int64) error {
		c := cfg
		c.MaxBytes = maxBytes
		if c.Name == Deliveries || (c.Name == Events && maxBytes > 0) {
			c.Metadata = withProbe(c.Metadata, maxBytes)
		}
		return AskAgain(ctx, func(ctx context.Context) error {
			_, err := e.js.CreateStream(ctx, c)
			return err
		})
	}
	if cfg.Name == Attempts {
		size, err := fitRecords(ctx, e.accountQuota(ctx, cfg.Replicas), cfg.MaxBytes, e.deliveriesBytes, createWith)
		cfg.MaxBytes = size
		return cfg, err
	}
	if cfg.Name == Events && e.storeBounded(ctx, cfg.Replicas) {
		return e.size(ctx, cfg, eventsCeiling, createWith)
	}
	if cfg.Name != Deliveries {
		return cfg, createWith(ctx, cfg.MaxBytes)
	}
	return e.size(ctx, cfg, cfg.MaxBytes, createWith)
}

// storeBounded reports whether the storage the relay streams share is known
// to be bounded: the account sets a limit of file storage, or the server
// refused a size for DELIVERIES that the account allowed (its
// max_file_store). Its quota is read again, after DELIVERIES and ATTEMPTS
// reserved theirs.
func (e *ensurer) storeBounded(ctx context.Context, replicas int) bool {
	e.quotaRead = false
	_, limited := e.accountQuota(ctx, replicas).available()
	return limited || e.probed
}

// updateWith returns a try for [ensurer.size] that updates the stream cfg
// with a size, marked as a probe until size lowers it.
func (e *ensurer) updateWith(cfg jetstream.StreamConfig) func(context.Context, int64) error {
	return func(ctx context.Context, maxBytes int64) error {
		c := cfg
		c.MaxBytes = maxBytes
		c.Metadata = withProbe(c.Metadata, maxBytes)
		return e.update(ctx, c)
	}
}

// bound gives a DELIVERIES that exists unbounded a size, as [create] would
// give a new one, at most def.
func (e *ensurer) bound(ctx context.Context, cfg jetstream.StreamConfig, def int64) (jetstream.StreamConfig, error) {
	sized, err := e.size(ctx, cfg, def, e.updateWith(cfg))
	if err == nil {
		e.log.Warn(fmt.Sprintf("streams: %s had no max_bytes: bounded to %s, since relay relies on a full %s refusing new copies",
			Deliveries, FormatBytes(sized.MaxBytes), Deliveries))
	}
	return sized, err
}

// size gives cfg (DELIVERIES, or an EVENTS relay bounds) its max_bytes by
// [fit], at most def, try creating or updating it with a size, then lowers
// it to the size fit chose when the size fit tried was larger.
func (e *ensurer) size(ctx context.Context, cfg jetstream.StreamConfig, def int64, try func(context.Context, int64) error) (jetstream.StreamConfig, error) {
	probe, size, err := fit(ctx, cfg.Name, e.accountQuota(ctx, cfg.Replicas), def, func(ctx context.Context, maxBytes int64) error {
		err := try(ctx, maxBytes)
		if storageExceeded(err) {
			e.probed = true
		}
		return err
	})
	if err != nil {
		return cfg, err
	}
	cfg.MaxBytes = size
	cfg.Metadata = withoutProbe(cfg.Metadata)
	if probe == size {
		return cfg, nil
	}
	return cfg, e.update(ctx, cfg)
}

// probeKey marks, in DELIVERIES' metadata, the max_bytes it was created
// (or updated) with to probe the account's storage, until it is lowered to
// the size chosen: a DELIVERIES found with that size still is sized again.
const probeKey = "relay_probe_max_bytes"

func withProbe(md map[string]string, maxBytes int64) map[string]string {
	out := maps.Clone(md)
	if out == nil {
		out = map[string]string{}
	}
	out[probeKey] = strconv.FormatInt(maxBytes, 10)
	return out
}

func withoutProbe(md map[string]string) map[string]string {
	if _, ok := md[probeKey]; !ok {
		return md
	}
	out := maps.Clone(md)
	delete(out, probeKey)
	return out
}

// probing reports whether DELIVERIES still has the size it probed with.
func probing(cfg jetstream.StreamConfig) bool {
	v, ok := cfg.Metadata[probeKey]
	return ok && v == strconv.FormatInt(cfg.MaxBytes, 10)
}

// update updates the stream to cfg.
func (e *ensurer) update(ctx context.Context, cfg jetstream.StreamConfig) error {
	return AskAgain(ctx, func(ctx context.Context) error {
		_, err := e.js.UpdateStream(ctx, cfg)
		return err
	})
}

// accountQuota is the package's [accountQuota], read once per Ensure; an account info that
// cannot be read is logged at Debug and leaves the quota unknown, so that
// the server's answers decide.
func (e *ensurer) accountQuota(ctx context.Context, replicas int) quota {
	if !e.quotaRead {
		e.quotaRead = true
		r, err := accountQuota(ctx, e.js, replicas)
		if err != nil {
			e.log.Debug("streams: the account's JetStream limits are unknown; the server's answers decide the sizes", "err", err)
		}
		e.quota = r
	}
	return e.quota
}

// logSizes logs the one line that says how the streams are sized: each
// stream's max_bytes (-1: unlimited, reserving nothing) and what the
// account allows (-1: no limit, or unknown).
func (e *ensurer) logSizes(ctx context.Context, sizes map[string]int64) {
	r := e.accountQuota(ctx, max(e.opts.Replicas, 1))
	limit, reserved := int64(-1), int64(-1)
	if r.known {
		limit, reserved = r.limit, r.reserved
	}
	e.log.Info("streams sized",
		"events_max_bytes", sizes[Events], "deliveries_max_bytes", sizes[Deliveries],
		"retries_max_bytes", sizes[Retries], "dlq_max_bytes", sizes[DLQ], "bodies_max_bytes", sizes[Bodies],
		"attempts_max_bytes", sizes[Attempts],
		"deliveries", FormatBytes(sizes[Deliveries]),
		"account_max_store", limit, "account_reserved", reserved,
		"server_limited", e.probed)
}

// enforce returns the settings a relay stream that exists must have: have's
// (its limits, replicas, description and the rest, as an operator may have
// set them), with what relay's correctness depends on taken from the
// definition def: subjects, retention, discard, the duplicate window
// (DuplicateWindow), direct get and message schedules, purges and deletes
// allowed (the lanes, `relay sub rm` and `relay dlq` make them), no limit
// per subject (it would drop one subscriber's or one event type's messages
// silently), and a max message size no larger than the definition's where
// it has one (EVENTS: room for relay's headers on a copy) and unlimited on
// the streams copies go to. The replicas are opts.Replicas when given, and
// the DLQ's and ATTEMPTS' max ages opts.DLQMaxAge and opts.AttemptsMaxAge
// when given.
func enforce(def, have jetstream.StreamConfig, opts Options) jetstream.StreamConfig {
	cfg := have
	cfg.Subjects = def.Subjects
	cfg.Retention = def.Retention
	cfg.Discard = def.Discard
	cfg.Duplicates = def.Duplicates
	cfg.AllowDirect = def.AllowDirect
	cfg.AllowMsgSchedules = def.AllowMsgSchedules
	cfg.DenyPurge = def.DenyPurge
	cfg.DenyDelete = def.DenyDelete
	cfg.MaxMsgsPerSubject = def.MaxMsgsPerSubject
	if def.MaxMsgSize <= 0 || have.MaxMsgSize <= 0 || have.MaxMsgSize > def.MaxMsgSize {
		cfg.MaxMsgSize = def.MaxMsgSize
	}
	if opts.Replicas != 0 {
		cfg.Replicas = opts.Replicas
	}
	if def.Name == DLQ && opts.DLQMaxAge > 0 {
		cfg.MaxAge = opts.DLQMaxAge
	}
	if def.Name == Attempts && opts.AttemptsMaxAge > 0 {
		cfg.MaxAge = opts.AttemptsMaxAge
	}
	return cfg
}

// sameStream reports whether have has every setting of want that Ensure
// sets on a stream that exists: those [enforce] takes from the definition,
// and the replicas, limits and max age it keeps or is asked for. A stream
// created from want reads back the same, with the defaults the server
// fills in, so a relay that finds a stream another relay is creating sends
// no update (see AskAgain).
func sameStream(want, have jetstream.StreamConfig) bool {
	return slices.Equal(want.Subjects, have.Subjects) && want.Retention == have.Retention &&
		want.Discard == have.Discard && want.Duplicates == have.Duplicates &&
		want.AllowDirect == have.AllowDirect && want.AllowMsgSchedules == have.AllowMsgSchedules &&
		want.DenyPurge == have.DenyPurge && want.DenyDelete == have.DenyDelete &&
		want.MaxMsgsPerSubject == have.MaxMsgsPerSubject && want.MaxMsgSize == have.MaxMsgSize &&
		want.Replicas == have.Replicas && want.MaxBytes == have.MaxBytes && want.MaxMsgs == have.MaxMsgs &&
		want.MaxAge == have.MaxAge
}

// updateBucket updates a KV bucket that exists to kv, unless it has kv's
// settings already: a create refused because the bucket exists is often
// another relay's creation, still in flight, which an update would leave
// unanswered (see AskAgain).
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

// KeysBucketConfig is the definition of [KeysBucket]: one value a key, so
// that a removed key's hash does not stay.
func KeysBucketConfig(replicas int) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:      KeysBucket,
		Description: "relay API keys: key = name, value = JSON of the key's SHA-256, scopes and times (never the key)",
		History:     1,
		Replicas:    max(replicas, 1),
	}
}

// EnsureKeys creates [KeysBucket] with replicas (0: 1) when it does not
// exist, and leaves one that exists as it is. Only what uses the keys
// creates it (relay run --api, relay key add), so that a relay without the
// HTTP API needs no grant of it.
func EnsureKeys(ctx context.Context, js jetstream.JetStream, replicas int) error {
	err := AskAgain(ctx, func(ctx context.Context) error {
		_, err := js.CreateKeyValue(ctx, KeysBucketConfig(replicas))
		if errors.Is(err, jetstream.ErrBucketExists) {
			return nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("creating bucket %s: %w", KeysBucket, err)
	}
	return nil
}

// AskAgain runs one create-or-update request of the JetStream API (a
// stream, a bucket, a consumer), or a read, and runs it again while it goes
// unanswered, up to three times in all, returning the last error: the
// caller logs it and decides. On a cluster, two relays that start at once
// must not both update a replicated stream one of them is creating:
// nats-server v2.15.2 leaves such an update without a reply (nats.go's
// CreateOrUpdate calls update first), so Ensure looks first, creates only
// what is missing, and updates a stream only when a setting it enforces
// differs (a bucket: when it is not as defined). A request left unanswered
// all the same is asked again: the resource exists by then.
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
