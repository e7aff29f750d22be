package fanout_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/backlog"
	"github.com/relay-dev/relay/internal/fanout"
	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

// testSecret is a valid whsec_ secret (32 bytes).
const testSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// sharedLanes is the --lanes the fan-out runs with in these tests.
const sharedLanes = 4

// env is a server with the relay streams, a subscriber store and a live view
// of it.
type env struct {
	n     *testutil.NATS
	store *subscribers.Store
	live  *subscribers.Live
}

// newEnv starts a server, stores subs and opens a live view that already
// holds them. The view stops when the test ends.
func newEnv(t *testing.T, subs ...subscribers.Subscriber) *env {
	t.Helper()
	n := testutil.StartRelayNATS(t)
	ctx := testutil.Context(t)
	store, err := subscribers.Open(ctx, n.JS)
	require.NoError(t, err)
	for _, s := range subs {
		require.NoError(t, store.Put(ctx, s))
	}
	return &env{n: n, store: store, live: liveView(t, store)}
}

// sub returns a valid subscriber with the given id and event filters.
func sub(id string, events ...string) subscribers.Subscriber {
	return subscribers.Subscriber{
		ID:      id,
		URL:     "https://" + id + ".example/hook",
		Secrets: []string{testSecret},
		Events:  events,
	}
}

// runner is a fan-out running in the background of a test.
type runner struct {
	cancel context.CancelFunc
	done   chan error
	err    error
	ended  bool
	// log is what the fan-out logged, unless the test set its own logger.
	log *testutil.Buffer
}

// triedAgain reports whether the fan-out logged that it would fan an event
// out again.
func (r *runner) triedAgain() bool { return strings.Contains(r.log.String(), "will retry") }

// start runs the fan-out until the test ends or stop is called; Run must
// then return nil.
func (e *env) start(t *testing.T, mod ...func(*fanout.Config)) *runner {
	t.Helper()
	log := &testutil.Buffer{}
	cfg := fanout.Config{
		JS:          e.n.JS,
		Subscribers: e.live,
		SharedLanes: sharedLanes,
		Logger:      slog.New(slog.NewTextHandler(io.MultiWriter(t.Output(), log), nil)),
	}
	for _, m := range mod {
		m(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &runner{cancel: cancel, done: make(chan error, 1), log: log}
	go func() { r.done <- fanout.Run(ctx, cfg) }()
	t.Cleanup(func() {
		if err := r.stop(t); err != nil {
			t.Errorf("fanout.Run returned %v after its context was cancelled, want nil", err)
		}
	})
	return r
}

// stop cancels the fan-out and waits for Run to return, failing the test if
// it does not return before the test's own deadline.
func (r *runner) stop(t *testing.T) error {
	t.Helper()
	if r.ended {
		return r.err
	}
	r.cancel()
	select {
	case r.err = <-r.done:
	case <-testutil.Context(t).Done():
		t.Fatal("fanout.Run did not return after its context was cancelled")
	}
	r.ended = true
	return r.err
}

// publish stores one event on events.<eventType> and returns its sequence.
func publish(t *testing.T, js jetstream.JetStream, eventType string, body []byte, h nats.Header) uint64 {
	t.Helper()
	m := &nats.Msg{Subject: fanout.SubjectPrefix + eventType, Data: body, Header: h}
	ack, err := js.PublishMsg(testutil.Context(t), m)
	require.NoError(t, err)
	require.False(t, ack.Duplicate, "event %s was taken for a duplicate by EVENTS", eventType)
	return ack.Sequence
}

// msgID is the header of an event published with -H Nats-Msg-Id:<id>.
func msgID(id string) nats.Header { return nats.Header{nats.MsgIdHdr: {id}} }

// consumerInfo returns the state of the fanout consumer.
func consumerInfo(t *testing.T, js jetstream.JetStream) *jetstream.ConsumerInfo {
	t.Helper()
	ctx := testutil.Context(t)
	c, err := js.Consumer(ctx, streams.Events, fanout.ConsumerName)
	require.NoError(t, err)
	info, err := c.Info(ctx)
	require.NoError(t, err)
	return info
}

// maybeConsumerInfo is consumerInfo, or nil while the fanout consumer does
// not exist (Run has not created it yet, or is creating it again).
func maybeConsumerInfo(t *testing.T, js jetstream.JetStream) *jetstream.ConsumerInfo {
	t.Helper()
	ctx := testutil.Context(t)
	c, err := js.Consumer(ctx, streams.Events, fanout.ConsumerName)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil
	}
	require.NoError(t, err)
	info, err := c.Info(ctx)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil
	}
	require.NoError(t, err)
	return info
}

