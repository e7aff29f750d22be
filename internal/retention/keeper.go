// Package retention keeps EVENTS to its age without ever losing an event the
// fan-out has not copied.
//
// JetStream's own max_age deletes an event at that age whether or not the
// fan-out has copied it: a fan-out held back long enough (DELIVERIES full,
// relay stopped for a week) would lose events JetStream had accepted, and
// nothing would say so. So EVENTS has no max_age of its own, and a [Keeper]
// in every `relay run` purges it instead, about once a minute ([Interval]):
// of the events older than the age (`relay run --events-max-age`), but
// never of one at or above the fan-out consumer's ack floor + 1. The fan-out
// acknowledges an event only once every copy and dead letter of it is stored,
// so every event below that bound has been copied; one it has not
// acknowledged stays, whatever its age, until it has.
//
// A bounded EVENTS (a max_bytes or max_msgs, which relay gives it on a
// bounded store) refuses publishers once full rather than drop an event not
// yet copied. So that a burst is not refused for the whole age while EVENTS
// is full of events already copied, a keeper of a bounded EVENTS passes
// every [RoomInterval] and, once EVENTS is past [RoomShare] of its bound,
// purges every copied event whatever its age, but for those stored less
// than [BodySlack] before the oldest delivery on a lane, whose body a
// delivery may still read from EVENTS should BODIES be lost: the age is
// then kept only as far as the room allows.
//
// A pass costs the same few requests whatever EVENTS holds: the fan-out
// consumer's info (its ack floor), one message get by time (the first event
// young enough to keep), on a bounded EVENTS its info (how full it is) and,
// when there is something new to remove, one purge below a sequence.
package retention

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/internal/clock"
	"github.com/relay-dev/relay/internal/fanout"
	"github.com/relay-dev/relay/streams"
)

// Interval is how often a Keeper purges EVENTS. An event the fan-out copied
// in time outlives the age by at most about this much; a pass costs a few
// requests whatever EVENTS holds, so a minute keeps both the cost and the
// overshoot negligible against an age of days.
const Interval = time.Minute

// RoomInterval is how often a keeper of a bounded EVENTS passes: a burst
// that fills it waits at most about this long for the room copied events
// take, at three requests a pass.
const RoomInterval = 5 * time.Second

// RoomShare is the share of a bounded EVENTS' max_bytes (or max_msgs) past
// which a pass purges every copied event, not only those older than the age:
// half leaves a burst as large again room before the publisher is refused.
const RoomShare = 0.5

// passTimeout bounds one pass. A pass that fails is logged and made again
// at the next tick: what it did not purge stays one more interval.
const passTimeout = 30 * time.Second

// ErrConfig is returned by [New] for a Config missing a required field.
var ErrConfig = errors.New("retention: invalid config")

