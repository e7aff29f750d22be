package fanout_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/fanout"
	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

// stored returns every message of a stream by its Nats-Msg-Id.
func stored(t *testing.T, js jetstream.JetStream, name string) map[string]*jetstream.RawStreamMsg {
	t.Helper()
	out := map[string]*jetstream.RawStreamMsg{}
	for _, m := range streamMsgs(t, js, name) {
		out[m.Header.Get(jetstream.MsgIDHeader)] = m
	}
	return out
}

func timeHeader(h nats.Header, name string) time.Time {
	at, _ := time.Parse(time.RFC3339Nano, h.Get(name))
	return at
}

// An event not due yet is held in RETRIES, one scheduled copy per
// subscriber, firing on the subscriber's due subject at its
// Relay-Deliver-At; one due already, or with a deliver-at that does not
// parse, goes to the lane at once; one due at or after its deadline, or
// further ahead than EVENTS keeps an event (the Horizon relay run gives,
// --events-max-age), is dead-lettered expired at once. A subscriber's --deadline-after is stamped only on copies of events
// without a Relay-Deadline of their own, measured from the due time.
func TestRunHoldsEventsUntilTheyAreDue(t *testing.T) {
	b := sub("b")
	b.DeadlineAfter = subscribers.Duration(time.Hour)
	e := newEnv(t, sub("a"), b)
	now := time.Now().UTC()
	at := func(d time.Duration) string { return now.Add(d).Format(time.RFC3339Nano) }
	events := []struct {
		id     string
		header nats.Header
	}{
		{"later", nats.Header{streams.HeaderDeliverAt: {at(time.Hour)}}},
		{"past", nats.Header{streams.HeaderDeliverAt: {at(-time.Minute)}}},
		{"after-deadline", nats.Header{streams.HeaderDeliverAt: {at(time.Hour)}, streams.HeaderDeadline: {at(30 * time.Minute)}}},
		{"beyond-horizon", nats.Header{streams.HeaderDeliverAt: {at(8 * 24 * time.Hour)}}},
		{"plain", nil},
		{"garbled", nats.Header{streams.HeaderDeliverAt: {"tomorrow morning"}}},
		{"own-deadline", nats.Header{streams.HeaderDeliverAt: {at(time.Hour)}, streams.HeaderDeadline: {at(3 * time.Hour)}}},
	}
	var last uint64
	for _, ev := range events {
		h := msgID(ev.id)
		for k, v := range ev.header {
			h[k] = v
		}
		last = publish(t, e.n.JS, "order.paid", []byte(`{}`), h)
	}
	e.start(t, func(c *fanout.Config) { c.Horizon = 7 * 24 * time.Hour })
	waitFannedOut(t, e.n.JS, last)

	lane := stored(t, e.n.JS, streams.Deliveries)
	retries := stored(t, e.n.JS, streams.Retries)
	dlq := stored(t, e.n.JS, streams.DLQ)
	for _, s := range []string{"a", "b"} {
		for _, id := range []string{"later", "own-deadline"} {
			m := retries[id+"."+s]
			require.NotNil(t, m, "%s's copy of %s not held in RETRIES", s, id)
			assert.True(t, strings.HasPrefix(m.Subject, "retries.at."+s+"."), m.Subject)
			assert.Equal(t, "@at "+timeHeader(m.Header, streams.HeaderDeliverAt).Format(time.RFC3339Nano), m.Header.Get("Nats-Schedule"))
			assert.Equal(t, "retries.due."+s, m.Header.Get("Nats-Schedule-Target"))
			assert.NotContains(t, lane, id+"."+s, "%s's copy of %s is on its lane before it is due", s, id)
		}
		for _, id := range []string{"past", "plain"} {
			assert.Contains(t, lane, id+"."+s, "%s's copy of %s is not on its lane", s, id)
			assert.NotContains(t, retries, id+"."+s)
		}
		for _, id := range []string{"after-deadline", "beyond-horizon"} {
			m := dlq["dlq.fanout."+id+"."+s]
			require.NotNil(t, m, "%s's copy of %s not dead-lettered", s, id)
			assert.Equal(t, "dlq."+s+".expired", m.Subject)
			assert.Equal(t, "0", m.Header.Get(streams.HeaderAttempts))
			assert.Contains(t, m.Header.Get(streams.HeaderLastError), map[string]string{
				"after-deadline": "not before its deadline", "beyond-horizon": "more than EVENTS' max age (168h0m0s)",
			}[id])
			assert.NotContains(t, retries, id+"."+s)
			assert.NotContains(t, lane, id+"."+s)
		}
		// An unreadable due time is never taken for none: malformed.
		m := dlq["dlq.fanout.garbled."+s]
		require.NotNil(t, m, "%s's copy of garbled not dead-lettered", s)
		assert.Equal(t, "dlq."+s+".malformed", m.Subject)
		assert.Contains(t, m.Header.Get(streams.HeaderLastError), `Relay-Deliver-At "tomorrow morning" is not an RFC 3339 time`)
		assert.NotContains(t, lane, "garbled."+s)
	}
	assert.Len(t, dlq, 6)

	// --deadline-after: b only, from the due time, never over the event's
	// own deadline.
	for id, m := range retries {
		if strings.HasSuffix(id, ".a") && id != "own-deadline.a" {
			assert.Empty(t, m.Header.Get(streams.HeaderDeadline), "a sets no default deadline, but %s carries one", id)
		}
	}
	assert.Equal(t, now.Add(2*time.Hour), timeHeader(retries["later.b"].Header, streams.HeaderDeadline), "deadline of b's copy of later")
	assert.Equal(t, now.Add(3*time.Hour), timeHeader(retries["own-deadline.b"].Header, streams.HeaderDeadline), "own deadline replaced")
	assert.Equal(t, now.Add(-time.Minute+time.Hour), timeHeader(lane["past.b"].Header, streams.HeaderDeadline))
	published := timeHeader(lane["plain.b"].Header, streams.HeaderPublishedAt)
	assert.Equal(t, published.Add(time.Hour), timeHeader(lane["plain.b"].Header, streams.HeaderDeadline), "plain: from its publication")
	assert.Empty(t, lane["plain.a"].Header.Get(streams.HeaderDeadline))
}