// fannedOut reports whether the fanout consumer has been handed every event
// up to lastSeq and has acknowledged all of them.
func fannedOut(t *testing.T, js jetstream.JetStream, lastSeq uint64) bool {
	t.Helper()
	info := maybeConsumerInfo(t, js)
	return info != nil && info.NumPending == 0 && info.NumAckPending == 0 && info.AckFloor.Stream >= lastSeq
}

// waitFannedOut waits until every event up to lastSeq has been acknowledged
// by the fanout consumer with nothing left pending.
func waitFannedOut(t *testing.T, js jetstream.JetStream, lastSeq uint64) {
	t.Helper()
	testutil.Eventually(t, func() bool { return fannedOut(t, js, lastSeq) },
		"fanout consumer did not acknowledge every event up to %d", lastSeq)
}

// streamState returns a stream's message count and sequences.
func streamState(t *testing.T, js jetstream.JetStream, name string) jetstream.StreamState {
	t.Helper()
	ctx := testutil.Context(t)
	s, err := js.Stream(ctx, name)
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	return info.State
}

// copies returns every message stored in DELIVERIES, read one by one so
// that their headers are the stored ones.
func copies(t *testing.T, js jetstream.JetStream) []*jetstream.RawStreamMsg {
	t.Helper()
	return streamMsgs(t, js, streams.Deliveries)
}

// streamMsgs returns every message stored in the stream name, read one by
// one.
func streamMsgs(t *testing.T, js jetstream.JetStream, name string) []*jetstream.RawStreamMsg {
	t.Helper()
	ctx := testutil.Context(t)
	s, err := js.Stream(ctx, name)
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	var out []*jetstream.RawStreamMsg
	if info.State.Msgs == 0 {
		return out
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		require.NoError(t, err)
		out = append(out, m)
	}
	require.Len(t, out, int(info.State.Msgs))
	return out
}

// byMsgID indexes copies by their Nats-Msg-Id, failing the test if two
// share one.
func byMsgID(t *testing.T, msgs []*jetstream.RawStreamMsg) map[string]*jetstream.RawStreamMsg {
	t.Helper()
	out := make(map[string]*jetstream.RawStreamMsg, len(msgs))
	for _, m := range msgs {
		id := m.Header.Get(jetstream.MsgIDHeader)
		require.NotEmpty(t, id, "copy %d on %s has no Nats-Msg-Id", m.Sequence, m.Subject)
		_, dup := out[id]
		require.False(t, dup, "two copies with Nats-Msg-Id %q", id)
		out[id] = m
	}
	return out
}

// setDeliveriesMaxBytes bounds DELIVERIES to maxBytes, keeping the rest of
// its definition (discard-new among it).
func setDeliveriesMaxBytes(t *testing.T, js jetstream.JetStream, maxBytes int64) {
	t.Helper()
	cfg, err := streams.Config(streams.Deliveries)
	require.NoError(t, err)
	require.Equal(t, jetstream.DiscardNew, cfg.Discard)
	if maxBytes != 0 {
		cfg.MaxBytes = maxBytes
	}
	_, err = js.UpdateStream(testutil.Context(t), cfg)
	require.NoError(t, err)
}

// wantCopy is what one copy of an event must look like.
type wantCopy struct {
	subject   string
	eventID   string
	eventType string
	eventSeq  uint64
	body      []byte
}

