package retention

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/internal/clock"
	"github.com/relay-dev/relay/streams"
)

// BODIES holds the body of each event fanned out to several subscribers,
// once, for the deliveries on the lanes that carry the event's sequence
// instead of a copy (see package bodies). Whatever writes such a delivery
// anew writes the body into it, so only those still on their lanes need
// BODIES. A [BodyKeeper] purges it of the bodies stored more than
// [BodySlack] before the oldest delivery on any lane: every delivery that
// may need a body was stored after it, and the fan-out stores a body just
// before its deliveries. What it does not cover (deliveries the fan-out
// could store only more than BodySlack after their body, while DELIVERIES
// was full) reads its body from EVENTS, which keeps every event the
// fan-out has not finished, and for --events-max-age after (a bounded
// EVENTS past half full: until BodySlack before the oldest delivery on a
// lane, see [Keeper]).
//
// A BodyKeeper also makes BODIES again when it finds it deleted (an
// operator's `nats stream rm`, a store lost): the fan-out cannot share a
// body meanwhile, and the lanes read the bodies it held from EVENTS (see
// package bodies). Made again with its definition ([streams.Restore]),
// within a BodyInterval, by whichever relay's keeper finds it gone first.

// BodyInterval is how often a BodyKeeper purges BODIES: bodies outlive
// their last delivery by about this plus [BodySlack].
const BodyInterval = 5 * time.Second

// BodySlack is how long before the oldest delivery on any lane a body is
// still kept: the time between the fan-out storing a body and storing its
// deliveries, with room for hosts whose clocks differ.
const BodySlack = time.Minute

// BodyKeeper purges BODIES of the bodies no delivery on a lane may need.
// One runs in every `relay run`; several at once are safe, as Keepers are:
// each purges below a sequence that is safe by what it read.
type BodyKeeper struct {
	js    jetstream.JetStream
	clock clock.Clock
	log   *slog.Logger
	// purged is the sequence this keeper last purged below, in the BODIES
	// created at created.
	purged  uint64
	created time.Time
}

// NewBodyKeeper returns a BodyKeeper; [ErrConfig] without a JetStream
// context. cfg.MaxAge is not used.
func NewBodyKeeper(cfg Config) (*BodyKeeper, error) {
	if cfg.JS == nil {
		return nil, fmt.Errorf("%w: no JetStream context", ErrConfig)
	}
	k := &BodyKeeper{js: cfg.JS, clock: cmp.Or[clock.Clock](cfg.Clock, clock.Real), log: cmp.Or(cfg.Logger, slog.Default())}
	return k, nil
}

