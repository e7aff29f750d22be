package fanout

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sourcegraph/conc"

	"github.com/relay-dev/relay/internal/attempts"
	"github.com/relay-dev/relay/internal/backlog"
	"github.com/relay-dev/relay/internal/clock"
	"github.com/relay-dev/relay/internal/consumer"
	"github.com/relay-dev/relay/internal/deadletter"
	"github.com/relay-dev/relay/internal/filter"
	"github.com/relay-dev/relay/internal/metrics"
	"github.com/relay-dev/relay/internal/opevent"
	"github.com/relay-dev/relay/internal/retry"
	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/internal/timeliness"
	"github.com/relay-dev/relay/internal/tracing"
	"github.com/relay-dev/relay/streams"
)

// ConsumerName is the durable pull consumer on EVENTS that every relay
// shares.
const ConsumerName = "fanout"

// Backlogs is what the fan-out learns from the lanes: which subscribers
// have a backlog in overflow on this relay.
type Backlogs interface {
	// Has reports whether id has a backlog.
	Has(id string) bool
}

// noBacklogs has none.
type noBacklogs struct{}

func (noBacklogs) Has(string) bool { return false }

// Config wires a fan-out.
type Config struct {
	// JS is the JetStream context; required.
	JS jetstream.JetStream
	// Subscribers is the live subscriber view; required.
	Subscribers *subscribers.Live
	// SharedLanes is the number of shared lanes (--lanes); required.
	SharedLanes int
	// AckWait is the fan-out consumer's ack wait: how long an event whose
	// relay stopped renewing it (a crash, a connection lost) waits before
	// JetStream redelivers it; the events a running fan-out holds are
	// renewed every quarter of it (see renewalsPerAckWait). Defaults to
	// 30s.
	AckWait time.Duration
	// Backlogs holds the subscribers whose lanes have a backlog in
	// overflow on this relay: their copies go to their overflow at once,
	// behind the backlog, rather than through a lane that would move them
	// there after every message ahead of them (relay run gives the lanes
	// and the fan-out the same [overflow.Backlogged]). Nil: none has one.
	Backlogs Backlogs
	// Backlog decides which copies are dead-lettered as backlog instead of
	// queued (see package backlog). Run makes and runs one when it is nil.
	Backlog *backlog.Gauge
	// shed remembers the verdicts of events not yet acked; Run makes it.
	shed *shedMemory
	// held are the events received and not yet acked or handed back,
	// renewed until then; Run makes it.
	held *consumer.Held
	// queued tells Backlog of each queued copy's PubAck as it comes; Run
	// makes it.
	queued *queuedCopies
	// Horizon is how far past its publication an event may be due
	// (Relay-Deliver-At): the age past which relay purges EVENTS of the
	// events it has copied (relay run --events-max-age; zero: none). Run
	// lowers it to EVENTS' own max_age when an operator set a shorter one,
	// and takes that when Horizon is zero. A copy due later would outlive
	// the event it came from, so it is dead-lettered as expired at once
	// instead of being held.
	Horizon time.Duration
	// Clock decides whether an event is due yet; defaults to the real one.
	Clock clock.Clock
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Metrics may be nil.
	Metrics *metrics.Metrics
	// Ops counts the copies dead-lettered here for relay.delivery.dead;
	// nil counts nothing.
	Ops *opevent.Publisher
	// Records gets the record of each event's fan-out (relay trace): where
	// each copy went, which subscribers a filter skipped; nil records
	// nothing.
	Records *attempts.Recorder
	// Timeliness counts the copies dead-lettered here for their deadline;
	// may be nil.
	Timeliness *timeliness.Recorder
	// Tracer makes a span of each event's fan-out, whose trace context
	// then replaces the event's on the copies; nil makes none, and the
	// event's own traceparent and tracestate ride on its copies as its
	// other headers do.
	Tracer *tracing.Tracer
}

// ErrConfig is returned for a Config missing a required field.
var ErrConfig = errors.New("fanout: invalid config")

// retryDelay is how long an event whose copies could not all be published
// (DELIVERIES full, no leader) waits before it is tried again.
const retryDelay = 2 * time.Second