// checkCopies requires DELIVERIES to hold exactly the wanted copies, keyed
// by Nats-Msg-Id, each with the contract's subject, headers and the event's
// body byte for byte.
func checkCopies(t *testing.T, js jetstream.JetStream, want map[string]wantCopy) map[string]*jetstream.RawStreamMsg {
	t.Helper()
	ctx := testutil.Context(t)
	events, err := js.Stream(ctx, streams.Events)
	require.NoError(t, err)
	got := byMsgID(t, copies(t, js))
	require.ElementsMatch(t, slices.Collect(maps.Keys(want)), slices.Collect(maps.Keys(got)),
		"Nats-Msg-Id of the copies in DELIVERIES")
	for id, w := range want {
		m := got[id]
		require.Equal(t, w.subject, m.Subject, "subject of copy %s", id)
		require.True(t, bytes.Equal(w.body, m.Data), "body of copy %s is %q, want %q", id, m.Data, w.body)
		require.Equal(t, w.eventID, m.Header.Get(streams.HeaderEventID), "Relay-Event-Id of copy %s", id)
		require.Equal(t, w.eventType, m.Header.Get(streams.HeaderEventType), "Relay-Event-Type of copy %s", id)
		ev, err := events.GetMsg(ctx, w.eventSeq)
		require.NoError(t, err)
		at, err := time.Parse(time.RFC3339, m.Header.Get(streams.HeaderPublishedAt))
		require.NoError(t, err, "Relay-Published-At of copy %s", id)
		require.True(t, at.Equal(ev.Time), "Relay-Published-At of copy %s is %v, the event was stored at %v", id, at, ev.Time)
		require.Equal(t, time.UTC, at.Location(), "Relay-Published-At of copy %s is not UTC", id)
	}
	return got
}

// TestRunCopiesToMatchingSubscribers proves the fan-out hop of
// docs/streams.md's data flow: each event is copied once to every enabled subscriber whose
// filters match its type, on deliveries.<lane>.<subscriber> (the shared
// lane of the id, or d_<id> for a dedicated subscriber), with Nats-Msg-Id
// <event id>.<subscriber>, the event's body byte for byte, the original's
// non-Nats headers and relay's identity headers; a disabled or non-matching
// subscriber gets nothing; and every event ends acknowledged.
func TestRunCopiesToMatchingSubscribers(t *testing.T) {
	t.Parallel()
	big := sub("big", "order.>")
	big.Dedicated = true
	off := sub("off")
	off.Disabled = true
	subs := []subscribers.Subscriber{sub("all"), sub("orders", "order.*"), big, off, sub("videos", "video.*")}
	e := newEnv(t, subs...)
	js := e.n.JS

	type event struct {
		eventType string
		header    nats.Header
		body      []byte
		id        string
		to        []string
	}
	events := []event{
		{
			eventType: "order.created",
			header: nats.Header{
				"Nats-Msg-Id":          {"ord-1"},
				"Nats-Expected-Stream": {streams.Events},
				"Content-Type":         {"application/json"},
				streams.HeaderDeadline: {"2099-01-01T00:00:00Z"},
				"X-Trace":              {"a", "b"},
			},
			body: []byte(`{"id":"not-this-one","n":1}`),
			id:   "ord-1",
			to:   []string{"all", "orders", "big"},
		},
		{
			eventType: "video.uploaded",
			// A body's "id" is not the event id: the body is never read.
			body: []byte(`  {"id":"vid-9","title":"ünïcödé"}`),
			to:   []string{"all", "videos"},
		},
		{
			eventType: "order.item.added",
			body:      []byte{0x00, 0xff, 0x7f, '{', 0x80, '\n', 0xc3},
			to:        []string{"all", "big"},
		},
		{
			eventType: "misc",
			body:      []byte{},
			to:        []string{"all"},
		},
	}

	r := e.start(t)
	want := map[string]wantCopy{}
	var last uint64
	for i := range events {
		ev := &events[i]
		last = publish(t, js, ev.eventType, ev.body, ev.header)
		if ev.id == "" {
			ev.id = fmt.Sprintf("EVENTS-%d", last)
		}
		for _, to := range ev.to {
			i := slices.IndexFunc(subs, func(s subscribers.Subscriber) bool { return s.ID == to })
			want[ev.id+"."+to] = wantCopy{
				subject:   "deliveries." + subs[i].Lane(sharedLanes) + "." + to,
				eventID:   ev.id,
				eventType: ev.eventType,
				eventSeq:  last,
				body:      ev.body,
			}
		}
	}
	waitFannedOut(t, js, last)
	got := checkCopies(t, js, want)

	// The dedicated lane is d_<id>; shared lanes are sNN.
	require.Equal(t, "deliveries.d_big.big", got["ord-1.big"].Subject)
	require.Equal(t, "deliveries."+subscribers.LaneFor("all", sharedLanes)+".all", got["ord-1.all"].Subject)

	// The publisher's headers ride on, its Nats-* ones do not.
	first := got["ord-1.orders"]
	require.Equal(t, []string{"a", "b"}, first.Header.Values("X-Trace"))
	require.Equal(t, "application/json", first.Header.Get("Content-Type"))
	require.Equal(t, "2099-01-01T00:00:00Z", first.Header.Get(streams.HeaderDeadline))
	// DELIVERIES allows direct gets, whose replies add the stored message's
	// stream, sequence, subject and time: those are not on the copy.
	directGet := map[string]bool{"Nats-Stream": true, "Nats-Sequence": true, "Nats-Subject": true, "Nats-Time-Stamp": true}
	for _, m := range got {
		for k := range m.Header {
			if streams.IsNatsHeader(k) && !directGet[k] {
				require.Equal(t, jetstream.MsgIDHeader, k, "copy %d carries %s", m.Sequence, k)
			}
		}
	}

	info := consumerInfo(t, js)
	require.Zero(t, info.NumPending)
	require.Zero(t, info.NumAckPending)
	require.Zero(t, info.NumRedelivered)
	require.Equal(t, last, info.AckFloor.Stream)
	require.NoError(t, r.stop(t))
}

// TestRunRefanoutIsDeduplicated proves that fanning out the same event again
// creates no second copy, thanks to the Nats-Msg-Id <event id>.<subscriber>
// dedupe of DELIVERIES when the fanout consumer is deleted under a running
// fan-out, which recreates it and is handed every event again.
func TestRunRefanoutIsDeduplicated(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sub("a"), sub("b", "thing.*"))
	js := e.n.JS
	e.start(t)

	var last uint64
	for i := range 3 {
		last = publish(t, js, "thing.made", fmt.Appendf(nil, `{"n":%d}`, i), nats.Header{nats.MsgIdHdr: {fmt.Sprintf("t-%d", i)}})
	}
	waitFannedOut(t, js, last)
	before := streamState(t, js, streams.Deliveries)
	require.EqualValues(t, 6, before.Msgs)

	// Deleting the consumer makes the running fan-out create it again, and
	// the new consumer delivers every event of EVENTS once more.
	ctx := testutil.Context(t)
	first := consumerInfo(t, js).Created
	require.NoError(t, js.DeleteConsumer(ctx, streams.Events, fanout.ConsumerName))
	testutil.Eventually(t, func() bool {
		info := maybeConsumerInfo(t, js)
		return info != nil && info.Created.After(first) && info.Delivered.Stream >= last
	}, "the running fan-out did not recreate its consumer and fan out again")
	waitFannedOut(t, js, last)

	after := streamState(t, js, streams.Deliveries)
	require.Equal(t, before.Msgs, after.Msgs, "copies in DELIVERIES")
	require.Equal(t, before.LastSeq, after.LastSeq, "DELIVERIES stored a new message")
	got := byMsgID(t, copies(t, js))
	require.ElementsMatch(t, []string{"t-0.a", "t-0.b", "t-1.a", "t-1.b", "t-2.a", "t-2.b"}, slices.Collect(maps.Keys(got)))
	require.Equal(t, []byte(`{"n":1}`), got["t-1.a"].Data, "the first copy is the one kept")
}

// TestRunFollowsSubscriberChanges proves that the fan-out reads the live
// subscriber view on every event: a subscriber added while it runs gets the
// events published after it was added and none before (no backfill), and
// one disabled while it runs gets nothing more.
func TestRunFollowsSubscriberChanges(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sub("early"))
	js := e.n.JS
	ctx := testutil.Context(t)
	e.start(t)

	s1 := publish(t, js, "x.y", []byte(`{}`), msgID("e1"))
	waitFannedOut(t, js, s1)

	require.NoError(t, e.store.Put(ctx, sub("late")))
	testutil.Eventually(t, func() bool { _, ok := e.live.Get("late"); return ok }, "live view did not see subscriber late")
	s2 := publish(t, js, "x.y", []byte(`{}`), msgID("e2"))
	waitFannedOut(t, js, s2)

	require.NoError(t, e.store.SetDisabled(ctx, "early", true, "test"))
	testutil.Eventually(t, func() bool { return len(e.live.Enabled()) == 1 }, "live view did not see early disabled")
	s3 := publish(t, js, "x.y", []byte(`{}`), msgID("e3"))
	waitFannedOut(t, js, s3)

	got := byMsgID(t, copies(t, js))
	require.ElementsMatch(t, []string{"e1.early", "e2.early", "e2.late", "e3.late"}, slices.Collect(maps.Keys(got)))
}

// TestRunBackPressure proves "back-pressure into EVENTS, never silent
// loss": while DELIVERIES (bounded by bytes, discard-new) refuses copies,
// the events whose copies were refused stay unacknowledged and are fanned
// out again, no event is acknowledged without all of its copies
// stored, and once DELIVERIES has room every event gets exactly its copies.
func TestRunBackPressure(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sub("a"), sub("b"))
	js := e.n.JS
	const (
		events      = 6
		subsPerEvt  = 2
		tinyMaxSize = 600
	)
	setDeliveriesMaxBytes(t, js, tinyMaxSize)
	var last uint64
	for i := range events {
		last = publish(t, js, "bulk.item", fmt.Appendf(nil, `{"id":"bp-%d","pad":"%064d"}`, i, i), msgID(fmt.Sprintf("bp-%d", i)))
	}
	// A gauge that never reads the stream sheds nothing: this test is of
	// the back-pressure alone (TestRunShedsPastTheBacklogBound is of the
	// shedding).
	idle, err := backlog.New(backlog.Config{JS: js, Subscribers: e.live})
	require.NoError(t, err)
	r := e.start(t, func(c *fanout.Config) { c.Backlog = idle })

	// Every event has been handed to the fan-out, and some are tried again
	// because their copies did not fit.
	testutil.Eventually(t, func() bool {
		info := maybeConsumerInfo(t, js)
		return info != nil && info.NumPending == 0 && r.triedAgain()
	}, "the fan-out did not retry events whose copies DELIVERIES refused")

	info := consumerInfo(t, js)
	state := streamState(t, js, streams.Deliveries)
	unacked := info.NumPending + uint64(info.NumAckPending)
	acked := uint64(events) - unacked
	require.Positive(t, unacked, "every event was acknowledged while DELIVERIES was full")
	require.Less(t, state.Msgs, uint64(events*subsPerEvt), "DELIVERIES took every copy despite its MaxBytes")
	require.LessOrEqual(t, state.Bytes, uint64(tinyMaxSize))
	require.LessOrEqual(t, acked*subsPerEvt, state.Msgs,
		"%d events acknowledged with only %d copies stored", acked, state.Msgs)

	// Room again: everything arrives, once.
	setDeliveriesMaxBytes(t, js, 0)
	waitFannedOut(t, js, last)
	want := map[string]wantCopy{}
	for i := range events {
		for _, s := range []string{"a", "b"} {
			id := fmt.Sprintf("bp-%d", i)
			want[id+"."+s] = wantCopy{
				subject:   streams.DeliverySubject(subscribers.LaneFor(s, sharedLanes), s),
				eventID:   id,
				eventType: "bulk.item",
				eventSeq:  uint64(i + 1),
				body:      fmt.Appendf(nil, `{"id":"bp-%d","pad":"%064d"}`, i, i),
			}
		}
	}
	checkCopies(t, js, want)
}

// TestRunStopAndRestart proves that stopping the fan-out in the middle of a
// backlog loses and duplicates nothing: Run returns nil once its context is
// cancelled, every event it acknowledged has its copy, and a new fan-out
// copies the rest, each exactly once.
func TestRunStopAndRestart(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sub("only"))
	js := e.n.JS
	const events = 2000
	ctx := testutil.Context(t)
	for i := range events {
		_, err := js.PublishAsync(fanout.SubjectPrefix+"load.tick", fmt.Appendf(nil, `{"n":%d}`, i), jetstream.WithMsgID(fmt.Sprintf("L%d", i)))
		require.NoError(t, err)
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		t.Fatal("events not stored")
	}
	last := streamState(t, js, streams.Events).LastSeq
	require.EqualValues(t, events, last)

	r := e.start(t)
	testutil.Eventually(t, func() bool {
		info := maybeConsumerInfo(t, js)
		return info != nil && info.Delivered.Stream > 0
	}, "the fan-out was handed nothing")
	require.NoError(t, r.stop(t))

	info := consumerInfo(t, js)
	acked := uint64(events) - info.NumPending - uint64(info.NumAckPending)
	state := streamState(t, js, streams.Deliveries)
	require.LessOrEqual(t, acked, state.Msgs, "%d events acknowledged with only %d copies stored", acked, state.Msgs)

	// A short ack wait hands back what the stopped fan-out had been sent
	// but never saw.
	e.start(t, func(c *fanout.Config) { c.AckWait = time.Second })
	waitFannedOut(t, js, last)
	got := byMsgID(t, copies(t, js))
	require.Len(t, got, events)
	for i := range events {
		require.Contains(t, got, fmt.Sprintf("L%d.only", i))
	}
}

// TestRunReturnsNilWhenCancelled proves that Run returns nil, not an error,
// when its context ends: already cancelled before it starts, and cancelled
// while it waits for events.
func TestRunReturnsNilWhenCancelled(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sub("a"))
	cfg := fanout.Config{JS: e.n.JS, Subscribers: e.live, SharedLanes: sharedLanes}

	ctx, cancel := context.WithCancel(testutil.Context(t))
	cancel()
	require.NoError(t, fanout.Run(ctx, cfg))

	r := e.start(t)
	s := publish(t, e.n.JS, "a.b", []byte(`{}`), msgID("x"))
	waitFannedOut(t, e.n.JS, s)
	require.NoError(t, r.stop(t))
}

// TestRunConfigErrors proves that Run refuses, with ErrConfig and without
// touching EVENTS, a Config missing its JetStream context, its subscriber
// view or a positive number of shared lanes.
func TestRunConfigErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tests := []struct {
		name string
		cfg  fanout.Config
	}{
		{"no JetStream", fanout.Config{Subscribers: e.live, SharedLanes: 1}},
		{"no subscribers", fanout.Config{JS: e.n.JS, SharedLanes: 1}},
		{"no shared lanes", fanout.Config{JS: e.n.JS, Subscribers: e.live}},
		{"negative shared lanes", fanout.Config{JS: e.n.JS, Subscribers: e.live, SharedLanes: -3}},
		{"empty", fanout.Config{}},
	}
	// The cases run one after the other so that the check below follows
	// all of them.
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := fanout.Run(testutil.Context(t), tc.cfg)
			require.ErrorIs(t, err, fanout.ErrConfig)
		})
	}
	_, err := e.n.JS.Consumer(testutil.Context(t), streams.Events, fanout.ConsumerName)
	require.ErrorIs(t, err, jetstream.ErrConsumerNotFound)
}
