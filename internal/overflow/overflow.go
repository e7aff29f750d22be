package overflow

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sourcegraph/conc/pool"

	"github.com/relay-dev/relay/streams"
)

// ErrDirectGet is streams.ErrDirectGet: the server answered a direct get with
// something that is neither a message nor the end of the batch.
var ErrDirectGet = streams.ErrDirectGet

// readBatch is how many messages one direct get asks for. The server caps
// a batch by its own limits too; the reader follows whatever it sends.
const readBatch = 256

// readBytes bounds the bodies one [Read] returns (the server sends at least
// one message, whatever its size): a refill's copies need that much room in
// DELIVERIES until its purge, so a small stream, or one nearly full, is
// refilled in small steps rather than not at all.
const readBytes = 1 << 20

// Put stores a copy of a DELIVERIES message on its subscriber's overflow
// subject and returns once it is stored, so the caller may then ack the
// original. seq is the original's DELIVERIES sequence: it makes the copy's
// Nats-Msg-Id, so a crash between Put and the ack stores one copy.
//
// The ids relay gives its own copies in DELIVERIES (overflow-<seq>,
// refill-<seq>, retry-<id>) have no dot, so none can equal a fan-out copy's
// <event id>.<subscriber> and be taken for its duplicate.
func Put(ctx context.Context, js jetstream.JetStream, subscriber string, body []byte, header nats.Header, seq uint64) error {
	f, err := PutAsync(js, subscriber, body, header, seq)
	if err != nil {
		return err
	}
	select {
	case <-f.Ok():
		return nil
	case err := <-f.Err():
		return fmt.Errorf("overflow: storing a delivery for %s: %w", subscriber, err)
	case <-ctx.Done():
		return fmt.Errorf("overflow: storing a delivery for %s: %w", subscriber, ctx.Err())
	}
}

// Msg is one message read from an overflow subject.
type Msg struct {
	// Seq is its DELIVERIES sequence.
	Seq uint64
	// Header holds the message's own headers (no Nats-* header).
	Header nats.Header
	// Data is its body, exactly as stored.
	Data []byte
}

// Read returns up to n messages of the subscriber's overflow, oldest first,
// from sequence from on (0: the first). It asks the server for batches with
// a direct get by subject, so it costs one request per readBatch messages
// whatever the backlog. An empty result means the overflow holds nothing
// from that sequence on.
func Read(ctx context.Context, nc *nats.Conn, subscriber string, from uint64, n int) ([]Msg, error) {
	var out []Msg
	next := max(from, 1)
	budget := readBytes
	for len(out) < n && budget > 0 {
		batch, done, err := readOnce(ctx, nc, streams.OverflowSubject(subscriber), next, min(readBatch, n-len(out)), budget)
		if err != nil {
			return out, err
		}
		out = append(out, batch...)
		for _, m := range batch {
			budget -= len(m.Data)
		}
		if done || len(batch) == 0 {
			break
		}
		next = batch[len(batch)-1].Seq + 1
	}
	return out, nil
}

// readOnce sends one batched direct get; done reports that the subject has
// nothing after what it returned.
func readOnce(ctx context.Context, nc *nats.Conn, subject string, from uint64, n, maxBytes int) ([]Msg, bool, error) {
	got, done, err := streams.GetBatch(ctx, nc, streams.Deliveries, streams.DirectGet{Seq: from, NextBySubj: subject, Batch: n, MaxBytes: maxBytes})
	msgs := make([]Msg, 0, len(got))
	for _, m := range got {
		msgs = append(msgs, Msg{Seq: m.Seq, Header: streams.CopyHeader(m.Header, 1), Data: m.Data})
	}
	if err != nil {
		return msgs, false, fmt.Errorf("overflow: %w", err)
	}
	return msgs, done, nil
}

// Refiller brings a subscriber's overflow back to its lane.
type Refiller struct {
	js     jetstream.JetStream
	stream jetstream.Stream
	late   Late
	// leases make one relay at a time refill a subscriber (nil: this relay
	// refills as if alone).
	leases *leases
}

