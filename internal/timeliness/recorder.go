package timeliness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/relay-dev/relay/streams"
)

// DefaultInterval is how often [Recorder.Run] writes the counts by default:
// often enough that `relay status` is at most a few seconds behind, rarely
// enough that a relay writes a busy subscriber's counts a dozen times a
// minute, not once per delivery.
const DefaultInterval = 5 * time.Second

// casAttempts bounds the compare-and-sets of one subscriber's counts in a
// flush: enough to win against a few relays flushing the same key at once,
// few enough that a flush never spins; what is not written waits for the
// next flush.
const casAttempts = 5

// finalFlushTimeout bounds the last flush of [Recorder.Run], made once its
// context is cancelled: a relay that stops must not wait long on a NATS
// that does not answer for figures that are not deliveries.
const finalFlushTimeout = 2 * time.Second

// Option configures a [Recorder] made by [NewRecorder].
type Option func(*Recorder)

// WithInterval sets how often [Recorder.Run] writes the counts (default
// [DefaultInterval]). A shorter interval makes `relay status` fresher at
// the cost of a write per changed subscriber and interval; a value of 0 or
// less keeps the default, since a Recorder that never writes is useless.
func WithInterval(d time.Duration) Option {
	return func(r *Recorder) {
		if d > 0 {
			r.interval = d
		}
	}
}

// WithLogger sets where failed flushes are reported (default
// slog.Default()); nil keeps the default.
func WithLogger(l *slog.Logger) Option {
	return func(r *Recorder) {
		if l != nil {
			r.log = l
		}
	}
}

// Recorder counts this relay's deadline outcomes per subscriber in memory
// and adds them to the relay_timeliness bucket every interval (see the
// package doc). It is safe for concurrent use; a nil *Recorder counts
// nothing, so that callers without a bucket need no checks.
type Recorder struct {
	kv       jetstream.KeyValue
	interval time.Duration
	log      *slog.Logger
	// flushing makes flushes one at a time, so that a caller's Flush and
	// Run's do not race each other for the same entries, losing
	// compare-and-sets to their own relay.
	flushing sync.Mutex
	// pending maps a subscriber id to its *pending, the counts not yet
	// written. An entry is made at the subscriber's first count and kept,
	// so that later counts neither lock nor allocate.
	pending sync.Map
	// id and writes name each write ([stored.Writer]), so that a write
	// whose reply was lost can be recognised as stored rather than made
	// again and counted twice.
	id     string
	writes atomic.Uint64
}

// stored is a value as the Recorder writes it: the counts, and which write
// of which Recorder made it. [Decode] reads the counts and ignores Writer.
type stored struct {
	Counts
	Writer string `json:"writer,omitempty"`
}

// pending is what a subscriber counted since the last write.
type pending struct {
	met, missed atomic.Uint64
}

// take returns what p holds and leaves it empty; what is counted meanwhile
// stays for the next take.
func (p *pending) take() Counts {
	return Counts{Met: p.met.Swap(0), Missed: p.missed.Swap(0)}
}

// giveBack returns counts that could not be written, to be written with
// the next flush.
func (p *pending) giveBack(c Counts) {
	p.met.Add(c.Met)
	p.missed.Add(c.Missed)
}

// NewRecorder returns a Recorder that writes to kv, the relay_timeliness
// bucket (streams.Ensure creates it). Nothing is written until [Recorder.Run]
// runs.
func NewRecorder(kv jetstream.KeyValue, opts ...Option) *Recorder {
	r := &Recorder{kv: kv, interval: DefaultInterval, log: slog.Default(), id: nuid.Next()}
	for _, opt := range opts {
		if opt != nil {
			opt(r)
		}
	}
	return r
}

// Met counts a delivery to subscriber that was accepted before its deadline.
// It is called once per such delivery, so it only adds to a counter in
// memory: no lock, no write, no allocation once the subscriber has a count.
func (r *Recorder) Met(subscriber string) {
	if r == nil {
		return
	}
	r.of(subscriber).met.Add(1)
}

// Missed counts a delivery to subscriber that was dead-lettered because its
// deadline had passed, or a retry would have landed after it. It costs what
// [Recorder.Met] costs.
func (r *Recorder) Missed(subscriber string) {
	if r == nil {
		return
	}
	r.of(subscriber).missed.Add(1)
}

// Forget drops what subscriber counted and has not been written yet, and
// the memory it holds, for a subscriber that was removed: its counts would
// otherwise bring its key back into the bucket after `relay sub rm` deleted
// it, for a later subscriber of the same id to inherit.
func (r *Recorder) Forget(subscriber string) {
	if r == nil {
		return
	}
	r.pending.Delete(subscriber)
}

// of returns the pending counts of subscriber, made at its first count.
func (r *Recorder) of(subscriber string) *pending {
	if p, ok := r.pending.Load(subscriber); ok {
		return p.(*pending)
	}
	p, _ := r.pending.LoadOrStore(subscriber, new(pending))
	return p.(*pending)
}