// Run makes a pass at once and then every [BodyInterval] until ctx is
// cancelled, in the caller's goroutine. A pass that fails is logged at Warn
// (once a minute at most) and made again at the next tick.
func (k *BodyKeeper) Run(ctx context.Context) {
	var warned time.Time
	for {
		passCtx, cancel := context.WithTimeout(ctx, passTimeout)
		_, err := k.pass(passCtx)
		cancel()
		if err != nil && ctx.Err() == nil && k.clock.Now().Sub(warned) >= time.Minute {
			warned = k.clock.Now()
			k.log.Warn("retention: "+streams.Bodies+" not purged this time; trying again", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-k.clock.After(BodyInterval):
		}
	}
}

// pass purges BODIES below the first body stored at or after BodySlack
// before the oldest delivery on a lane (now, when the lanes are empty), and
// returns the sequence it purged below (0: none). BODIES' last sequence is
// read first: a body stored after it may belong to deliveries the lanes
// did not hold yet when they were read, and is kept.
func (k *BodyKeeper) pass(ctx context.Context) (uint64, error) {
	bodies, err := k.js.Stream(ctx, streams.Bodies)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, k.restore(ctx)
	}
	if err != nil {
		return 0, fmt.Errorf("retention: looking up %s: %w", streams.Bodies, err)
	}
	if created := bodies.CachedInfo().Created; !created.Equal(k.created) {
		// Made again since the last pass (by this relay or another): its
		// sequences start over.
		k.created, k.purged = created, 0
	}
	state := bodies.CachedInfo().State
	last := state.LastSeq
	if last < k.purged || state.Msgs == 0 {
		return 0, nil // nothing to purge: an idle relay's pass is this one read
	}
	// With the lanes empty, the bound is now, by this host's clock, but
	// never past the newest body by more than the slack, by the server's:
	// a host clock ahead purges no body stored within the slack before
	// the newest.
	oldest := k.clock.Now()
	if !state.LastTime.IsZero() {
		oldest = minTime(oldest, state.LastTime.Add(BodySlack))
	}
	onLanes, err := oldestOnLanes(ctx, k.js)
	if err != nil {
		return 0, err
	}
	if !onLanes.IsZero() {
		oldest = minTime(oldest, onLanes)
	}
	cutoff := oldest.Add(-BodySlack)
	below, found, err := firstSince(ctx, k.js, streams.Bodies, cutoff)
	if err != nil {
		return 0, err
	}
	if !found {
		below = last + 1
	}
	below = min(below, last+1)
	if below <= 1 || below <= k.purged {
		return 0, nil
	}
	if err := bodies.Purge(ctx, jetstream.WithPurgeSequence(below)); err != nil {
		return 0, fmt.Errorf("retention: purging %s below sequence %d: %w", streams.Bodies, below, err)
	}
	k.purged = below
	return below, nil
}

// restore makes BODIES again, deleted since it was ensured.
func (k *BodyKeeper) restore(ctx context.Context) error {
	if err := streams.Restore(ctx, k.js, streams.Bodies, streams.Options{Logger: k.log}); err != nil {
		return fmt.Errorf("retention: making %s again: %w", streams.Bodies, err)
	}
	k.log.Warn("retention: " + streams.Bodies + " was deleted: made again; the deliveries whose bodies it held read them from " + streams.Events)
	return nil
}

// minTime is the earlier of a and b.
func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// oldestOnLanes returns when the oldest delivery waiting on a lane was
// stored (zero when none waits): one direct get per lane consumer, for the
// first message on its subjects. A work-queue stream holds only what is not
// acknowledged, so that is the oldest one its lane has not finished. The
// subscribers' overflows are not lanes: what they hold carries its body.
func oldestOnLanes(ctx context.Context, js jetstream.JetStream) (time.Time, error) {
	var oldest time.Time
	deliveries, err := js.Stream(ctx, streams.Deliveries)
	if err != nil {
		return oldest, fmt.Errorf("retention: looking up %s: %w", streams.Deliveries, err)
	}
	listCtx, cancel := context.WithCancel(ctx)
	list := deliveries.ListConsumers(listCtx)
	defer func() {
		// The lister's goroutine waits to hand over its next info until it
		// is read, whatever its context says: a return before the end must
		// read the rest, or the goroutine is left waiting for good.
		cancel()
		for range list.Info() {
		}
	}()
	for info := range list.Info() {
		filter := info.Config.FilterSubject
		if !streams.IsDelivery(filter) {
			continue
		}
		got, _, err := streams.GetBatch(ctx, js.Conn(), streams.Deliveries, streams.DirectGet{NextBySubj: filter, Batch: 1})
		if err != nil {
			return oldest, fmt.Errorf("retention: reading the oldest delivery on %s: %w", filter, err)
		}
		if len(got) > 0 && (oldest.IsZero() || got[0].Time.Before(oldest)) {
			oldest = got[0].Time
		}
	}
	if err := list.Err(); err != nil && !errors.Is(err, jetstream.ErrEndOfData) {
		return oldest, fmt.Errorf("retention: listing the lanes of %s: %w", streams.Deliveries, err)
	}
	return oldest, nil
}
