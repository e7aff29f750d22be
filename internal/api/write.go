package api

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/relay-dev/relay/internal/deadletter"
	"github.com/relay-dev/relay/internal/deliver"
	"github.com/relay-dev/relay/internal/subscribers"
)

// NewSubscriber is what a create takes: the id, the settings of
// [subscribers.Change], and the keys (none: one generated, of the kind
// signing names, hmac by default).
type NewSubscriber struct {
	ID string `json:"id"`
	subscribers.Change
	Secrets []string `json:"secrets,omitempty"`
	Signing string   `json:"signing,omitempty"`
}

// Created is a subscriber as a create or a rotation answers it: shown as
// `relay sub get --json` shows it, and the whsec_ secret relay generated,
// in this answer alone (an ed25519 key generated is shown by its public
// key, as always). A secret given is never in it.
type Created struct {
	subscribers.Shown
	Secret string `json:"secret,omitempty"`
}

// created is the answer for sub, with the secret among generated.
func created(sub subscribers.Subscriber, generated []string) Created {
	c := Created{Shown: sub.Show(false)}
	for _, k := range generated {
		if !deliver.IsSigningKey(k) {
			c.Secret = k
		}
	}
	return c
}

// CreateSubscriber adds a subscriber as `relay sub add` does (without
// --force): an id that exists is refused ([subscribers.ErrExists]).
func (o *Ops) CreateSubscriber(ctx context.Context, in NewSubscriber) (Created, error) {
	if err := subscribers.ValidateID(in.ID); err != nil {
		return Created{}, err
	}
	if err := in.Change.Check(); err != nil {
		return Created{}, err
	}
	keys, generated, err := subscribers.KeysFor(in.Secrets, in.Signing)
	if err != nil {
		return Created{}, err
	}
	sub := subscribers.Subscriber{ID: in.ID, Secrets: keys}
	in.Change.Apply(&sub)
	if err := o.Store.Put(ctx, sub, subscribers.Create()); err != nil {
		return Created{}, err
	}
	stored, err := o.Store.Get(ctx, in.ID)
	if err != nil {
		return Created{}, err
	}
	return created(stored, generated), nil
}

// SubscriberChange is what an update takes: the settings given, and the
// secrets when given (they replace the list, as --secret does).
type SubscriberChange struct {
	subscribers.Change
	Secrets []string `json:"secrets,omitempty"`
}

// UpdateSubscriber changes the settings given and keeps the others, as
// `relay sub update` does.
func (o *Ops) UpdateSubscriber(ctx context.Context, id string, in SubscriberChange) (subscribers.Shown, error) {
	if err := subscribers.ValidateID(id); err != nil {
		return subscribers.Shown{}, err
	}
	if in.Change.Empty() && in.Secrets == nil {
		return subscribers.Shown{}, invalid("give at least one setting to change, such as rate")
	}
	if err := in.Change.Check(); err != nil {
		return subscribers.Shown{}, err
	}
	sub, err := o.Store.Update(ctx, id, func(sub *subscribers.Subscriber) error {
		in.Change.Apply(sub)
		if in.Secrets != nil {
			sub.Secrets = subscribers.ReplaceKeys(sub.Secrets, in.Secrets)
		}
		return nil
	})
	if err != nil {
		return subscribers.Shown{}, err
	}
	return sub.Show(false), nil
}

// conflictError is an [ErrConflict] whose message is its line alone.
type conflictError struct {
	msg string
	err error
}

func (e *conflictError) Error() string   { return e.msg }
func (e *conflictError) Unwrap() []error { return []error{ErrConflict, e.err} }

// ErrConflict means a request would undo or drop what exists: a create of
// an id that exists, a removal that would drop deliveries not forced.
var ErrConflict = errors.New("conflict")

// DeleteSubscriber removes a subscriber as `relay sub rm` does: with
// deliveries waiting it refuses unless force, which drops them (they are
// not dead-lettered).
func (o *Ops) DeleteSubscriber(ctx context.Context, id string, force bool) (subscribers.Dropped, error) {
	n, err := subscribers.Remove(ctx, o.JS, o.Store, id, force)
	var w *subscribers.WaitingError
	if errors.As(err, &w) {
		return subscribers.Dropped{}, &conflictError{msg: w.Error() + ": force=true removes it and drops them (they are not dead-lettered); pause it to keep them", err: err}
	}
	if err != nil {
		return subscribers.Dropped{}, err
	}
	return n.Dropped, nil
}

// Rotation is what a rotation takes: the new keys (none: one of each kind
// the subscriber signs with, generated) and how long the old ones still
// sign (nil: [subscribers.DefaultGrace]).
type Rotation struct {
	Secrets []string              `json:"secrets,omitempty"`
	Grace   *subscribers.Duration `json:"grace,omitempty"`
}

// RotateSecret replaces a subscriber's keys as `relay sub rotate-secret`
// does.
func (o *Ops) RotateSecret(ctx context.Context, id string, in Rotation) (Created, error) {
	grace := subscribers.DefaultGrace
	if in.Grace != nil {
		grace = in.Grace.Std()
	}
	sub, generated, err := subscribers.Rotate(ctx, o.Store, id, in.Secrets, grace)
	if err != nil {
		return Created{}, err
	}
	return created(sub, generated), nil
}

