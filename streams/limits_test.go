package streams_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

// TestEnsureTurnsAnOperatorsEventsLimitIntoRefusals: an operator's
// max_bytes or max_msgs on EVENTS, set with the discard old of relay's
// older definition, would make JetStream delete the oldest events whether
// the fan-out had copied them or not. Ensure keeps the limit and makes
// EVENTS discard new, without a warning: with no fan-out running (it is
// stopped), events published past the limit are refused with a refusal
// NoRoom knows, and every event acknowledged stays, from the first on.
func TestEnsureTurnsAnOperatorsEventsLimitIntoRefusals(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		limit  func(*jetstream.StreamConfig)
		reason string
	}{
		{"max_bytes", func(c *jetstream.StreamConfig) { c.MaxBytes = 1 << 20 }, "maximum bytes exceeded"},
		{"max_msgs", func(c *jetstream.StreamConfig) { c.MaxMsgs = 100 }, "maximum messages exceeded"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			n := testutil.StartNATS(t)
			ensure(t, n.JS, streams.Options{})
			edit(t, n.JS, streams.Events, func(cfg *jetstream.StreamConfig) {
				c.limit(cfg)
				cfg.Discard = jetstream.DiscardOld
			})
			if log := ensure(t, n.JS, streams.Options{}); strings.Contains(log, "level=WARN") {
				t.Errorf("Ensure warned of a limit that loses nothing:\n%s", log)
			}
			cfg := info(t, n.JS, streams.Events).Config
			want := cfg
			c.limit(&want)
			if cfg.Discard != jetstream.DiscardNew || cfg.MaxBytes != want.MaxBytes || cfg.MaxMsgs != want.MaxMsgs {
				t.Fatalf("EVENTS: discard %v, max_bytes %d, max_msgs %d; want discard new and the operator's limit kept", cfg.Discard, cfg.MaxBytes, cfg.MaxMsgs)
			}
			ctx := testutil.Context(t)
			body := bytes.Repeat([]byte("x"), 4<<10)
			acked := 0
			var refusal error
			for i := 0; i < 1000 && refusal == nil; i++ {
				m := &nats.Msg{Subject: "events.x", Data: body, Header: nats.Header{}}
				m.Header.Set(nats.MsgIdHdr, fmt.Sprintf("e-%d", i))
				if _, err := n.JS.PublishMsg(ctx, m); err != nil {
					refusal = err
					continue
				}
				acked++
			}
			if refusal == nil {
				t.Fatalf("1000 events of 4 KiB acknowledged past EVENTS' %s", c.name)
			}
			if !streams.NoRoom(refusal) || !strings.Contains(refusal.Error(), c.reason) {
				t.Fatalf("past EVENTS' %s the publisher got %v, want a refusal for want of room (%s)", c.name, refusal, c.reason)
			}
			state := info(t, n.JS, streams.Events).State
			if state.FirstSeq != 1 || state.Msgs != uint64(acked) {
				t.Fatalf("EVENTS holds %d events from sequence %d after %d were acknowledged: events were deleted", state.Msgs, state.FirstSeq, acked)
			}
			t.Logf("%s: %d events acknowledged, then refused: %v", c.name, acked, refusal)
		})
	}
}

// TestEnsureRefusesALimitThatWouldDeleteDeliveries: a max_bytes, max_msgs
// or max_age on RETRIES (which must discard old, for message schedules)
// and a max_age on DELIVERIES would make JetStream delete deliveries not
// yet made, without a dead letter. Ensure refuses to go on with
// ErrLossyLimit, in one line naming the stream and the limit, and changes
// nothing of it: the operator removes it.
func TestEnsureRefusesALimitThatWouldDeleteDeliveries(t *testing.T) {
	t.Parallel()
	n := testutil.StartNATS(t)
	ensure(t, n.JS, streams.Options{})
	for _, c := range []struct {
		stream, want  string
		limit, remove func(*jetstream.StreamConfig)
	}{
		{streams.Retries, "RETRIES has max_bytes 8 MiB",
			func(c *jetstream.StreamConfig) { c.MaxBytes = 8 << 20 }, func(c *jetstream.StreamConfig) { c.MaxBytes = -1 }},
		{streams.Retries, "RETRIES has max_msgs 5000",
			func(c *jetstream.StreamConfig) { c.MaxMsgs = 5000 }, func(c *jetstream.StreamConfig) { c.MaxMsgs = -1 }},
		{streams.Retries, "RETRIES has max_age 1h0m0s",
			func(c *jetstream.StreamConfig) { c.MaxAge = time.Hour }, func(c *jetstream.StreamConfig) { c.MaxAge = 0 }},
		{streams.Deliveries, "DELIVERIES has max_age 24h0m0s",
			func(c *jetstream.StreamConfig) { c.MaxAge = 24 * time.Hour }, func(c *jetstream.StreamConfig) { c.MaxAge = 0 }},
	} {
		edit(t, n.JS, c.stream, c.limit)
		before := info(t, n.JS, c.stream).Config
		err := streams.Ensure(testutil.Context(t), n.JS, streams.Options{Logger: slog.New(slog.DiscardHandler)})
		if !errors.Is(err, streams.ErrLossyLimit) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("Ensure with %s: %v; want ErrLossyLimit in one line naming it", c.want, err)
		}
		after := info(t, n.JS, c.stream).Config
		if after.MaxBytes != before.MaxBytes || after.MaxMsgs != before.MaxMsgs || after.MaxAge != before.MaxAge || after.Discard != before.Discard {
			t.Errorf("Ensure refusing %s changed %s: %+v", c.want, c.stream, after)
		}
		edit(t, n.JS, c.stream, c.remove)
	}
	ensure(t, n.JS, streams.Options{})
}

// TestEnsureSizesAgainAnEventsLeftAtItsProbe: on a bounded store EVENTS is
// created at the size that probes the server and then lowered, as
// DELIVERIES is; one found still at that size is sized again, while the
// same size set by an operator is kept.
func TestEnsureSizesAgainAnEventsLeftAtItsProbe(t *testing.T) {
	t.Parallel()
	js := connect(t, startServer(t, &server.Options{JetStreamMaxStore: 64 << 20}))
	ensure(t, js, streams.Options{})
	sized := info(t, js, streams.Events).Config
	if sized.MaxBytes != 8<<20 || sized.Discard != jetstream.DiscardNew {
		t.Fatalf("EVENTS on a 64 MiB store: max_bytes %d, discard %v; want 8 MiB (half of the 16 MiB DELIVERIES and ATTEMPTS leave) and new", sized.MaxBytes, sized.Discard)
	}
	probe := 2 * sized.MaxBytes
	edit(t, js, streams.Events, func(c *jetstream.StreamConfig) {
		c.MaxBytes = probe
		c.Metadata = map[string]string{"relay_probe_max_bytes": strconv.FormatInt(probe, 10)}
	})
	ensure(t, js, streams.Options{})
	again := info(t, js, streams.Events).Config
	if again.MaxBytes != sized.MaxBytes {
		t.Errorf("left at its probe of %d, EVENTS has %d, want %d again", probe, again.MaxBytes, sized.MaxBytes)
	}
	if _, ok := again.Metadata["relay_probe_max_bytes"]; ok {
		t.Errorf("the probe's mark stayed: %v", again.Metadata)
	}
	edit(t, js, streams.Events, func(c *jetstream.StreamConfig) { c.MaxBytes = probe })
	ensure(t, js, streams.Options{})
	if got := info(t, js, streams.Events).Config.MaxBytes; got != probe {
		t.Errorf("an operator's %d became %d", probe, got)
	}
}
