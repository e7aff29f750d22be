package streams

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrNoStorage is returned when the JetStream account, or the server under it,
// cannot reserve even [minDeliveriesBytes] for DELIVERIES, or for an EVENTS
// it must bound: relay cannot start without a bounded DELIVERIES (a full
// one is what makes the fan-out wait instead of losing copies), nor let a
// bounded store take events it has no room to copy (see [Ensure]), and the
// error says which stream and what the account allows, so that an operator
// knows what to raise.
var ErrNoStorage = errors.New("no storage left in the JetStream account")

// Sizing of DELIVERIES (docs/streams.md, "Capacity"). A stream's max_bytes
// is reserved against the account's JetStream storage (and the server's
// max_file_store) when it is created; a stream with max_bytes -1 reserves
// nothing. DELIVERIES is the one relay stream that must be bounded, so it is
// the one that reserves.
const (
	// minDeliveriesBytes is the least DELIVERIES is created with: one copy
	// of the largest event EVENTS takes (960 KiB) and its headers must fit.
	minDeliveriesBytes = 1 << 20
	// advisedDeliveriesBytes is the least DELIVERIES should hold: room for
	// 16 copies of the largest event. Below it a few big events fill it,
	// and the fan-out waits on every burst. A smaller size, kept or
	// sized, is warned about.
	advisedDeliveriesBytes = 16 << 20
	// sizeUnit rounds the sizes relay chooses, so that they read well in
	// `nats stream info` and in the log.
	sizeUnit = 1 << 20
	// eventsCeiling is the most relay gives an EVENTS it bounds (half of
	// what DELIVERIES and ATTEMPTS leave): far above any store relay finds
	// bounded, it only starts [fit]'s halving on a server whose
	// max_file_store the account info does not show.
	eventsCeiling = 1 << 40
)

// quota is what the JetStream account lets relay reserve, as its account
// info says.
type quota struct {
	// known reports whether the account info was read; the other fields
	// are zero when it was not.
	known bool
	// limit is the account's file storage limit (the tier's, for an
	// account with limits per replica count), -1 when it sets none.
	limit int64
	// reserved is what the account's streams of that tier reserve now.
	reserved int64
	// perStream is the largest max_bytes the account allows one stream,
	// 0 or less when it sets none.
	perStream int64
	// replicas is what one byte of a stream's max_bytes counts for against
	// limit: the replica count for an account without tiers, else 1.
	replicas int64
}

// available is what one more stream can reserve, in bytes of max_bytes,
// and false when the account sets no limit (the server's own max_file_store
// may still refuse: see [fit]).
func (r quota) available() (int64, bool) {
	if !r.known || r.limit < 0 {
		return 0, false
	}
	return max(0, r.limit-r.reserved) / max(1, r.replicas), true
}

// accountQuota reads what the account allows streams of the given replicas.
// An account info that cannot be read leaves quota unknown, which [fit]
// treats as an account without limits: the server's answer to the create
// decides then.
func accountQuota(ctx context.Context, js jetstream.JetStream, replicas int) (quota, error) {
	var info *jetstream.AccountInfo
	err := AskAgain(ctx, func(ctx context.Context) error {
		var err error
		info, err = js.AccountInfo(ctx)
		return err
	})
	if err != nil {
		return quota{}, fmt.Errorf("reading the JetStream account's limits: %w", err)
	}
	tier, weight := info.Tier, int64(max(replicas, 1))
	// An account with limits per replica count reports them in tiers
	// named R1, R3…; its bytes are counted once whatever the replicas.
	// Without a tier for these replicas it says nothing of them: the
	// server's answer decides.
	if len(info.Tiers) > 0 {
		t, ok := info.Tiers["R"+strconv.Itoa(max(replicas, 1))]
		if !ok {
			return quota{}, nil
		}
		tier, weight = t, 1
	}
	return quota{
		known:     true,
		limit:     tier.Limits.MaxStore,
		reserved:  int64(tier.ReservedStore),
		perStream: tier.Limits.StoreMaxStreamBytes,
		replicas:  weight,
	}, nil
}

// target is the max_bytes DELIVERIES is given when relay creates it: def
// (DELIVERIES.json's 4 GiB) at most, half of what the account has left at
// most, so that EVENTS, RETRIES, DLQ and the buckets, which reserve nothing
// but store in the same account, keep the other half; and no more than the
// account allows one stream.
func (r quota) target(def int64) int64 {
	size := def
	if avail, ok := r.available(); ok {
		size = min(size, avail/2)
	}
	if r.perStream > 0 {
		size = min(size, r.perStream)
	}
	return roundDown(size)
}

// roundDown rounds a size down to [sizeUnit], leaving sizes under it alone.
func roundDown(n int64) int64 {
	if n < sizeUnit {
		return n
	}
	return n - n%sizeUnit
}