// BodyShared is the size past which the body of an event fanned out to
// several subscribers is stored once, in BODIES, and its deliveries carry
// its EVENTS sequence (Relay-Event-Seq) instead of a copy: a copy's own
// headers weigh a few hundred bytes, so below it a copy of the body costs
// about as much as the reference, and one write less.
const BodyShared = 512

// copyHeaderBytes is about what a copy whose body is shared weighs in
// DELIVERIES: its subject and headers.
const copyHeaderBytes = 400

// onLanes counts the subscribers whose copies go on their lanes rather than
// behind a backlog in their overflow.
func onLanes(subs []*subscribers.Subscriber, backlogs Backlogs) int {
	n := 0
	for _, sub := range subs {
		if !backlogs.Has(sub.ID) {
			n++
		}
	}
	return n
}

// pending is an event whose copies are on their way.
type pending struct {
	msg jetstream.Msg
	// body is the PubAck of its body in BODIES, nil when its copies carry
	// the body themselves.
	body    jetstream.PubAckFuture
	futures []jetstream.PubAckFuture
	// subs[i] is the subscriber of futures[i], for the metrics.
	subs []*subscribers.Subscriber
	// shed[i] says that futures[i] is a DLQ copy (reason backlog) rather
	// than a queued one; nil when the event shed none.
	shed []bool
	// placed[i] is where futures[i]'s copy went, for the fan-out record;
	// nil when nothing is recorded. filtered are the subscribers a content
	// filter skipped, disabled those its type matched that are disabled.
	placed   []attempts.Copy
	filtered []string
	disabled []string
	// id is the event's id, for its record.
	id  string
	err error
	// span is the event's fan-out span, ended once its copies are
	// answered for (the zero Span when tracing is off).
	span tracing.Span
}

// Run fans out events until ctx is cancelled, then stops pulling, waits for
// the copies already published and acknowledges their events.
func Run(ctx context.Context, cfg Config) error {
	if cfg.JS == nil || cfg.Subscribers == nil || cfg.SharedLanes <= 0 {
		return ErrConfig
	}
	if cfg.AckWait == 0 {
		cfg.AckWait = 30 * time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real
	}
	if cfg.Backlogs == nil {
		cfg.Backlogs = noBacklogs{}
	}
	stream, err := cfg.JS.Stream(ctx, streams.Events)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("fanout: reading EVENTS' max age: %w", err)
	}
	cfg.Horizon = horizon(cfg.Horizon, stream.CachedInfo().Config.MaxAge)
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	// The copies are published with their own JetStream context so that its
	// async-publish window is the fan-out's alone; the timeout makes a lost
	// PubAck an error instead of a wait without end. Its handlers tell the
	// gauge of each queued copy's answer as it comes.
	queued := &queuedCopies{subs: map[*nats.Msg]string{}}
	js, err := jetstream.New(cfg.JS.Conn(),
		jetstream.WithPublishAsyncMaxPending(4096),
		jetstream.WithPublishAsyncTimeout(10*time.Second),
		jetstream.WithPublishAsyncAckHandler(func(_ jetstream.JetStream, m *nats.Msg, _ *jetstream.PubAck) { queued.answered(m, nil) }),
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, m *nats.Msg, err error) { queued.answered(m, err) }))
	if err != nil {
		return fmt.Errorf("fanout: %w", err)
	}
	view := &viewSync{live: cfg.Subscribers, log: log, signal: newChangeSignal(ctx, js), dirty: true}
	defer view.signal.close()
	if view.signal != nil {
		log.Info("fanout: subscriber changes signalled by the server; no bucket read per batch")
	} else {
		log.Info("fanout: on a cluster (or without the signal's subscription), the subscriber view is confirmed before each batch")
	}
	cfg.shed = &shedMemory{}
	cfg.held = &consumer.Held{}
	in := make(chan jetstream.Msg, inBuffer)
	var wg conc.WaitGroup
	if cfg.Backlog == nil {
		gauge, err := backlog.New(backlog.Config{JS: cfg.JS, Subscribers: cfg.Subscribers, Logger: log, Metrics: cfg.Metrics, Ops: cfg.Ops,
			Records: cfg.Records, Clock: cfg.Clock})
		if err != nil {
			return fmt.Errorf("fanout: %w", err)
		}
		cfg.Backlog = gauge
		gaugeCtx, stopGauge := context.WithCancel(ctx)
		var gaugeWG conc.WaitGroup
		gaugeWG.Go(func() { _ = gauge.Run(gaugeCtx) })
		defer gaugeWG.Wait()
		defer stopGauge()
	}
	// The events held are renewed until the last is answered for, after
	// the copier and every event's settling have ended.
	keepCtx, stopKeep := context.WithCancel(context.Background())
	var keepWG conc.WaitGroup
	keepWG.Go(func() { cfg.held.KeepAlive(keepCtx, cfg.AckWait/renewalsPerAckWait) })
	defer keepWG.Wait()
	defer stopKeep()
	queued.gauge, cfg.queued = cfg.Backlog, queued
	wg.Go(func() { copyEvents(ctx, js, cfg, view, in, log) })
	defer wg.Wait()
	defer close(in)
	return consumer.Run(ctx, js, streams.Events, jetstream.ConsumerConfig{
		Durable:       ConsumerName,
		Description:   "relay fan-out: copies each event to its subscribers",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       cfg.AckWait,
		MaxDeliver:    -1,
		MaxAckPending: eventsPending,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}, eventPull, log, func(msg jetstream.Msg) {
		cfg.held.Add(msg)
		in <- msg
	})
}