// Config wires a Keeper.
type Config struct {
	// JS is the JetStream context; required.
	JS jetstream.JetStream
	// MaxAge is how long EVENTS keeps an event the fan-out has copied
	// (`relay run --events-max-age`); required, more than zero.
	MaxAge time.Duration
	// Clock tells the time the age is counted to; defaults to the real
	// one. The events' times are the server's: a host clock off by a
	// minute moves the cutoff by a minute, never past the fan-out's ack
	// floor.
	Clock clock.Clock
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Keeper purges EVENTS of the events older than its age that the fan-out
// has copied. One runs in every `relay run`; several at once are safe (see
// [Keeper.pass]).
type Keeper struct {
	js     jetstream.JetStream
	maxAge time.Duration
	clock  clock.Clock
	log    *slog.Logger
	// stream is EVENTS, looked up by the first pass that reads its bound
	// or purges.
	stream jetstream.Stream
	// bounded is whether EVENTS had a max_bytes or max_msgs at the last
	// pass: Run then passes every RoomInterval.
	bounded bool
	// tight is whether the last pass found a bounded EVENTS past
	// RoomShare; its change is logged once.
	tight bool
	// warned is when the last "not copied yet" warning was logged: at most
	// one an Interval, however often a pass is made.
	warned time.Time
	// purged is the sequence this keeper last purged below: a pass that
	// would purge no further sends no purge.
	purged uint64
}

// New returns a Keeper for cfg; [ErrConfig] when JS is missing or MaxAge is
// not positive.
func New(cfg Config) (*Keeper, error) {
	if cfg.JS == nil {
		return nil, fmt.Errorf("%w: no JetStream context", ErrConfig)
	}
	if cfg.MaxAge <= 0 {
		return nil, fmt.Errorf("%w: max age %s, want more than zero", ErrConfig, cfg.MaxAge)
	}
	k := &Keeper{js: cfg.JS, maxAge: cfg.MaxAge, clock: cfg.Clock, log: cmp.Or(cfg.Logger, slog.Default())}
	if k.clock == nil {
		k.clock = clock.Real
	}
	return k, nil
}

// Run makes a pass at once and then every [Interval] until ctx is
// cancelled, in the caller's goroutine. A pass that fails is logged at Warn
// and made again at the next tick.
func (k *Keeper) Run(ctx context.Context) {
	for {
		passCtx, cancel := context.WithTimeout(ctx, passTimeout)
		_, err := k.pass(passCtx)
		cancel()
		next := Interval
		if k.bounded {
			next = RoomInterval
		}
		if err != nil && ctx.Err() == nil {
			k.log.Warn("retention: EVENTS not purged this time; trying again in "+next.String(), "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-k.clock.After(next):
		}
	}
}

// pass purges EVENTS below the first event it must keep: the first one
// younger than the age, or the first the fan-out has not acknowledged,
// whichever comes first. It returns that sequence when it purged below it,
// else 0. Without the fan-out consumer (no relay has run yet) it purges
// nothing.
//
// Several keepers may pass at once (a relay each): each purges below a
// sequence that is safe by what it read, and a purge below a sequence that
// another purge has already passed removes nothing and changes nothing, so
// two keepers purging below the same sequence, or one below a lower one
// after another, leave EVENTS as one would
// (TestConcurrentKeepersPurgeAsOne).
func (k *Keeper) pass(ctx context.Context) (uint64, error) {
	// EVENTS' bound is looked up first, so that Run passes every
	// RoomInterval on a bounded EVENTS from its start, the fan-out's
	// consumer made or not.
	if err := k.lookup(ctx); err != nil {
		return 0, err
	}
	cutoff := k.clock.Now().Add(-k.maxAge)
	cons, err := k.js.Consumer(ctx, streams.Events, fanout.ConsumerName)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("retention: reading the fan-out's ack floor on %s: %w", streams.Events, err)
	}
	info := cons.CachedInfo()
	// Every event up to the ack floor was acknowledged by the fan-out, and
	// it acknowledges one only once every copy and dead letter is stored.
	// An ack the consumer's leader took and lost before its followers had
	// it does not change that: the copies were stored before the ack. The
	// floor is never above what was delivered; the smaller of the two is
	// taken all the same.
	copied := min(info.AckFloor.Stream, info.Delivered.Stream) + 1
	young, found, err := firstSince(ctx, k.js, streams.Events, cutoff)
	if err != nil {
		return 0, err
	}
	tight, err := k.checkRoom(ctx)
	if err != nil {
		return 0, err
	}
	below := copied
	if tight {
		needed, err := k.neededByLanes(ctx)
		if err != nil {
			return 0, err
		}
		below = min(below, needed)
	} else if found && young < below {
		below = young
	}
	lagging := (found && young > copied) || (!found && info.NumPending+uint64(info.NumAckPending) > 0)
	if now := k.clock.Now(); lagging && now.Sub(k.warned) >= Interval {
		k.warned = now
		k.log.Warn(fmt.Sprintf("retention: %s keeps events older than %s that the fan-out has not copied yet, from sequence %d: they go once copied",
			streams.Events, k.maxAge, copied))
	}
	if below <= 1 || below <= k.purged {
		return 0, nil
	}
	if err := k.stream.Purge(ctx, jetstream.WithPurgeSequence(below)); err != nil {
		return 0, fmt.Errorf("retention: purging %s below sequence %d: %w", streams.Events, below, err)
	}
	k.purged = below
	k.log.Debug("retention: purged "+streams.Events, "below_seq", below, "older_than", cutoff.UTC().Format(time.RFC3339))
	return below, nil
}

// lookup looks EVENTS up once, warning of a max_age of its own longer than
// the keeper's.
func (k *Keeper) lookup(ctx context.Context) error {
	if k.stream != nil {
		return nil
	}
	s, err := k.js.Stream(ctx, streams.Events)
	if err != nil {
		return fmt.Errorf("retention: looking up %s: %w", streams.Events, err)
	}
	cfg := s.CachedInfo().Config
	if own := cfg.MaxAge; own > k.maxAge {
		k.log.Warn(fmt.Sprintf("retention: %s has its own max_age %s, longer than the %s relay keeps events the fan-out has copied: those go at %s (relay run --events-max-age to keep them longer)",
			streams.Events, own, k.maxAge, k.maxAge))
	}
	k.stream = s
	k.bounded = cfg.MaxBytes > 0 || cfg.MaxMsgs > 0
	return nil
}

// checkRoom tells whether EVENTS is bounded and past [RoomShare] of its bound,
// reading its state (one request) only when it is bounded. An operator's
// bound set after the keeper's first look is seen at the next start.
func (k *Keeper) checkRoom(ctx context.Context) (bool, error) {
	if !k.bounded {
		return false, nil
	}
	info, err := k.stream.Info(ctx)
	if err != nil {
		return false, fmt.Errorf("retention: reading how full %s is: %w", streams.Events, err)
	}
	cfg, state := info.Config, info.State
	byBytes := cfg.MaxBytes > 0 && float64(state.Bytes) >= RoomShare*float64(cfg.MaxBytes)
	byMsgs := cfg.MaxMsgs > 0 && float64(state.Msgs) >= RoomShare*float64(cfg.MaxMsgs)
	tight := byBytes || byMsgs
	if tight != k.tight {
		if tight {
			held := fmt.Sprintf("%d of %d bytes", state.Bytes, cfg.MaxBytes)
			if !byBytes {
				held = fmt.Sprintf("%d of %d events", state.Msgs, cfg.MaxMsgs)
			}
			k.log.Info(fmt.Sprintf("retention: %s is past half its bound (%s): copied events go now, not at %s",
				streams.Events, held, k.maxAge))
		} else {
			k.log.Info(fmt.Sprintf("retention: %s is below half its bound again: copied events stay %s", streams.Events, k.maxAge))
		}
	}
	k.tight = tight
	return tight, nil
}

// neededByLanes returns the first event a delivery on a lane may still need
// from EVENTS, should BODIES lose its body: the first stored less than
// [BodySlack] before the oldest delivery on a lane (as a [BodyKeeper] keeps
// bodies), or one past the last event when no delivery waits. One direct
// get per lane and one message get, on a tight EVENTS only.
func (k *Keeper) neededByLanes(ctx context.Context) (uint64, error) {
	onLanes, err := oldestOnLanes(ctx, k.js)
	if err != nil {
		return 0, err
	}
	if onLanes.IsZero() {
		return math.MaxUint64, nil
	}
	seq, found, err := firstSince(ctx, k.js, streams.Events, onLanes.Add(-BodySlack))
	if err != nil || !found {
		return math.MaxUint64, err
	}
	return seq, nil
}

// msgGetRequest asks for the first message stored at or after StartTime.
// NextFor ">" makes the server step over a message deleted since it found
// it by time (a plain get would answer "not found" then), and costs nothing
// more: it matches every subject, which the server knows without a look.
type msgGetRequest struct {
	StartTime time.Time `json:"start_time"`
	NextFor   string    `json:"next_by_subj"`
	NoHeaders bool      `json:"no_hdr"`
}

// msgGetResponse is the part of the server's answer a keeper reads.
type msgGetResponse struct {
	Error   *jetstream.APIError `json:"error"`
	Message *struct {
		Sequence uint64 `json:"seq"`
	} `json:"message"`
}

// firstSince returns the sequence of the first message of stream stored at
// or after t, and false when every message was stored before it (or the
// stream is empty). One request, whatever the stream holds: the server
// finds it by a binary search of its blocks' times. It asks the stream's
// leader, which has every write: a direct get may be answered by a replica
// behind it.
func firstSince(ctx context.Context, js jetstream.JetStream, stream string, t time.Time) (uint64, bool, error) {
	req, err := json.Marshal(msgGetRequest{StartTime: t.UTC(), NextFor: ">", NoHeaders: true})
	if err != nil {
		return 0, false, fmt.Errorf("retention: %w", err)
	}
	msg, err := js.Conn().RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+stream, req)
	if err != nil {
		return 0, false, fmt.Errorf("retention: finding the first message of %s since %s: %w", stream, t.UTC().Format(time.RFC3339), err)
	}
	var resp msgGetResponse
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return 0, false, fmt.Errorf("retention: reading the answer to a message get on %s: %w", stream, err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return 0, false, nil
	case resp.Error != nil:
		return 0, false, fmt.Errorf("retention: finding the first message of %s since %s: %w", stream, t.UTC().Format(time.RFC3339), resp.Error)
	case resp.Message == nil || resp.Message.Sequence == 0:
		return 0, false, fmt.Errorf("retention: a message get on %s answered no message and no error", stream)
	}
	return resp.Message.Sequence, true, nil
}
