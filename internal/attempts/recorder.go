package attempts

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/internal/deadletter"
	"github.com/relay-dev/relay/internal/metrics"
	"github.com/relay-dev/relay/streams"
)

// Tuning of the [Recorder].
const (
	// queueSize is how many records may wait to be written: a few seconds
	// of a busy relay's attempts. Past it a record is dropped, never
	// waited for.
	queueSize = 8192
	// checkEvery is how many records may be written without a PubAck
	// after a check (a record that asks for one) was stored, and
	// checkPeriod for how long: most records go without, since a PubAck
	// costs the server and the relay a good part of what storing the
	// record does. One the server does not store is lost uncounted; once
	// a check is refused, every record asks for its PubAck, and each
	// refused one is counted, until one is stored.
	checkEvery  = 256
	checkPeriod = time.Second
	// maxPending is the records asking for their PubAcks that may await
	// them, on the recorder's JetStream context of its own: a server slow
	// to answer fills this window, not the delivery path's.
	maxPending = 4096
	// stallWait is how long the writer waits for room in that window
	// before it drops a record: short, so that the queue behind it keeps
	// moving.
	stallWait = 20 * time.Millisecond
	// drainWait bounds how long a stopping recorder writes what is still
	// queued and waits for the PubAcks: what is left then is dropped.
	drainWait = 5 * time.Second
	// lossReport is how often the records lost since the last report are
	// logged, in one line.
	lossReport = 10 * time.Second
	// maxRelayName bounds the relay name a record holds.
	maxRelayName = 64
)

// Config is what a [Recorder] needs.
type Config struct {
	// Conn is the relay's NATS connection; the recorder makes a JetStream
	// context of its own on it.
	Conn *nats.Conn
	// Relay names this relay in every record (host and process), cut to
	// 64 bytes.
	Relay string
	// Logger gets one line every 10 s while records are lost. Defaults to
	// slog.Default().
	Logger *slog.Logger
	// Metrics counts the records lost (nil: not counted).
	Metrics *metrics.Metrics
}

// entry is one record waiting to be written: an attempt, or a fan-out.
type entry struct {
	attempt Record
	fanout  *Fanout
}

// Recorder writes attempt and fan-out records to ATTEMPTS without ever
// making its caller wait: [Recorder.Attempt] and [Recorder.Fanout] queue,
// and [Recorder.Run] writes. A nil *Recorder records nothing (relay run
// --record-attempts=false).
type Recorder struct {
	cfg   Config
	js    jetstream.JetStream
	queue chan entry
	// dropped and refused count the records lost since the last report;
	// dropped is counted by the callers, so it is an atomic and nothing
	// more.
	dropped, refused atomic.Int64

	// Owned by the goroutine of Run. checkOK and checkErr answer the last
	// check, nil once it is answered; checking says that every record asks
	// for its PubAck: until the first is stored, and after a refusal;
	// stopping, that every record does while stopping. sinceCheck and
	// checked are the records written without a PubAck and the time since
	// the last check was sent.
	checkOK    <-chan *jetstream.PubAck
	checkErr   <-chan error
	checking   bool
	stopping   bool
	sinceCheck int
	checked    time.Time
}