// horizon is the shorter of the two ages that bound how long EVENTS keeps an
// event: relay's own purge (retention) and EVENTS' max_age, each zero when
// not set; zero when neither is.
func horizon(retention, maxAge time.Duration) time.Duration {
	switch {
	case retention <= 0:
		return max(maxAge, 0)
	case maxAge <= 0:
		return retention
	}
	return min(retention, maxAge)
}

// inBuffer is how many pulled events may wait for the copier.
const inBuffer = 1024

// The fan-out's consumer on EVENTS.
const (
	// eventPull is how many events one pull request asks for.
	eventPull = copyBatch
	// eventsPending is the fan-out consumer's MaxAckPending: how many
	// events may be pulled and not yet acked. An event is acked once all
	// its copies are stored, whatever became of the events before it, so
	// this is the fan-out's window: a batch being copied, the one pulled
	// behind it, and the copies of earlier ones still waiting for their
	// PubAcks.
	eventsPending = 16 * copyBatch
	// renewalsPerAckWait is how many times an ack wait the fan-out renews
	// every event it holds (pulled, waiting to be copied, or waiting for
	// its copies' PubAcks): an event may wait longer than its ack wait on
	// this relay (thousands ahead of it, PubAcks up to 10 s late), and one
	// redelivered to another relay meanwhile would be fanned out there with
	// none of this relay's verdicts (see shedMemory). One round lost or
	// late still leaves time for the next.
	renewalsPerAckWait = 4
)

// copyEvents copies the events of in, and those of its own to be tried
// again, until in is closed, and then waits for every event's settling
// (see settle). It takes them in batches of what has arrived meanwhile, so
// that one view sync covers every event received while the previous one
// was on its way: a steady stream of events costs at most one sync per
// round trip, not one per event, and an event waits for at most two of
// them.
func copyEvents(ctx context.Context, js jetstream.JetStream, cfg Config, view *viewSync, in <-chan jetstream.Msg, log *slog.Logger) {
	// Each event is settled on its own as its PubAcks come back: a late
	// PubAck holds back its own event's ack, never the events after it.
	// At most eventsPending are on their way at once (the consumer's
	// MaxAckPending).
	var settling conc.WaitGroup
	defer settling.Wait()
	// again brings back the events whose copies could not all be stored,
	// to be fanned out again here (see settle).
	again := make(chan jetstream.Msg)
	batch := make([]jetstream.Msg, 0, copyBatch)
	retried := map[jetstream.Msg]bool{}
	for {
		select {
		case msg, ok := <-in:
			if !ok {
				return
			}
			batch = append(batch[:0], msg)
		case msg := <-again:
			batch = append(batch[:0], msg)
			retried[msg] = true
		}
	more:
		for len(batch) < copyBatch {
			select {
			case m, ok := <-in:
				if !ok {
					break more
				}
				batch = append(batch, m)
			case m := <-again:
				batch = append(batch, m)
				retried[m] = true
			default:
				break more
			}
		}
		if !view.upTo(ctx, batch) || ctx.Err() != nil {
			// The view is behind the bucket (a burst of writes it has not
			// folded yet), or stopping: it follows the bucket no more. Either
			// way a subscriber added or disabled just now would be missed.
			// The batch is handed back, delayed, for a view that can be
			// confirmed: this relay's once it has caught up, or the next
			// fan-out's (and past this one's last pull request).
			for _, m := range batch {
				_ = cfg.held.NakWithDelay(m, retryDelay)
			}
			clear(batch)
			clear(retried)
			continue
		}
		for _, m := range batch {
			p := publishCopies(ctx, js, cfg, m, retried[m])
			if p.err == nil && p.body == nil && len(p.futures) == 0 {
				// Nothing to wait for, nor to try again (which would
				// wait here for this loop).
				settle(ctx, p, log, cfg, again)
				continue
			}
			settling.Go(func() { settle(ctx, p, log, cfg, again) })
		}
		clear(batch)
		clear(retried)
	}
}

// copyBatch bounds the events one view sync covers.
const copyBatch = 512

// viewSync keeps the subscriber view at least as recent as the events it
// fans out: a subscriber whose `relay sub add` returned before an event was
// published gets that event, whatever the lag of this relay's watch. An
// event is never copied with a view that could not be confirmed: it waits
// for the view up to syncTimeout, and is then handed back (see
// copyEvents), with no limit on how often: the fan-out consumer has no
// MaxDeliver, so a view that stays behind for minutes holds the events in
// EVENTS for as long, and costs a wait of syncTimeout per pulled batch.
//
// A sync covers by stream sequence, not by clock: when an event is
// delivered, the server reports how many messages of EVENTS wait behind it
// for the fan-out (NumPending), so every event up to its sequence plus that
// count was stored before the sync that follows its delivery began. One
// sync thus covers a whole pulled batch, and events arriving one by one
// cost at most one small request per round trip (see copyEvents), answered
// by the bucket's stream ([subscribers.Live.Sync]). On a single server the
// fan-out needs even less: a sync after each change of the bucket, and none
// while nothing changes (see changeSignal).
type viewSync struct {
	live *subscribers.Live
	log  *slog.Logger
	// covered is the highest EVENTS sequence known to have been stored
	// before the last sync that succeeded began.
	covered uint64
	// signal, when the server allows it (see changeSignal), replaces the
	// sync of every batch with one after each change: dirty says that the
	// signal saw something since the last sync that succeeded.
	signal *changeSignal
	dirty  bool
	// failing says that the last sync did not confirm the view: a warning
	// says so once, not per batch.
	failing bool
	// handedBack counts the events handed back meanwhile.
	handedBack int
}

// syncTimeout bounds one wait for the view; past it the batch is handed
// back, and a warning says so once.
const syncTimeout = 2 * time.Second

// upTo brings the view up to date unless every event of batch is covered
// by the last sync; false when it could not be confirmed.
func (v *viewSync) upTo(ctx context.Context, batch []jetstream.Msg) bool {
	if v.signal != nil {
		// Drained before the sync, so that the sync covers what it held.
		if v.signal.changed() {
			v.dirty = true
		}
		if v.dirty && !v.sync(ctx, len(batch)) {
			return false
		}
		v.dirty = false
		return true
	}
	var covers uint64
	for _, msg := range batch {
		md, err := msg.Metadata()
		if err != nil || md.Sequence.Stream <= v.covered {
			continue
		}
		covers = max(covers, md.Sequence.Stream+md.NumPending)
	}
	if covers == 0 {
		return true
	}
	if !v.sync(ctx, len(batch)) {
		return false
	}
	v.covered = max(v.covered, covers)
	return true
}

// sync brings the view up to date; false when it could not be confirmed
// (the batch of n events is then handed back: a warning says so when the
// first is, and a line when the view is confirmed again).
func (v *viewSync) sync(ctx context.Context, n int) bool {
	syncCtx, cancel := context.WithTimeout(ctx, syncTimeout)
	defer cancel()
	if err := v.live.Sync(syncCtx); err != nil {
		if ctx.Err() != nil {
			return false
		}
		if !v.failing {
			v.log.Warn("fanout: subscriber view not confirmed current; events handed back until it is",
				"err", err, "behind", v.live.Behind())
		}
		v.failing = true
		v.handedBack += n
		return false
	}
	if v.failing {
		v.log.Info("fanout: subscriber view confirmed current again", "events_handed_back", v.handedBack)
		v.failing, v.handedBack = false, 0
	}
	return true
}

// publishCopies starts the async publish of one copy per matching enabled
// subscriber: on its lane, or, for an event not due yet, held in RETRIES
// until its Relay-Deliver-At. A copy that could only be sent after its
// deadline is dead-lettered as expired here, never held. again says that
// this relay fanned the event out before, and was left to try again.
func publishCopies(ctx context.Context, js jetstream.JetStream, cfg Config, msg jetstream.Msg, again bool) pending {
	p := pending{msg: msg}
	md, err := msg.Metadata()
	if err != nil {
		p.err = err
		return p
	}
	// Fanned out before, here or elsewhere: some of its copies may be
	// stored already.
	again = again || md.NumDelivered > 1
	orig := msg.Headers()
	id := EventID(orig, md.Sequence.Stream)
	eventType := EventType(msg.Subject())
	p.span = cfg.Tracer.Fanout(ctx, orig, id, eventType)
	subs, filtered := byContent(cfg.Subscribers.Matching(eventType), eventType, orig, msg.Data(), cfg.Metrics, cfg.Records != nil)
	var disabled []string
	if cfg.Records != nil {
		disabled = cfg.Subscribers.MatchingDisabled(eventType)
	}
	if len(subs) == 0 {
		if len(filtered) > 0 || len(disabled) > 0 {
			cfg.Records.Fanout(attempts.Fanout{Event: id, Type: eventType, At: cfg.Clock.Now(), Filtered: filtered, Disabled: disabled})
		}
		return p
	}
	p.subs, p.filtered, p.disabled, p.id = subs, filtered, disabled, id
	if cfg.Records != nil {
		p.placed = make([]attempts.Copy, 0, len(subs))
	}
	t := timesOf(orig, md.Timestamp, cfg.Horizon)
	held := !t.deliverAt.IsZero() && t.deliverAt.After(cfg.Clock.Now())
	// One header for the event, a shallow copy of it per copy: publishing
	// sets the copy's Nats-Msg-Id on its own map and changes no value.
	header := CopyHeader(orig, id, eventType, md.Timestamp)
	p.span.SetOn(header)
	// A body shared by several copies on the lanes is stored once, before
	// them, with its event's id: those copies carry its sequence. (Fanned
	// out again, it is stored again, over the first: one a subject.)
	shared := ""
	unsendable, reason := t.unsendable()
	if len(msg.Data()) > BodyShared && !held && unsendable == "" && onLanes(subs, cfg.Backlogs) > 1 {
		body := &nats.Msg{Subject: streams.BodySubject(md.Sequence.Stream), Data: msg.Data(), Header: nats.Header{}}
		body.Header.Set(streams.HeaderEventID, id)
		f, err := waitingForRoom(ctx, js, func() (jetstream.PubAckFuture, error) { return js.PublishMsgAsync(body) })
		if err == nil {
			p.body, shared = f, strconv.FormatUint(md.Sequence.Stream, 10)
		}
	}
	for i, sub := range subs {
		h := header
		if i < len(subs)-1 {
			h = maps.Clone(header)
		}
		if t.deadline.IsZero() && unsendable == "" {
			if d := sub.DeadlineFor(t.due); !d.IsZero() {
				h.Set(streams.HeaderDeadline, d.UTC().Format(time.RFC3339Nano))
			}
		}
		if unsendable != "" {
			seq, err := deadLetterUnsent(ctx, cfg, sub.ID, id, msg.Data(), h, reason, unsendable)
			if err != nil {
				p.err = err
				return p
			}
			p.place(attempts.Copy{Subscriber: sub.ID, Placed: attempts.DeadAtFanout, Reason: string(reason), DLQSeq: seq})
			p.futures = append(p.futures, nil)
			continue
		}
		if again {
			switch cfg.shed.done(md.Sequence.Stream, sub.ID) {
			case storedVerdict:
				// Stored when first fanned out: not published again (see
				// shedMemory).
				p.place(attempts.Copy{Subscriber: sub.ID, Placed: attempts.StoredBefore})
				p.futures = append(p.futures, nil)
				continue
			case deadVerdict:
				// Shed, its dead letter stored: neither again.
				p.place(attempts.Copy{Subscriber: sub.ID, Placed: attempts.DeadAtFanout, Reason: string(deadletter.Backlog)})
				p.futures = append(p.futures, nil)
				continue
			}
		}
		// What the copy weighs in DELIVERIES: a few hundred bytes of
		// headers when its body is shared, else the body.
		size := len(msg.Data())
		if shared != "" && !cfg.Backlogs.Has(sub.ID) {
			size = copyHeaderBytes
		}
		v, why := backlog.Queue, ""
		switch {
		case !again:
			v, why = cfg.Backlog.Admit(sub, size)
		case cfg.shed.shed(md.Sequence.Stream, sub.ID):
			v, why = backlog.Shed, "shed when first fanned out"
		default:
			// Fanned out again: its copy may be stored already.
			cfg.Backlog.Count(sub.ID, size)
		}
		if v == backlog.Shed {
			cfg.shed.record(md.Sequence.Stream, sub.ID, cfg.Clock.Now())
			f, err := shedCopy(ctx, js, cfg, sub.ID, id, msg.Data(), h, why)
			if err != nil {
				p.err = err
				return p
			}
			if p.shed == nil {
				p.shed = make([]bool, len(subs))
			}
			p.shed[len(p.futures)] = true
			p.place(attempts.Copy{Subscriber: sub.ID, Placed: attempts.DeadAtFanout, Reason: string(deadletter.Backlog)})
			p.futures = append(p.futures, f)
			continue
		}
		var m *nats.Msg
		switch {
		case held:
			m = retry.Scheduled(sub.ID, msg.Data(), h, t.deliverAt)
			p.place(attempts.Copy{Subscriber: sub.ID, Placed: attempts.Scheduled, Until: t.deliverAt})
		default:
			m = &nats.Msg{Subject: streams.DeliverySubject(sub.Lane(cfg.SharedLanes), sub.ID), Header: h, Data: msg.Data()}
			placed := attempts.OnLane
			switch {
			case cfg.Backlogs.Has(sub.ID):
				// Behind a backlog, it may wait long: whole.
				m.Subject = streams.OverflowSubject(sub.ID)
				placed = attempts.InOverflow
			case shared != "":
				h.Set(streams.HeaderEventSeq, shared)
				m.Data = nil
			}
			p.place(attempts.Copy{Subscriber: sub.ID, Placed: placed})
		}
		cfg.queued.expect(m, sub.ID)
		f, err := PublishCopy(ctx, js, m, streams.CopyID(id, sub.ID))
		if err != nil {
			cfg.queued.forget(m)
			cfg.Backlog.Settled(sub.ID, false) // counted, and not on its way
			p.err = err
			return p
		}
		p.futures = append(p.futures, f)
	}
	return p
}