// TestHorizonIsTheShorterOfRelaysAgeAndEventsMaxAge: an operator's max_age
// on EVENTS shorter than relay's own age (Horizon) bounds how far ahead an
// event may be due: JetStream deletes the event at it.
func TestHorizonIsTheShorterOfRelaysAgeAndEventsMaxAge(t *testing.T) {
	e := newEnv(t, sub("a"))
	ctx := testutil.Context(t)
	s, err := e.n.JS.Stream(ctx, streams.Events)
	require.NoError(t, err)
	cfg := s.CachedInfo().Config
	cfg.MaxAge = 48 * time.Hour
	_, err = e.n.JS.UpdateStream(ctx, cfg)
	require.NoError(t, err)
	now := time.Now().UTC()
	at := func(d time.Duration) nats.Header {
		return nats.Header{streams.HeaderDeliverAt: {now.Add(d).Format(time.RFC3339Nano)}}
	}
	for id, h := range map[string]nats.Header{"in-a-day": at(24 * time.Hour), "in-three-days": at(72 * time.Hour)} {
		h[nats.MsgIdHdr] = []string{id}
		publish(t, e.n.JS, "order.paid", []byte(`{}`), h)
	}
	e.start(t, func(c *fanout.Config) { c.Horizon = 7 * 24 * time.Hour })
	waitFannedOut(t, e.n.JS, 2)

	require.Contains(t, stored(t, e.n.JS, streams.Retries), "in-a-day.a", "the copy due within EVENTS' max_age is not held")
	dead := stored(t, e.n.JS, streams.DLQ)["dlq.fanout.in-three-days.a"]
	require.NotNil(t, dead, "the copy due past EVENTS' max_age is not dead-lettered")
	assert.Contains(t, dead.Header.Get(streams.HeaderLastError), "more than EVENTS' max age (48h0m0s)")
}
