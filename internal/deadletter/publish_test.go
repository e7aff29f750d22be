package deadletter

import (
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

// rawDLQ returns the stored DLQ message with sequence seq, body and all.
func rawDLQ(t *testing.T, js jetstream.JetStream, seq uint64) *jetstream.RawStreamMsg {
	t.Helper()
	ctx := testutil.Context(t)
	s, err := js.Stream(ctx, streams.DLQ)
	require.NoError(t, err)
	m, err := s.GetMsg(ctx, seq)
	require.NoError(t, err)
	return m
}

// dlqMsgs is how many messages the DLQ stream holds.
func dlqMsgs(t *testing.T, js jetstream.JetStream) uint64 {
	t.Helper()
	ctx := testutil.Context(t)
	s, err := js.Stream(ctx, streams.DLQ)
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	return info.State.Msgs
}

// only lists the entries of one subscriber and requires there to be one.
func only(t *testing.T, js jetstream.JetStream, subscriber string) Entry {
	t.Helper()
	got, err := List(testutil.Context(t), js, Filter{Subscriber: subscriber}, 0)
	require.NoError(t, err)
	require.Len(t, got, 1)
	return got[0]
}

// cloneHeader is a deep copy of h, nil for nil.
func cloneHeader(h nats.Header) nats.Header {
	if h == nil {
		return nil
	}
	out := nats.Header{}
	for k, v := range h {
		out[k] = append([]string(nil), v...)
	}
	return out
}

func TestPublishThenListRoundTripsEveryField(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	cet := time.FixedZone("CET", 3600)
	published := time.Date(2025, 3, 1, 10, 0, 0, 123456789, cet)
	first := time.Date(2025, 3, 1, 10, 0, 5, 987654321, cet)
	dead := time.Date(2025, 3, 1, 12, 1, 2, 345678901, cet)
	binary := make([]byte, 256)
	for i := range binary {
		binary[i] = byte(i)
	}

	tests := []struct {
		name   string
		body   []byte
		header nats.Header
		death  Death
		// absent are headers the stored copy must not have.
		absent []string
	}{
		{
			name: "every field",
			body: []byte(`{"id":"evt_1","video_id":"vv_9f31c2"}`),
			header: nats.Header{
				"Content-Type":                {"application/vnd.demo+json"},
				"X-Trace":                     {"t-1", "t-2"},
				streams.HeaderEventID:         {"evt_1"},
				streams.HeaderEventType:       {"video.trending"},
				streams.HeaderPublishedAt:     {published.Format(time.RFC3339Nano)},
				streams.HeaderDeadline:        {"2025-03-02T00:00:00Z"},
				jetstream.MsgIDHeader:         {"evt_1.full"},
				"Nats-Expected-Last-Sequence": {"999999"}, // fails the publish unless stripped
				"nats-rollup":                 {"all"},
				streams.HeaderLastStatus:      {"503"},   // from an earlier attempt: replaced
				"relay-reason":                {"stale"}, // any case: replaced
			},
			death: Death{
				Subscriber: "full", Reason: MaxAttempts, Attempts: 12, LastStatus: 500,
				LastError: "500 Internal Server Error: boom", FirstAttemptAt: first, DeadAt: dead, OriginSeq: 41,
			},
			absent: []string{"Nats-Expected-Last-Sequence", "nats-rollup", "relay-reason"},
		},
		{
			name: "never attempted, empty body",
			body: []byte{},
			header: nats.Header{
				streams.HeaderEventID:    {"evt_2"},
				streams.HeaderEventType:  {"order.shipped"},
				streams.HeaderLastStatus: {"503"},
				streams.HeaderLastError:  {"timeout"},
			},
			death:  Death{Subscriber: "expired", Reason: Expired, DeadAt: dead, OriginSeq: 42},
			absent: []string{streams.HeaderLastStatus, streams.HeaderLastError, streams.HeaderFirstAttemptAt},
		},
		{
			name:   "binary body, no headers",
			body:   binary,
			death:  Death{Subscriber: "binary", Reason: Rejected, Attempts: 1, LastStatus: 400, FirstAttemptAt: first, DeadAt: dead, OriginSeq: 43},
			absent: []string{streams.HeaderLastError, streams.HeaderEventID},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := testutil.Context(t)
			before := cloneHeader(tt.header)
			_, err := Publish(ctx, n.JS, tt.body, tt.header, tt.death)
			require.NoError(t, err)
			require.Equal(t, before, tt.header, "Publish must not change the caller's header")

			e := only(t, n.JS, tt.death.Subscriber)
			d := tt.death
			require.Equal(t, d.Subscriber, e.Subscriber)
			require.Equal(t, d.Reason, e.Reason)
			require.Equal(t, d.Attempts, e.Attempts)
			require.Equal(t, d.LastStatus, e.LastStatus)
			require.Equal(t, d.LastError, e.LastError)
			require.Equal(t, streams.HeaderValue(tt.header, streams.HeaderEventID), e.EventID)
			require.Equal(t, streams.HeaderValue(tt.header, streams.HeaderEventType), e.EventType)
			require.Equal(t, len(tt.body), e.Size)
			require.True(t, d.DeadAt.Equal(e.DeadAt), "dead_at %s, want %s", e.DeadAt, d.DeadAt)
			require.Equal(t, time.UTC, e.DeadAt.Location())
			if d.FirstAttemptAt.IsZero() {
				require.Nil(t, e.FirstAttemptAt)
			} else {
				require.NotNil(t, e.FirstAttemptAt)
				require.True(t, d.FirstAttemptAt.Equal(*e.FirstAttemptAt))
				require.Equal(t, time.UTC, e.FirstAttemptAt.Location())
			}
			if pub := streams.HeaderValue(tt.header, streams.HeaderPublishedAt); pub != "" {
				require.NotNil(t, e.PublishedAt)
				require.True(t, published.Equal(*e.PublishedAt))
				require.Equal(t, time.UTC, e.PublishedAt.Location())
			} else {
				require.Nil(t, e.PublishedAt)
			}

			raw := rawDLQ(t, n.JS, e.DLQSeq)
			require.Equal(t, Subject(d.Subscriber, d.Reason), raw.Subject)
			require.Equal(t, len(tt.body), len(raw.Data))
			require.Equal(t, string(tt.body), string(raw.Data), "body byte-exact")
			h := raw.Header
			require.Equal(t, "dlq."+strconv.FormatUint(d.OriginSeq, 10), h.Get(jetstream.MsgIDHeader))
			for k := range h {
				if streams.IsNatsHeader(k) {
					require.Equal(t, jetstream.MsgIDHeader, k, "only relay's own Nats-Msg-Id may remain")
				}
			}
			for k, v := range tt.header {
				if streams.IsNatsHeader(k) || isOwnHeader(k) {
					continue
				}
				require.Equal(t, v, h.Values(k), "header %s survives", k)
			}
			require.Equal(t, string(d.Reason), h.Get(streams.HeaderReason))
			require.Equal(t, strconv.Itoa(d.Attempts), h.Get(streams.HeaderAttempts))
			require.Equal(t, strconv.FormatUint(d.OriginSeq, 10), h.Get(streams.HeaderOriginSeq))
			require.Equal(t, d.DeadAt.UTC().Format(time.RFC3339Nano), h.Get(streams.HeaderDeadAt))
			for _, k := range tt.absent {
				require.Empty(t, h.Values(k), "header %s must be absent", k)
			}
		})
	}
}