// byContent keeps, of the subscribers an event's type matched, those
// without a content filter and those whose filter matches the event. The
// event is made a filter.Event once, at the first filter, so that its body
// is parsed at most once whatever the number of filters; an event none of
// whose subscribers has a filter costs one look at each. subs is the
// caller's (Matching makes it anew), so it is compacted in place. With
// skipped, it also returns the ids of those a filter left out, for the
// fan-out record.
func byContent(subs []*subscribers.Subscriber, eventType string, h nats.Header, body []byte, m *metrics.Metrics, skipped bool) (kept []*subscribers.Subscriber, filtered []string) {
	var ev *filter.Event
	kept = subs[:0]
	for _, sub := range subs {
		if f := sub.Content(); f != nil {
			if ev == nil {
				ev = filter.NewEvent(eventType, h, body)
			}
			r := f.Match(ev)
			m.Filtered(r)
			if r != filter.Matched {
				if skipped {
					filtered = append(filtered, sub.ID)
				}
				continue
			}
		}
		kept = append(kept, sub)
	}
	clear(subs[len(kept):])
	return kept, filtered
}

// deadLetterUnsent stores the DLQ copy of an event's copy that can never
// be sent, without an attempt: expired (due after its deadline, or beyond
// the horizon) or malformed (a header that cannot be honoured). Its
// Nats-Msg-Id is the copy's own, prefixed, so that fanning the event out
// again makes no second entry. It returns the DLQ sequence.
func deadLetterUnsent(ctx context.Context, cfg Config, sub, id string, body []byte, h nats.Header, reason deadletter.Reason, why string) (uint64, error) {
	seq, err := deadletter.Publish(ctx, cfg.JS, body, h, deadletter.Death{
		Subscriber: sub,
		Reason:     reason,
		LastError:  why,
		DeadAt:     cfg.Clock.Now(),
		ID:         "dlq.fanout." + id + "." + sub,
	})
	if err != nil {
		return 0, err
	}
	cfg.Metrics.DeadLettered(sub, reason)
	cfg.Ops.Dead(sub, string(reason), h.Get(streams.HeaderEventType))
	if reason == deadletter.Expired {
		cfg.Timeliness.Missed(sub)
	}
	return seq, nil
}