// Pause holds every delivery to a subscriber as `relay sub pause` does,
// until until ("": until a resume).
func (o *Ops) Pause(ctx context.Context, id, until string) (subscribers.Shown, error) {
	if err := subscribers.ValidateID(id); err != nil {
		return subscribers.Shown{}, err
	}
	var at time.Time
	if until != "" {
		var err error
		if at, err = subscribers.ParseUntil(until, o.now()); err != nil {
			return subscribers.Shown{}, err
		}
	}
	sub, err := o.Store.Pause(ctx, id, at)
	if err != nil {
		return subscribers.Shown{}, err
	}
	return sub.Show(false), nil
}

// Resume ends a subscriber's pause and closes its circuit as `relay sub
// resume` does.
func (o *Ops) Resume(ctx context.Context, id string) (subscribers.Shown, error) {
	if _, _, err := subscribers.Resume(ctx, o.JS, o.Store, id); err != nil {
		return subscribers.Shown{}, err
	}
	return o.Subscriber(ctx, id)
}

// DisabledReason is why a subscriber the API disabled is disabled.
const DisabledReason = "disabled over the API"

// SetDisabled disables or enables a subscriber as `relay sub
// disable|enable` does.
func (o *Ops) SetDisabled(ctx context.Context, id string, disable bool) (subscribers.Shown, error) {
	if err := subscribers.ValidateID(id); err != nil {
		return subscribers.Shown{}, err
	}
	reason := ""
	if disable {
		reason = DisabledReason
	}
	if err := o.Store.SetDisabled(ctx, id, disable, reason); err != nil {
		return subscribers.Shown{}, err
	}
	return o.Subscriber(ctx, id)
}

// ReplayArgs are what a replay takes: the filter of `relay dlq ls` and the
// flags of `relay dlq replay`.
type ReplayArgs struct {
	deadletter.FilterArgs
	DryRun         bool
	Enable         bool
	IgnoreDeadline bool
}

// Replayed is what a replay did, or with dry_run would do.
type Replayed struct {
	DryRun    bool           `json:"dry_run"`
	Selected  int            `json:"selected"`
	Replayed  int            `json:"replayed"`
	Skipped   int            `json:"skipped"`
	Failed    int            `json:"failed"`
	SkippedBy map[string]int `json:"skipped_by,omitempty"`
	// Late, Disabled and Unknown are the plan's: entries past their
	// deadline, disabled subscribers, entries by removed subscriber.
	Late     int            `json:"late"`
	Disabled []string       `json:"disabled,omitempty"`
	Unknown  map[string]int `json:"unknown,omitempty"`
}

// ReplayDeadLetters replays the dead letters of a filter as `relay dlq
// replay` does, on this relay's lanes.
func (o *Ops) ReplayDeadLetters(ctx context.Context, in ReplayArgs) (Replayed, error) {
	f, err := deadletter.ParseFilter(in.FilterArgs, o.now())
	if err != nil {
		return Replayed{}, err
	}
	r := &deadletter.Replayer{JS: o.JS, Store: o.Store, SharedLanes: o.SharedLanes, IgnoreDeadline: in.IgnoreDeadline, Enable: in.Enable || in.DryRun}
	plan, err := r.Plan(ctx, f)
	if errors.Is(err, deadletter.ErrSubscriberDisabled) {
		return Replayed{}, invalid(err.Error() + "; give enable: true to enable and replay")
	}
	if err != nil && !errors.Is(err, deadletter.ErrMalformedEntry) {
		return Replayed{}, err
	}
	out := Replayed{DryRun: in.DryRun, Selected: plan.Selected, Late: plan.Late, Disabled: plan.Disabled}
	if len(plan.Unknown) > 0 {
		out.Unknown = plan.Unknown
	}
	if in.DryRun {
		err := deadletter.Scan(ctx, o.JS, f, func(e deadletter.Entry) error {
			if r.Skips(e) || plan.Unknown[e.Subscriber] > 0 {
				out.Skipped++
			}
			return nil
		})
		if err != nil && !errors.Is(err, deadletter.ErrMalformedEntry) {
			return Replayed{}, err
		}
		out.Replayed = plan.Selected - out.Skipped
		return out, nil
	}
	sum, err := r.Run(ctx, plan)
	out.Replayed, out.Skipped, out.Failed, out.SkippedBy = sum.Replayed, sum.Skipped, sum.Failed, sum.SkippedBy
	if err != nil {
		return out, fmt.Errorf("replay: %w", err)
	}
	return out, nil
}

// Purged is what a purge removed.
type Purged struct {
	Purged uint64 `json:"purged"`
}

// PurgeDeadLetters removes the dead letters of a filter for good, as
// `relay dlq purge --yes` does.
func (o *Ops) PurgeDeadLetters(ctx context.Context, args deadletter.FilterArgs) (Purged, error) {
	f, err := deadletter.ParseFilter(args, o.now())
	if err != nil {
		return Purged{}, err
	}
	n, err := deadletter.Purge(ctx, o.JS, f)
	return Purged{Purged: n}, err
}