func TestPublishTwiceWithTheSameOriginSeqStoresOneEntry(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	ctx := testutil.Context(t)
	hdr := nats.Header{streams.HeaderEventID: {"evt_dup"}}
	d := Death{Subscriber: "demo", Reason: MaxAttempts, Attempts: 12, OriginSeq: 7, DeadAt: time.Unix(100, 0)}
	first, err := Publish(ctx, n.JS, []byte("x"), hdr, d)
	require.NoError(t, err)

	// The redelivered original, dead-lettered again after a crash, even
	// for another reason and at another time.
	again := d
	again.Reason, again.DeadAt = Deadline, time.Unix(200, 0)
	seq, err := Publish(ctx, n.JS, []byte("x"), hdr, again)
	require.NoError(t, err, "a duplicate PubAck is success")
	require.Equal(t, first, seq, "a duplicate names the first copy's sequence")

	require.EqualValues(t, 1, dlqMsgs(t, n.JS))
	got, err := List(ctx, n.JS, Filter{}, 0)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, MaxAttempts, got[0].Reason)
	require.True(t, got[0].DeadAt.Equal(time.Unix(100, 0)))
}

func TestPublishCutsLastErrorToOneShortLine(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	ctx := testutil.Context(t)
	var b strings.Builder
	for b.Len() < 5*1024 {
		b.WriteString("<p>Service Unavailable</p>\r\n\t")
	}
	d := Death{Subscriber: "long", Reason: MaxAttempts, Attempts: 3, LastStatus: 503, LastError: b.String(), OriginSeq: 1}
	_, err := Publish(ctx, n.JS, nil, nil, d)
	require.NoError(t, err)

	got := only(t, n.JS, "long").LastError
	require.LessOrEqual(t, len(got), MaxLastError)
	require.Greater(t, len(got), MaxLastError-16, "the cut keeps as much as fits")
	require.True(t, utf8.ValidString(got))
	require.NotContains(t, got, "\n")
	require.NotContains(t, got, "\r")
	require.NotContains(t, got, "\t")
	require.True(t, strings.HasPrefix(got, "<p>Service Unavailable</p>"))
	require.True(t, strings.HasSuffix(got, ellipsis))
}