// shedCopy starts the async publish of the DLQ copy of a copy the backlog
// gauge shed. Its Nats-Msg-Id is the copy's own, prefixed, so that fanning
// the event out again makes no second entry.
func shedCopy(ctx context.Context, js jetstream.JetStream, cfg Config, sub, id string, body []byte, h nats.Header, why string) (jetstream.PubAckFuture, error) {
	return waitingForRoom(ctx, js, func() (jetstream.PubAckFuture, error) {
		return deadletter.PublishAsync(js, body, h, deadletter.Death{
			Subscriber: sub,
			Reason:     deadletter.Backlog,
			LastError:  why,
			DeadAt:     cfg.Clock.Now(),
			ID:         "dlq.backlog." + id + "." + sub,
		})
	})
}

// PublishCopy starts the async publish of one copy with its Nats-Msg-Id.
// When the async window is full
// for longer than nats.go's stall wait (an event with thousands of
// subscribers, PubAcks slowed by a busy server), it waits for the window to
// drain and tries again: failing would hand the whole event back, and
// fanning it out again would publish its copies a second time, as
// duplicates the stream drops but has to read. The benchmark's two-hop loop
// copies with it too, so that it measures relay's way of copying.
func PublishCopy(ctx context.Context, js jetstream.JetStream, m *nats.Msg, id string) (jetstream.PubAckFuture, error) {
	return waitingForRoom(ctx, js, func() (jetstream.PubAckFuture, error) {
		return js.PublishMsgAsync(m, jetstream.WithMsgID(id))
	})
}