// Late decides, as a refill reads it, whether a message of a subscriber's
// overflow can no longer be sent (its deadline passed while it waited). It
// returns nil to bring m back, or the function that settles m in place of
// that (stores its DLQ copy): the refill runs the settles of one read
// concurrently, since each waits for a PubAck, and purges a message only
// once its settle returned nil. Late itself must not block.
type Late func(subscriber string, m Msg) (settle func(ctx context.Context) error)

// settleWorkers bounds the settles one refill runs at once: enough that a
// read full of late messages costs a few round trips, not one per message.
const settleWorkers = 32

// NewRefiller returns a Refiller on js's DELIVERIES stream. late may be
// nil: everything read is brought back.
func NewRefiller(ctx context.Context, js jetstream.JetStream, late Late) (*Refiller, error) {
	stream, err := js.Stream(ctx, streams.Deliveries)
	if err != nil {
		return nil, fmt.Errorf("overflow: %w", err)
	}
	leases, err := openLeases(ctx, js)
	if err != nil {
		return nil, err
	}
	return &Refiller{js: js, stream: stream, late: late, leases: leases}, nil
}

// Busy reports, without asking NATS, whether another relay was bringing the
// subscriber's overflow back when this one last tried: a [Refiller.Refill]
// now would return [ErrLeased] at once. A lane asks before it starts one.
func (r *Refiller) Busy(subscriber string) bool { return r.leases.busy(subscriber) }

// Refill brings back up to n of the subscriber's oldest overflowed
// deliveries, from sequence from on, to subject (its lane's): each is
// republished with Relay-Overflow-Seq and waits for its PubAck (or, when
// the Refiller's Late takes it, is settled there), then what was read is
// purged. It returns how many new copies it stored (a copy another
// relay had brought back already is not counted), the sequence to read from
// next time, and whether the overflow may hold more.
//
// It holds the subscriber's refill lease while it works (see doc.go): when
// another relay holds it, it reads nothing and returns [ErrLeased] with more
// set.
func (r *Refiller) Refill(ctx context.Context, subscriber, subject string, from uint64, n int) (moved int, next uint64, more bool, err error) {
	if r.leases == nil {
		return r.refill(ctx, subscriber, subject, from, n, time.Time{}, time.Time{})
	}
	ls, ok, err := r.leases.take(ctx, subscriber)
	if err != nil {
		return 0, from, true, err
	}
	if !ok {
		return 0, from, true, ErrLeased
	}
	defer func() {
		if !errors.Is(err, errUnanswered) {
			r.leases.release(ctx, ls, err == nil && !more)
		}
		// Else a write may still land: the lease is left to run out, so
		// that no relay reads what it may have stored before it is purged.
	}()
	return r.refill(ctx, subscriber, subject, from, n, r.leases.until(ls), r.leases.expires(ls))
}

// errUnanswered marks a refill some of whose writes got no answer in time:
// they may be stored still.
var errUnanswered = errors.New("overflow: writes not answered in time")