func TestCleanError(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"empty", "", ""},
		{"plain", "connection refused", "connection refused"},
		{"line breaks", "first\r\nsecond\nthird", "first  second third"},
		{"control characters", "a\x00b\x1bc\x7fd\u0085e", "a b c d e"},
		{"unicode separators", "a\u2028b\u2029c", "a b c"},
		{"invalid UTF-8", "bad \xff\xfe byte", "bad \uFFFD byte"},
		{"trimmed", "  \n padded \t\n", "padded"},
		{"exactly the limit", strings.Repeat("a", MaxLastError), strings.Repeat("a", MaxLastError)},
		{"one over the limit", strings.Repeat("a", MaxLastError+1), strings.Repeat("a", MaxLastError-len(ellipsis)) + ellipsis},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, CleanError(tt.in))
		})
	}
	t.Run("multi-byte characters at the cut", func(t *testing.T) {
		t.Parallel()
		for _, s := range []string{strings.Repeat("é", 700), strings.Repeat("日本", 400), "a" + strings.Repeat("😀", 400)} {
			got := CleanError(s)
			require.LessOrEqual(t, len(got), MaxLastError)
			require.True(t, utf8.ValidString(got), "cut inside a character: %q", got[len(got)-8:])
			require.True(t, strings.HasSuffix(got, ellipsis))
		}
	})
}

func TestPublishRejectsWhatItCannotStore(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	ok := Death{Subscriber: "demo", Reason: Gone, Attempts: 1, LastStatus: 410, OriginSeq: 9}
	tests := []struct {
		name   string
		change func(*Death)
	}{
		{"empty subscriber", func(d *Death) { d.Subscriber = "" }},
		{"subscriber with a space", func(d *Death) { d.Subscriber = "a b" }},
		{"subscriber with a dot", func(d *Death) { d.Subscriber = "a.b" }},
		{"subscriber wildcard", func(d *Death) { d.Subscriber = "*" }},
		{"subscriber too long", func(d *Death) { d.Subscriber = strings.Repeat("a", 65) }},
		{"empty reason", func(d *Death) { d.Reason = "" }},
		{"unknown reason", func(d *Death) { d.Reason = "nope" }},
		{"zero origin sequence", func(d *Death) { d.OriginSeq = 0 }},
		{"negative attempts", func(d *Death) { d.Attempts = -1 }},
		{"negative status", func(d *Death) { d.LastStatus = -1 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := ok
			tt.change(&d)
			_, err := Publish(testutil.Context(t), n.JS, []byte("x"), nil, d)
			require.ErrorIs(t, err, ErrInvalidDeath)
		})
	}
	t.Cleanup(func() {
		if got := dlqMsgs(t, n.JS); got != 0 {
			t.Errorf("invalid deaths stored %d DLQ messages", got)
		}
	})
}

func TestPublishWithoutTheDLQStreamFails(t *testing.T) {
	t.Parallel()
	n := testutil.StartNATS(t)
	d := Death{Subscriber: "demo", Reason: Gone, OriginSeq: 1}
	_, err := Publish(testutil.Context(t), n.JS, []byte("x"), nil, d)
	require.Error(t, err)
	require.Contains(t, err.Error(), "DELIVERIES sequence 1")
}