// waitingForRoom runs an async publish, and while js's async window stays
// full past nats.go's stall wait, waits for it to drain and runs it again.
func waitingForRoom(ctx context.Context, js jetstream.JetStream, publish func() (jetstream.PubAckFuture, error)) (jetstream.PubAckFuture, error) {
	for {
		f, err := publish()
		if !errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
			return f, err
		}
		select {
		case <-js.PublishAsyncComplete():
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// settle waits for one event's PubAcks and then acknowledges the event, or,
// when a copy could not be stored, sends it back on again after retryDelay
// to be fanned out again by this relay, with the verdicts it was given
// (see shedMemory); duplicates of copies already stored are dropped by
// JetStream's Nats-Msg-Id dedupe (and not counted as copies again). Until
// then the event is held, and renewed (see renewalsPerAckWait). It is
// handed back to JetStream, for any relay, only as this one stops.
func settle(ctx context.Context, p pending, log *slog.Logger, cfg Config, again chan<- jetstream.Msg) {
	m, ops, shed, clk := cfg.Metrics, cfg.Ops, cfg.shed, cfg.Clock
	err := p.err
	if p.body != nil {
		select {
		case <-p.body.Ok():
		case e := <-p.body.Err():
			err = cmp.Or(err, fmt.Errorf("storing its body in %s: %w", streams.Bodies, e))
		}
	}
	// Copies stored, and shed copies whose dead letters were stored,
	// remembered if the event is tried again.
	var stored, dead []int
	for i, f := range p.futures {
		if f == nil {
			continue // dead-lettered, counted already; or stored before
		}
		queued := p.shed == nil || !p.shed[i]
		// A queued copy's answer was told to the gauge as it came (see
		// queuedCopies).
		select {
		case ack := <-f.Ok():
			switch {
			case !queued:
				if p.placed != nil {
					p.placed[i].DLQSeq = ack.Sequence
				}
				dead = append(dead, i)
				if !ack.Duplicate {
					m.DeadLettered(p.subs[i].ID, deadletter.Backlog)
					ops.Dead(p.subs[i].ID, string(deadletter.Backlog), EventType(p.msg.Subject()))
				}
			default:
				stored = append(stored, i)
				if !ack.Duplicate {
					m.Copied(p.subs[i].ID)
				}
			}
		case e := <-f.Err():
			if err == nil {
				err = e
			}
		}
	}
	p.span.EndFanout(len(p.subs), err)
	md, mdErr := p.msg.Metadata()
	if err != nil {
		if mdErr == nil {
			for _, i := range stored {
				if !shed.recordStored(md.Sequence.Stream, p.subs[i].ID, clk.Now()) {
					break
				}
			}
			for _, i := range dead {
				if !shed.recordDead(md.Sequence.Stream, p.subs[i].ID, clk.Now()) {
					break
				}
			}
		}
		log.Warn("fanout: event not fanned out, will retry", "subject", p.msg.Subject(), "err", err)
		if mdErr != nil || !tryAgain(ctx, p.msg, again) {
			_ = cfg.held.NakWithDelay(p.msg, retryDelay)
		}
		return
	}
	if err := cfg.held.Ack(p.msg); err != nil {
		log.Warn("fanout: ack", "err", err)
	}
	if p.placed != nil {
		cfg.Records.Fanout(attempts.Fanout{Event: p.id, Type: EventType(p.msg.Subject()), At: clk.Now(),
			Copies: p.placed, Filtered: p.filtered, Disabled: p.disabled})
	}
	if mdErr == nil {
		shed.forget(md.Sequence.Stream)
	}
	m.EventIngested()
}

// tryAgain sends msg back on again after retryDelay; false when ctx ended
// first.
func tryAgain(ctx context.Context, msg jetstream.Msg, again chan<- jetstream.Msg) bool {
	t := time.NewTimer(retryDelay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return false
	}
	select {
	case again <- msg:
		return true
	case <-ctx.Done():
		return false
	}
}

// place notes where the copy of the futures about to be appended goes, when
// the fan-out is recorded.
func (p *pending) place(c attempts.Copy) {
	if p.placed != nil {
		p.placed = append(p.placed, c)
	}
}

// queuedCopies tells the backlog gauge of each queued copy's answer as it
// comes, from the publisher's own handlers: the gauge counts the copy as
// waiting until then (a read of the streams shows only what is stored), and
// a copy answered is waiting no more on account of a late PubAck of another
// copy, of its event or of an event before it.
type queuedCopies struct {
	gauge *backlog.Gauge
	mu    sync.Mutex
	// subs holds the subscriber of each copy on its way.
	subs map[*nats.Msg]string
}

// expect notes m, about to be published, as sub's copy.
func (q *queuedCopies) expect(m *nats.Msg, sub string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.subs[m] = sub
}

// forget drops m, whose publish failed before it went.
func (q *queuedCopies) forget(m *nats.Msg) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.subs, m)
}

// answered tells the gauge of m's answer: stored when err is nil; when
// refused by JetStream (a full stream, say), not stored. Any other error (no
// PubAck in time, the connection lost) may hide a copy that is. A message
// not expected (a body, a dead letter) is let be. It runs on the
// publisher's goroutine, or under its lock: it only counts.
func (q *queuedCopies) answered(m *nats.Msg, err error) {
	q.mu.Lock()
	sub, ok := q.subs[m]
	delete(q.subs, m)
	q.mu.Unlock()
	if !ok {
		return
	}
	var refused *jetstream.APIError
	q.gauge.Settled(sub, err == nil || !errors.As(err, &refused))
}