// refill is [Refiller.Refill] once the lease is held, until it stops surely
// holding (zero: no lease). Its reads, writes and their waits end by then,
// so that what it stored is purged before another relay can take the lease
// and read the same messages (an eviction would dead-letter what this one
// stored on the lane): only the purge comes later, and ends when the lease
// expires.
func (r *Refiller) refill(ctx context.Context, subscriber, subject string, from uint64, n int, until, expires time.Time) (moved int, next uint64, more bool, err error) {
	purgeCtx := ctx
	if !until.IsZero() {
		var cancel, cancelPurge context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, until)
		defer cancel()
		purgeCtx, cancelPurge = context.WithDeadline(purgeCtx, expires)
		defer cancelPurge()
	}
	msgs, err := Read(ctx, r.js.Conn(), subscriber, from, n)
	next = from
	if len(msgs) == 0 {
		return 0, next, err != nil, err
	}
	futures := make([]jetstream.PubAckFuture, 0, len(msgs))
	var settles []func(context.Context) error // by index; nil: not taken
	for i, m := range msgs {
		if r.late != nil {
			if settle := r.late(subscriber, m); settle != nil {
				if settles == nil {
					settles = make([]func(context.Context) error, len(msgs))
				}
				settles[i] = settle
				futures = append(futures, nil)
				continue
			}
		}
		m.Header.Set(streams.HeaderOverflowSeq, strconv.FormatUint(m.Seq, 10))
		f, perr := r.js.PublishMsgAsync(&nats.Msg{Subject: subject, Header: m.Header, Data: m.Data},
			jetstream.WithMsgID(refillID(m.Seq)))
		if perr != nil {
			err = perr
			break
		}
		futures = append(futures, f)
	}
	failed := err
	settled := settleAll(ctx, settles[:min(len(settles), len(futures))])
	// ok[i]: msgs[i] is safe elsewhere (its copy stored, settled, or
	// spilled), so it may be purged. Every outcome is looked at, past a
	// failure too: a message settled or stored but left in overflow would
	// be brought back again, and both delivered and dead-lettered, or sent
	// twice.
	ok := make([]bool, len(futures))
	var spill []int
	w := newAckWait(ctx)
	defer w.stop()
	maybeStored := false
	for i, f := range futures {
		if f == nil {
			if e := settled[i]; e != nil {
				// A settle cut short (a dead letter whose PubAck had not
				// come when the lease's time ran out) may be stored.
				maybeStored = maybeStored || errors.Is(e, streams.ErrUnanswered) || errors.Is(e, context.DeadlineExceeded)
				failed = cmp.Or(failed, e)
				continue
			}
			ok[i] = true
			continue
		}
		ack, answered, e := w.await(f)
		if !answered {
			continue
		}
		switch {
		case e == nil:
			ok[i] = true
			if !ack.Duplicate {
				moved++
			}
		case streams.NoRoom(e):
			spill = append(spill, i)
		default:
			failed = cmp.Or(failed, e)
		}
	}
	if w.over != nil {
		failed = cmp.Or(failed, fmt.Errorf("%w: %w", errUnanswered, w.over))
	}
	if maybeStored && !errors.Is(failed, errUnanswered) {
		failed = fmt.Errorf("%w: %w", errUnanswered, failed)
	}
	if len(spill) > 0 {
		// A copy the lane refused goes to RETRIES only under a lease that
		// surely holds: a relay that took it over since may have stored the
		// same copy on the lane, and the two would both be delivered. Left
		// in overflow, the next holder brings it back.
		e := errLeaseLost
		if until.IsZero() || time.Now().Before(until) {
			e = r.spill(ctx, subscriber, msgs, spill, ok)
		}
		failed = cmp.Or(failed, e)
	}
	// The prefix whose messages are all safe is purged at once; a safe one
	// past the first that is not is deleted on its own.
	stored := 0
	for stored < len(ok) && ok[stored] {
		stored++
	}
	err = failed
	if stored > 0 {
		next = msgs[stored-1].Seq + 1
		if perr := r.stream.Purge(purgeCtx, jetstream.WithPurgeSubject(streams.OverflowSubject(subscriber)), jetstream.WithPurgeSequence(next)); perr != nil {
			// The copies are stored: a later purge from a later sequence
			// removes these too, and a reader before it is deduplicated.
			err = cmp.Or(err, fmt.Errorf("overflow: purging %s: %w", subscriber, perr))
		}
	}
	for i := stored; i < len(ok); i++ {
		if !ok[i] {
			continue
		}
		if derr := r.stream.DeleteMsg(purgeCtx, msgs[i].Seq); derr != nil && !errors.Is(derr, jetstream.ErrMsgNotFound) {
			err = cmp.Or(err, fmt.Errorf("overflow: removing %s's delivery %d: %w", subscriber, msgs[i].Seq, derr))
		}
	}
	if stored == 0 && err != nil {
		return moved, next, true, fmt.Errorf("overflow: bringing back %s: %w", subscriber, err)
	}
	return moved, next, true, err
}