// fit finds the max_bytes of DELIVERIES, or of an EVENTS relay bounds
// (name), by asking the server: try creates (or updates) it with a size,
// and fit returns the size tried that the server took (probe) and the size
// the stream must end with (size). An
// account without limits on a server with a small max_file_store says
// nothing of it (its account info shows no limit), and the server refuses a
// stream that would reserve more than it has left with error 10047; so fit
// first tries twice the target, halving while the server refuses for lack
// of storage, and keeps half of the first size that fits: DELIVERIES never
// takes more than half of what the server had left. Below
// [minDeliveriesBytes] (EVENTS' largest event fits in it too) it gives up
// with [ErrNoStorage].
func fit(ctx context.Context, name string, r quota, def int64, try func(ctx context.Context, maxBytes int64) error) (probe, size int64, err error) {
	target := r.target(def)
	if target < minDeliveriesBytes {
		return 0, 0, noStorage(name, r, nil)
	}
	probe = 2 * target
	if avail, ok := r.available(); ok {
		probe = min(probe, avail)
	}
	if r.perStream > 0 {
		probe = min(probe, r.perStream)
	}
	for {
		err := try(ctx, probe)
		if err == nil {
			return probe, max(minDeliveriesBytes, roundDown(min(target, probe/2))), nil
		}
		if !storageExceeded(err) {
			return 0, 0, err
		}
		probe /= 2
		if probe < 2*minDeliveriesBytes {
			return 0, 0, noStorage(name, r, err)
		}
	}
}

// ErrNoRoomForRecords is returned (and logged by [Ensure], which goes on
// without it) when the account or the server cannot reserve even
// [minRecordsBytes] for ATTEMPTS.
var ErrNoRoomForRecords = errors.New("no storage left in the JetStream account for " + Attempts)

// minRecordsBytes is the least ATTEMPTS is created with: a few thousand
// records, enough for relay trace of the last moments.
const minRecordsBytes = 1 << 20

// fitRecords creates ATTEMPTS (try) with its max_bytes: def (ATTEMPTS.json's
// 1 GiB) at most, a quarter of DELIVERIES' max_bytes at most (deliveries,
// which DELIVERIES sized to half of what the account or the server had
// left, 0 when unknown; records never crowd out what is delivered), no more
// than the account allows one stream, halving while the server refuses for
// lack of storage, and no less than [minRecordsBytes]: below it,
// [ErrNoRoomForRecords].
func fitRecords(ctx context.Context, r quota, def, deliveries int64, try func(ctx context.Context, maxBytes int64) error) (int64, error) {
	size := def
	if deliveries > 0 {
		size = min(size, deliveries/4)
	}
	if r.perStream > 0 {
		size = min(size, r.perStream)
	}
	size = max(minRecordsBytes, roundDown(size))
	for {
		err := try(ctx, size)
		if err == nil || !storageExceeded(err) {
			return size, err
		}
		if size /= 2; size < minRecordsBytes {
			return 0, fmt.Errorf("%w, which needs at least %s for its attempt records (relay run --record-attempts=false does without them): %w",
				ErrNoRoomForRecords, FormatBytes(minRecordsBytes), err)
		}
	}
}

// noStorage is [ErrNoStorage] for stream name with what the account says,
// and the server's refusal when there was one.
func noStorage(name string, r quota, refusal error) error {
	what := "the server's JetStream storage (max_file_store) is used up"
	if avail, ok := r.available(); ok {
		what = fmt.Sprintf("the account allows %s of JetStream file storage and its streams reserve %s",
			FormatBytes(r.limit), FormatBytes(r.reserved))
		if refusal == nil {
			what += fmt.Sprintf(", leaving %s", FormatBytes(avail))
		}
	}
	if refusal != nil {
		return fmt.Errorf("%w for %s: relay gives it half of what is left, at least %s; %s: %w", ErrNoStorage, name, FormatBytes(minDeliveriesBytes), what, refusal)
	}
	return fmt.Errorf("%w for %s: relay gives it half of what is left, at least %s; %s", ErrNoStorage, name, FormatBytes(minDeliveriesBytes), what)
}

// storageExceeded reports whether the server refused a stream for lack of
// storage to reserve its max_bytes: 10047 on a server or account that has
// too little left, 10023 when a cluster finds no peers with room.
func storageExceeded(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	return apiErr.ErrorCode == codeStorageResourcesExceeded || apiErr.ErrorCode == codeInsufficientResources
}

// FormatBytes writes a stream size as relay's log and `relay status` show
// it: "unlimited" for -1 (or 0), else in the largest binary unit that keeps
// it above one, "4 GiB", "32 MiB", "1.5 KiB".
func FormatBytes(n int64) string {
	if n <= 0 {
		return "unlimited"
	}
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10) + " B"
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	v := float64(n) / float64(div)
	s := strconv.FormatFloat(v, 'f', 1, 64)
	if v == float64(int64(v)) {
		s = strconv.FormatInt(int64(v), 10)
	}
	return s + " " + string("KMGTP"[exp]) + "iB"
}