// Run writes the counts every interval until ctx is cancelled, then once
// more, within a short bound, so that a relay that stops cleanly loses none
// of what it counted. A flush that fails is logged and its counts kept for
// the next one: the figures wait out a NATS outage instead of stopping the
// relay. It returns nil once ctx is cancelled, whatever the last flush did,
// and [ErrNoBucket] at once for a Recorder without a bucket; a nil Recorder
// waits for ctx and returns nil, so that Run can always be started.
func (r *Recorder) Run(ctx context.Context) error {
	if r == nil {
		<-ctx.Done()
		return nil
	}
	if r.kv == nil {
		return ErrNoBucket
	}
	t := time.NewTicker(r.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			final, cancel := context.WithTimeout(context.WithoutCancel(ctx), finalFlushTimeout)
			defer cancel()
			if err := r.Flush(final); err != nil {
				r.log.Warn("deadline counts not written at the stop; relay status will miss them", "err", err)
			}
			return nil
		case <-t.C:
			if err := r.Flush(ctx); err != nil && ctx.Err() == nil {
				r.log.Warn("deadline counts not written, kept for the next flush", "err", err)
			}
		}
	}
}

// Flush adds what was counted since the last flush to the bucket now: a
// get and a compare-and-set for each subscriber whose counts changed,
// nothing for the others. Counts it could not write are kept for the next
// flush. After a failure that is not a lost race (NATS away, the context
// done) it stops, leaving the remaining subscribers' counts for the next
// flush rather than wait out a timeout for each; the error says how many
// subscribers' counts wait.
func (r *Recorder) Flush(ctx context.Context) error {
	if r == nil {
		return nil
	}
	if r.kv == nil {
		return ErrNoBucket
	}
	r.flushing.Lock()
	defer r.flushing.Unlock()
	var (
		first          error
		waiting, total int
		stopped        bool
	)
	r.pending.Range(func(key, value any) bool {
		id, p := key.(string), value.(*pending)
		if stopped {
			if p.met.Load() != 0 || p.missed.Load() != 0 {
				waiting++
				total++
			}
			return true
		}
		d := p.take()
		if d.zero() {
			return true
		}
		total++
		err := r.add(ctx, id, d)
		switch {
		case err == nil:
			return true
		case errors.Is(err, jetstream.ErrInvalidKey):
			// No id a subscriber can have: it would fail every flush.
			r.pending.Delete(id)
			r.log.Error("deadline counts dropped: not a subscriber id", "subscriber", id, "met", d.Met, "missed", d.Missed)
			return true
		}
		p.giveBack(d)
		waiting++
		if first == nil {
			first = err
		}
		stopped = !errors.Is(err, ErrContended)
		return true
	})
	if first != nil {
		return fmt.Errorf("timeliness: counts of %d of %d subscribers kept for the next flush: %w", waiting, total, first)
	}
	return nil
}

// add adds d to the stored counts of subscriber id: read the entry, write
// the sum against its revision (a create when there is none), and on a
// lost race read it again, up to [casAttempts] times.
func (r *Recorder) add(ctx context.Context, id string, d Counts) error {
	for range casAttempts {
		var (
			current  Counts
			revision uint64
		)
		e, err := r.kv.Get(ctx, id)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			// No counts yet, or deleted by `relay sub rm`: Create below
			// writes over a delete marker as well.
		case err != nil:
			return fmt.Errorf("timeliness: reading the counts of %s in %s: %w", id, streams.TimelinessBucket, err)
		default:
			revision = e.Revision()
			if current, err = Decode(e.Value()); err != nil {
				r.log.Warn("deadline counts unreadable, starting over", "subscriber", id, "err", err)
				current = Counts{}
			}
		}
		writer := r.id + "." + strconv.FormatUint(r.writes.Add(1), 10)
		value, err := json.Marshal(stored{Counts: current.add(d), Writer: writer})
		if err != nil {
			return fmt.Errorf("timeliness: encoding the counts of %s: %w", id, err)
		}
		err = r.write(ctx, id, value, revision)
		if err != nil && !lostRace(err) {
			// No answer (a timeout, the relay stopping): the write may be
			// stored all the same. The same write again, answered, says
			// which: stored now, or refused because the first one was (or
			// another relay wrote meanwhile), and then the entry names
			// its writer.
			again, cancel := context.WithTimeout(context.WithoutCancel(ctx), writtenTimeout)
			err = r.write(again, id, value, revision)
			cancel()
			if lostRace(err) && r.written(ctx, id, writer) {
				return nil
			}
		}
		if err == nil {
			return nil
		}
		if !lostRace(err) {
			return fmt.Errorf("timeliness: writing the counts of %s in %s: %w", id, streams.TimelinessBucket, err)
		}
	}
	return fmt.Errorf("%w on the counts of %s (%d attempts)", ErrContended, id, casAttempts)
}

// write stores value as the entry of id if its revision is still revision
// (0: if there is none).
func (r *Recorder) write(ctx context.Context, id string, value []byte, revision uint64) error {
	var err error
	if revision == 0 {
		_, err = r.kv.Create(ctx, id, value)
	} else {
		_, err = r.kv.Update(ctx, id, value, revision)
	}
	return err
}

// written reports whether the entry of id is the one write made: asked
// after a write was refused as a lost race, it tells whether the race was
// lost to that same write, sent before, whose reply did not come. It looks
// once, within a short bound of its own.
func (r *Recorder) written(ctx context.Context, id, writer string) bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), writtenTimeout)
	defer cancel()
	e, err := r.kv.Get(ctx, id)
	if err != nil {
		return false
	}
	var v stored
	return json.Unmarshal(e.Value(), &v) == nil && v.Writer == writer
}

// writtenTimeout bounds the look of [Recorder.written].
const writtenTimeout = 2 * time.Second

// lostRace reports whether a write failed because another relay wrote the
// entry since it was read: a create of a key that exists by now, or an
// update of a revision that is not the last (10071, or 10164 on a
// replicated bucket).
func lostRace(err error) bool {
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) &&
		(apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}