// spill stores the messages of msgs at the indices given, whose copies
// DELIVERIES refused for want of room, in RETRIES instead, due at once on
// retries.due.<subscriber>: the retry mover puts them on the subscriber's
// lane as soon as DELIVERIES takes them, and the purge that follows frees
// their room in overflow. So the way out of a full DELIVERIES needs no room
// in it. Each is marked in ok once stored; the Nats-Msg-Id
// spill-<overflow sequence> makes two relays spilling one message store
// one copy.
func (r *Refiller) spill(ctx context.Context, subscriber string, msgs []Msg, idx []int, ok []bool) error {
	futures := make([]jetstream.PubAckFuture, len(idx))
	var failed error
	for j, i := range idx {
		m := msgs[i]
		// Not marked as brought back: it was not asked for by a queue with
		// room, and comes back whenever DELIVERIES takes it, so its lane
		// treats it as any new delivery (holds it in overflow again if its
		// subscriber cannot take it yet).
		h := streams.CopyHeader(m.Header, 0)
		h.Del(streams.HeaderOverflowSeq)
		f, err := r.js.PublishMsgAsync(&nats.Msg{Subject: streams.RetryDuePrefix + subscriber, Header: h, Data: m.Data},
			jetstream.WithMsgID(spillID(m.Seq)))
		if err != nil {
			failed = err
			futures = futures[:j]
			break
		}
		futures[j] = f
	}
	// Every outcome is looked at, past a failure too: a spilled message
	// left in overflow would come back twice.
	w := newAckWait(ctx)
	defer w.stop()
	for j, f := range futures {
		_, answered, err := w.await(f)
		if !answered {
			continue
		}
		if err != nil {
			failed = cmp.Or(failed, err)
			continue
		}
		ok[idx[j]] = true
	}
	if w.over != nil {
		failed = cmp.Or(failed, fmt.Errorf("%w: %w", errUnanswered, w.over))
	}
	if failed != nil {
		return fmt.Errorf("overflow: spilling %s to %s: %w", subscriber, streams.Retries, failed)
	}
	return nil
}

// settleAll runs the non-nil settles, at most settleWorkers at once, and
// returns their errors by index.
func settleAll(ctx context.Context, settles []func(context.Context) error) []error {
	if len(settles) == 0 {
		return nil
	}
	errs := make([]error, len(settles))
	p := pool.New().WithMaxGoroutines(settleWorkers)
	for i, settle := range settles {
		if settle != nil {
			p.Go(func() { errs[i] = settle(ctx) })
		}
	}
	p.Wait()
	return errs
}

// Backlogged is one relay's set of the subscribers whose queue has a backlog
// in overflow, kept by its lanes and read by its fan-out: a copy for such a
// subscriber goes straight to its overflow, behind its backlog, instead of
// onto its lane, where it would only be moved to overflow again, after the
// lane had handed out every message in front of it, lane-mates' included.
// So a backlog of a million costs one write a message less, and its
// lane-mates do not wait while the lane moves it. It is a hint: a subscriber
// it misses (one with a backlog on another relay only) gets its copies on
// its lane as usual. Safe for concurrent use; a nil set holds nobody.
type Backlogged struct {
	m sync.Map
}

// Set records whether a subscriber has a backlog.
func (b *Backlogged) Set(id string, backlog bool) {
	if b == nil {
		return
	}
	if backlog {
		b.m.Store(id, struct{}{})
	} else {
		b.m.Delete(id)
	}
}

// Has reports whether a subscriber has a backlog.
func (b *Backlogged) Has(id string) bool {
	if b == nil {
		return false
	}
	_, ok := b.m.Load(id)
	return ok
}

// Backlogs returns, by subscriber, how many deliveries wait in overflow. It
// reads the stream's per-subject counts once, so it costs one request for
// every subscriber that has a backlog, not one per message: relays call it
// every few seconds to find the backlogs no queue of theirs knows about (left
// by a relay that stopped, or by a peer).
func Backlogs(ctx context.Context, stream jetstream.Stream) (map[string]uint64, error) {
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(streams.OverflowPrefix+">"))
	if err != nil {
		return nil, fmt.Errorf("overflow: listing backlogs: %w", err)
	}
	out := make(map[string]uint64, len(info.State.Subjects))
	for subject, n := range info.State.Subjects {
		if id, ok := strings.CutPrefix(subject, streams.OverflowPrefix); ok && n > 0 {
			out[id] = n
		}
	}
	return out, nil
}

// PutAsync is [Put] without the wait: the copy is stored when the future
// says so, and only then may the original be acked.
func PutAsync(js jetstream.JetStream, subscriber string, body []byte, header nats.Header, seq uint64) (jetstream.PubAckFuture, error) {
	h := streams.CopyHeader(header, 0)
	h.Del(streams.HeaderOverflowSeq)
	m := &nats.Msg{Subject: streams.OverflowSubject(subscriber), Header: h, Data: body}
	f, err := js.PublishMsgAsync(m, jetstream.WithMsgID(putID(seq)))
	if err != nil {
		return nil, fmt.Errorf("overflow: storing a delivery for %s: %w", subscriber, err)
	}
	return f, nil
}

func putID(seq uint64) string { return "overflow-" + strconv.FormatUint(seq, 10) }

// SpillAsync stores, in place of a put that a full DELIVERIES refused, the
// delivery at DELIVERIES sequence seq in RETRIES, due at once
// (retries.due.<subscriber>): RETRIES holds no byte bound, so the lane
// can let the original go and free its room, and the retry mover puts it
// back on its lane once DELIVERIES takes it (its lane holds it again then
// if its subscriber still cannot take it). Without this way out, a full
// DELIVERIES made of one failing subscriber's deliveries stayed full: each
// of them waited for room to move out of the way.
func SpillAsync(js jetstream.JetStream, subscriber string, body []byte, header nats.Header, seq uint64) (jetstream.PubAckFuture, error) {
	h := streams.CopyHeader(header, 0)
	h.Del(streams.HeaderOverflowSeq)
	f, err := js.PublishMsgAsync(&nats.Msg{Subject: streams.RetryDuePrefix + subscriber, Header: h, Data: body}, jetstream.WithMsgID(spillID(seq)))
	if err != nil {
		return nil, fmt.Errorf("overflow: spilling a delivery for %s to %s: %w", subscriber, streams.Retries, err)
	}
	return f, nil
}

func refillID(seq uint64) string { return "refill-" + strconv.FormatUint(seq, 10) }

func spillID(seq uint64) string { return "spill-" + strconv.FormatUint(seq, 10) }

// pubAckWait bounds the wait for one batch's PubAcks, whatever the
// JetStream context's own timeout.
const pubAckWait = 10 * time.Second

// ackWait waits for the PubAcks of one batch, together no longer than
// pubAckWait or its context: past either, it takes only what has come.
type ackWait struct {
	ctx     context.Context
	timeout *time.Timer
	// over says why the wait ended; nil while it has not.
	over error
}

func newAckWait(ctx context.Context) *ackWait {
	return &ackWait{ctx: ctx, timeout: time.NewTimer(pubAckWait)}
}

func (w *ackWait) stop() { w.timeout.Stop() }

// await returns f's PubAck or its error; answered is false for one that
// had not come when the wait ended.
func (w *ackWait) await(f jetstream.PubAckFuture) (ack *jetstream.PubAck, answered bool, err error) {
	if w.over != nil {
		select {
		case ack = <-f.Ok():
			return ack, true, nil
		case err = <-f.Err():
			return nil, true, err
		default:
			return nil, false, nil
		}
	}
	select {
	case ack = <-f.Ok():
		return ack, true, nil
	case err = <-f.Err():
		return nil, true, err
	case <-w.timeout.C:
		w.over = fmt.Errorf("no PubAck within %v", pubAckWait)
	case <-w.ctx.Done():
		w.over = w.ctx.Err()
	}
	return nil, false, nil
}