// advice is a limit a relay stream should not go under, and what happens
// when it does.
type advice struct {
	field string
	have  int64
	least int64
	// text writes a value of the limit.
	text func(int64) string
	why  string
}

// warnLimits logs a warning for each limit of cfg (max_bytes, max_msgs,
// max_age) tighter than relay advises: the definition's, and for
// DELIVERIES' bytes [advisedDeliveriesBytes] (relay sizes it down itself on
// a small account). The limits are kept all the same: they are the
// operator's to set. askedAge leaves the DLQ's max age alone, which
// --dlq-max-age set on purpose.
func warnLimits(log *slog.Logger, def, cfg jetstream.StreamConfig, askedAge bool) {
	if cfg.Name == Attempts {
		// A ring of records for relay trace: any size, any age works,
		// and keeps only less of the past.
		return
	}
	why := map[string]string{
		Deliveries: "a backlog past it makes the fan-out wait",
		DLQ:        "dead letters go sooner",
		Bodies:     "past it the fan-out waits for room, as for a full DELIVERIES",
	}[cfg.Name]
	advisedBytes := def.MaxBytes
	if cfg.Name == Deliveries {
		advisedBytes = advisedDeliveriesBytes
	}
	ageWhy := why
	if cfg.Name == Events {
		// relay run purges EVENTS itself, never of an event the fan-out
		// has not copied; a max_age of EVENTS' own knows nothing of that.
		ageWhy = "JetStream may delete events the fan-out has not copied yet, which relay run's own purge (--events-max-age) never does"
	}
	var checks []advice
	if cfg.Name != Events {
		// EVENTS discards new: past its max_bytes or max_msgs the
		// publisher is refused, and nothing it holds is lost. relay
		// bounds it itself on a bounded store.
		checks = append(checks,
			advice{"max_bytes", cfg.MaxBytes, advisedBytes, FormatBytes, why},
			advice{"max_msgs", cfg.MaxMsgs, def.MaxMsgs, countText, why})
	}
	if !askedAge {
		checks = append(checks, advice{"max_age", int64(cfg.MaxAge), int64(def.MaxAge), ageText, ageWhy})
	}
	for _, a := range checks {
		if a.have <= 0 || (a.least > 0 && a.have >= a.least) {
			continue
		}
		// The message names the stream and the limit: the logger holds
		// back a repeated message, and each must be seen.
		log.Warn(fmt.Sprintf("streams: %s has %s %s, under the %s relay advises: %s (nats stream edit %s to change it)",
			cfg.Name, a.field, a.text(a.have), a.text(a.least), a.why, cfg.Name))
	}
}

// countText writes a message count limit.
func countText(n int64) string {
	if n <= 0 {
		return "unlimited"
	}
	return strconv.FormatInt(n, 10)
}

// ageText writes a max age.
func ageText(n int64) string {
	if n <= 0 {
		return "unlimited"
	}
	return time.Duration(n).String()
}

// ErrLossyLimit is returned by [Ensure] for a limit on a stream that would
// make JetStream delete deliveries not yet made: any max_bytes, max_msgs or
// max_age on RETRIES, which must discard old (JetStream refuses message
// schedules on a discard-new stream), and a max_age on DELIVERIES. relay
// run refuses to start on one rather than lose what it holds without a dead
// letter; the error names the stream and the limit.
var ErrLossyLimit = errors.New("a limit would delete deliveries not yet made")

// lossyLimit returns [ErrLossyLimit] naming the first limit of cfg that
// would delete a delivery not yet made, nil when it has none.
func lossyLimit(cfg jetstream.StreamConfig) error {
	var checks []advice
	switch cfg.Name {
	case Retries:
		why := "JetStream would drop parked retries and scheduled deliveries past it, without a dead letter (" + Retries + " must discard old, for message schedules)"
		checks = []advice{
			{"max_bytes", cfg.MaxBytes, 0, FormatBytes, why},
			{"max_msgs", cfg.MaxMsgs, 0, countText, why},
			{"max_age", int64(cfg.MaxAge), 0, ageText, why},
		}
	case Deliveries:
		checks = []advice{{"max_age", int64(cfg.MaxAge), 0, ageText, "JetStream would drop deliveries older than it, without a dead letter"}}
	}
	for _, a := range checks {
		if a.have > 0 {
			return fmt.Errorf("%w: %s has %s %s: %s (nats stream edit %s to remove it)",
				ErrLossyLimit, cfg.Name, a.field, a.text(a.have), a.why, cfg.Name)
		}
	}
	return nil
}