// New returns a Recorder; [Recorder.Run] writes what it is given.
func New(cfg Config) (*Recorder, error) {
	if cfg.Conn == nil {
		return nil, errors.New("no NATS connection")
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	cfg.Relay = cut(cfg.Relay, maxRelayName)
	r := &Recorder{cfg: cfg, queue: make(chan entry, queueSize), checking: true}
	var err error
	r.js, err = jetstream.New(cfg.Conn,
		jetstream.WithPublishAsyncMaxPending(maxPending),
		jetstream.WithPublishAsyncTimeout(10*time.Second),
		jetstream.WithPublishAsyncErrHandler(func(jetstream.JetStream, *nats.Msg, error) {
			r.lost(false)
		}))
	if err != nil {
		return nil, err
	}
	return r, nil
}

// Attempt queues the record of an attempt (or of a death without one). It
// never waits: a record the queue has no room for is dropped and counted.
func (r *Recorder) Attempt(rec Record) {
	if r == nil {
		return
	}
	r.enqueue(entry{attempt: rec})
}

// Fanout queues the record of one fan-out of an event, as [Recorder.Attempt]
// does, unless it says nothing its copy's attempt records will not (see
// [Fanout.Plain]).
func (r *Recorder) Fanout(f Fanout) {
	if r == nil || f.Plain() {
		return
	}
	r.enqueue(entry{fanout: &f})
}

func (r *Recorder) enqueue(e entry) {
	select {
	case r.queue <- e:
	default:
		r.lost(true)
	}
}

// Run writes the queued records until ctx ends, then, for at most
// drainWait, what is still queued and the PubAcks; what is left then is
// dropped. The relay stops it after the lanes and the fan-out, whose last
// outcomes it records.
func (r *Recorder) Run(ctx context.Context) {
	report := time.NewTicker(lossReport)
	defer report.Stop()
	defer r.report()
	for {
		select {
		case e := <-r.queue:
			r.write(e)
		case <-report.C:
			r.report()
		case <-ctx.Done():
			r.drain()
			return
		}
	}
}

// drain writes what is queued, each record asking for its PubAck, flushes
// the connection and waits for the PubAcks, within drainWait. What is
// still queued at the deadline is dropped and counted.
func (r *Recorder) drain() {
	r.stopping = true
	deadline := time.Now().Add(drainWait)
	for len(r.queue) > 0 {
		if time.Now().After(deadline) {
			for range len(r.queue) {
				r.lost(true)
			}
			return
		}
		r.write(<-r.queue)
	}
	_ = r.cfg.Conn.FlushTimeout(max(time.Until(deadline), time.Millisecond))
	wait := time.NewTimer(time.Until(deadline))
	defer wait.Stop()
	select {
	case <-r.js.PublishAsyncComplete():
	case <-wait.C:
	}
}

// report logs the records lost since the last report, in one line.
func (r *Recorder) report() {
	dropped, refused := r.dropped.Swap(0), r.refused.Swap(0)
	if dropped+refused == 0 {
		return
	}
	r.cfg.Logger.Warn("attempts: records for relay trace were not stored (deliveries go on; relay trace shows less of them)",
		"dropped", dropped, "refused", refused, "in", lossReport)
}

// write publishes one entry's records: on its event's subject, and a
// failure on its subscriber's too.
func (r *Recorder) write(e entry) {
	if e.fanout == nil {
		rec := e.attempt
		if rec.Event == "" {
			r.lost(false)
			return
		}
		rec.Relay = r.cfg.Relay
		rec.At = rec.At.Truncate(time.Millisecond)
		rec.Next = rec.Next.Truncate(time.Millisecond)
		if rec.Status != 0 && rec.Attempt > 0 {
			// The status says it; the error would only repeat it.
			rec.Error = ""
		}
		rec.Error = cut(deadletter.CleanError(rec.Error), MaxError)
		onEvent := rec
		// The subject holds it (see [Read]).
		onEvent.Event = ""
		r.publish(streams.EventRecords(streams.EventKey(rec.Event)), onEvent)
		if rec.Failed() {
			r.publish(streams.SubscriberFailures(rec.Subscriber), rec)
		}
		return
	}
	f := *e.fanout
	f.Relay = r.cfg.Relay
	f.At = f.At.Truncate(time.Millisecond)
	subject := streams.EventRecords(streams.EventKey(f.Event))
	copies, filtered := f.Copies, f.Filtered
	f.Disabled, _ = split(f.Disabled, maxCopies)
	for first := true; first || len(copies) > 0 || len(filtered) > 0; first = false {
		part := f
		part.Copies, copies = split(copies, maxCopies)
		part.Filtered, filtered = split(filtered, maxCopies-len(part.Copies))
		if !first {
			part.Disabled = nil
		}
		r.publish(subject, part)
	}
}

// split returns the first n of s (at most), and the rest.
func split[T any](s []T, n int) (head, rest []T) {
	n = min(n, len(s))
	return s[:n], s[n:]
}

func (r *Recorder) publish(subject string, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	// An error's <, > and & as they are, not six bytes each.
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		r.lost(false)
		return
	}
	data := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	if !r.checks() {
		r.sinceCheck++
		if err := r.cfg.Conn.Publish(subject, data); err != nil {
			r.lost(false)
		}
		return
	}
	paf, err := r.js.PublishMsgAsync(&nats.Msg{Subject: subject, Data: data}, jetstream.WithStallWait(stallWait))
	if err != nil {
		r.lost(errors.Is(err, jetstream.ErrTooManyStalledMsgs))
		return
	}
	if r.checkOK == nil {
		r.checkOK, r.checkErr = paf.Ok(), paf.Err()
		r.sinceCheck, r.checked = 0, time.Now()
	}
}

// checks reports whether the next record asks for its PubAck: while the
// last check is unanswered, while checking or stopping, and once
// checkEvery records or checkPeriod have gone since the last check was
// sent. So at most checkEvery records go without a PubAck between a check
// stored and the next one sent, and a server slow to answer gets records
// through the window of maxPending, where they stall and are dropped and
// counted rather than pile up. It settles the last check when its answer
// has come: stored ends checking, refused starts it (the refusal itself is
// counted by the error handler).
func (r *Recorder) checks() bool {
	if r.checkOK != nil {
		select {
		case <-r.checkOK:
			r.checking = false
		case <-r.checkErr:
			r.checking = true
		default:
			return true
		}
		r.checkOK, r.checkErr = nil, nil
	}
	return r.checking || r.stopping || r.sinceCheck >= checkEvery || time.Since(r.checked) >= checkPeriod
}

// lost counts a record not stored, dropped (before it was written) or
// refused; Run logs the count. It runs on the caller's goroutine when the
// queue is full, so it only counts.
func (r *Recorder) lost(dropped bool) {
	r.cfg.Metrics.RecordLost(dropped)
	if dropped {
		r.dropped.Add(1)
	} else {
		r.refused.Add(1)
	}
}

// cut shortens s to at most n bytes, on rune boundaries, by its middle: an
// error's start says what failed ("connection failed: Post …") and its end
// why ("connect: connection refused"), so both are kept, a third and two
// thirds, the cut marked.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "…"
	room := n - len(mark)
	i := room / 3
	for i > 0 && !utf8RuneStart(s[i]) {
		i--
	}
	j := len(s) - (room - i)
	for j < len(s) && !utf8RuneStart(s[j]) {
		j++
	}
	return s[:i] + mark + s[j:]
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }
