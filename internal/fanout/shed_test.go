package fanout_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/backlog"
	"github.com/relay-dev/relay/internal/deadletter"
	"github.com/relay-dev/relay/internal/fanout"
	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

// TestRunShedsPastTheBacklogBound: a subscriber with --max-backlog 3 gets
// three copies queued and the rest dead-lettered as backlog, with their
// bodies and why, while its neighbour gets every copy; fanning an event out
// again makes no second dead letter.
func TestRunShedsPastTheBacklogBound(t *testing.T) {
	t.Parallel()
	small := sub("small")
	small.MaxBacklog = 3
	e := newEnv(t, small, sub("other"))
	js := e.n.JS
	gauge, err := backlog.New(backlog.Config{JS: js, Subscribers: e.live})
	require.NoError(t, err)
	require.NoError(t, gauge.Refresh(t.Context()))
	e.start(t, func(c *fanout.Config) { c.Backlog = gauge })
	const events = 10
	var last uint64
	for i := range events {
		last = publish(t, js, "x.y", fmt.Appendf(nil, `{"n":%d}`, i), msgID(fmt.Sprintf("ev-%d", i)))
	}
	waitFannedOut(t, js, last)

	queued := map[string]int{}
	for _, m := range copies(t, js) {
		queued[m.Subject]++
	}
	require.Equal(t, 3, queued[streams.DeliverySubject(small.Lane(sharedLanes), "small")])
	other := sub("other")
	require.Equal(t, events, queued[streams.DeliverySubject(other.Lane(sharedLanes), "other")])

	dead := streamMsgs(t, js, streams.DLQ)
	require.Len(t, dead, events-3)
	ids := byMsgID(t, dead)
	for i := 3; i < events; i++ {
		m := ids[fmt.Sprintf("dlq.backlog.ev-%d.small", i)]
		require.NotNil(t, m, "no dead letter for ev-%d", i)
		require.Equal(t, deadletter.Subject("small", deadletter.Backlog), m.Subject)
		require.Equal(t, fmt.Sprintf(`{"n":%d}`, i), string(m.Data))
		require.Contains(t, m.Header.Get(streams.HeaderLastError), "--max-backlog is 3")
		require.Equal(t, fmt.Sprintf("ev-%d", i), m.Header.Get(streams.HeaderEventID))
		require.Equal(t, "0", m.Header.Get(streams.HeaderAttempts))
	}

	// Fanned out again (a redelivery), an event's dead letter is the same
	// Nats-Msg-Id: the DLQ drops it as a duplicate.
	ctx := t.Context()
	dlq, err := js.Stream(ctx, streams.DLQ)
	require.NoError(t, err)
	for i := 3; i < events; i++ {
		m := dead[i-3]
		ack, err := js.PublishMsg(ctx, &nats.Msg{Subject: m.Subject, Header: m.Header, Data: m.Data},
			jetstream.WithMsgID(m.Header.Get(jetstream.MsgIDHeader)))
		require.NoError(t, err)
		require.True(t, ack.Duplicate)
	}
	info, err := dlq.Info(ctx)
	require.NoError(t, err)
	require.EqualValues(t, events-3, info.State.Msgs)
}

// TestRunGivesAnEventTriedAgainTheSameVerdicts: an event whose copy for
// one subscriber was shed and whose copy for another was refused
// (DELIVERIES full) is tried again; fanned out again, the shed copy is shed
// again (one dead letter) and never queued, while the refused one is
// queued: no delivery is both queued and dead-lettered. It is tried again
// by the fan-out that shed the copy, never handed back to JetStream, which
// could give it to another relay that has not seen the verdict. The shed
// copy's dead letter, once stored, is not published again: with the DLQ's
// duplicate window (here a second) past, it would be a second entry.
func TestRunGivesAnEventTriedAgainTheSameVerdicts(t *testing.T) {
	t.Parallel()
	small := sub("small")
	small.MaxBacklog = 1
	e := newEnv(t, small, sub("other"))
	js := e.n.JS
	dlqCfg, err := streams.Config(streams.DLQ)
	require.NoError(t, err)
	dlqCfg.Duplicates = time.Second
	_, err = js.UpdateStream(t.Context(), dlqCfg)
	require.NoError(t, err)
	gauge, err := backlog.New(backlog.Config{JS: js, Subscribers: e.live})
	require.NoError(t, err)
	require.NoError(t, gauge.Refresh(t.Context()))
	// small already has its one delivery waiting.
	_, err = js.Publish(t.Context(), streams.DeliverySubject(small.Lane(sharedLanes), "small"), []byte("old"))
	require.NoError(t, err)
	require.NoError(t, gauge.Refresh(t.Context()))
	// Room for nothing more: the other's copy is refused.
	setDeliveriesMaxBytes(t, js, 1)
	r := e.start(t, func(c *fanout.Config) { c.Backlog = gauge })
	last := publish(t, js, "x.y", []byte(`{"n":1}`), msgID("ev-1"))
	testutil.Eventually(t, func() bool { return strings.Count(r.log.String(), "will retry") >= 2 },
		"the event was never tried again twice")
	require.Zero(t, consumerInfo(t, js).NumRedelivered, "the event was handed back to JetStream")
	setDeliveriesMaxBytes(t, js, 0)
	waitFannedOut(t, js, last)

	other := sub("other")
	queued := map[string]int{}
	for _, m := range copies(t, js) {
		queued[m.Subject]++
	}
	require.Equal(t, 1, queued[streams.DeliverySubject(small.Lane(sharedLanes), "small")], "small's copy was queued on a second fan-out")
	require.Equal(t, 1, queued[streams.DeliverySubject(other.Lane(sharedLanes), "other")])
	dead := streamMsgs(t, js, streams.DLQ)
	require.Len(t, dead, 1)
	require.Equal(t, "dlq.backlog.ev-1.small", dead[0].Header.Get(jetstream.MsgIDHeader))
}

// TestRunNeverStoresACopyTwiceWhenTriedAgainPastTheDuplicateWindow: an
// event one of whose copies DELIVERIES refuses is fanned out again every
// 2 s; a copy stored the first time is not published again,
// so that once DELIVERIES' duplicate window has passed (2 minutes; a
// second here) it is not stored, and delivered, a second time.
func TestRunNeverStoresACopyTwiceWhenTriedAgainPastTheDuplicateWindow(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sub("a"), sub("b"))
	js := e.n.JS
	ctx := testutil.Context(t)
	deliveries := func(maxBytes int64) {
		t.Helper()
		cfg, err := streams.Config(streams.Deliveries)
		require.NoError(t, err)
		cfg.MaxBytes, cfg.Duplicates = maxBytes, time.Second
		_, err = js.UpdateStream(ctx, cfg)
		require.NoError(t, err)
	}
	deliveries(-1)
	idle, err := backlog.New(backlog.Config{JS: js, Subscribers: e.live})
	require.NoError(t, err)
	r := e.start(t, func(c *fanout.Config) { c.Backlog = idle })
	body := []byte(`{"pad":"` + strings.Repeat("x", 2000) + `"}`)
	first := publish(t, js, "x.y", body, msgID("ev-1"))
	waitFannedOut(t, js, first)
	perCopy := int64(streamState(t, js, streams.Deliveries).Bytes) / 2
	s, err := js.Stream(ctx, streams.Deliveries)
	require.NoError(t, err)
	require.NoError(t, s.Purge(ctx))

	// Room for one copy of the next event, not two.
	deliveries(perCopy * 3 / 2)
	last := publish(t, js, "x.y", body, msgID("ev-2"))
	testutil.Eventually(t, func() bool {
		return r.triedAgain() && streamState(t, js, streams.Deliveries).Msgs == 1
	}, "the event was never tried again with one copy stored")
	// The server's duplicate window is a time of its own: the copy of a
	// is remembered for a second; past it, and a fan-out again (every 2 s),
	// there is room.
	time.Sleep(2 * time.Second)
	deliveries(-1)
	waitFannedOut(t, js, last)
	got := map[string]int{}
	for _, m := range copies(t, js) {
		got[m.Header.Get(jetstream.MsgIDHeader)]++
	}
	require.Equal(t, map[string]int{"ev-2.a": 1, "ev-2.b": 1}, got)
}
