package tracing

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/deliver"
	"github.com/relay-dev/relay/streams"
)

const (
	// eventTraceparent is a sampled W3C traceparent, as a publisher's
	// instrumentation writes it.
	eventTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	eventTraceID     = "4bf92f3577b34da6a3ce929d0e0e4736"
	eventSpanID      = "00f067aa0ba902b7"
	eventTracestate  = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
)

// copyHeader is what a delivery's headers look like on its lane: relay's
// identity headers, and the event's own.
func copyHeader(kv ...string) nats.Header {
	h := nats.Header{}
	h.Set(streams.HeaderEventID, "ord-1")
	h.Set(streams.HeaderEventType, "order.paid")
	h.Set(streams.HeaderPublishedAt, "2026-01-02T03:04:05Z")
	h.Set("Nats-Msg-Id", "ord-1.api")
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

// A publisher's trace headers are read whatever the case of their names
// (NATS header names are case-sensitive, and publishers write
// "traceparent", "Traceparent" and worse), and forwarded to the request
// under the names net/http gives them.
func TestParentOfReadsTheTraceHeadersInAnyCase(t *testing.T) {
	t.Parallel()
	for _, names := range [][2]string{
		{"traceparent", "tracestate"},
		{"Traceparent", "Tracestate"},
		{"TRACEPARENT", "TraceState"},
	} {
		p := ParentOf(copyHeader(names[0], eventTraceparent, names[1], eventTracestate))
		require.True(t, p.Valid(), names)
		require.Equal(t, eventTraceparent, p.Traceparent())
		require.Equal(t, eventTracestate, p.Tracestate())
		h := p.Forward(nil)
		require.Equal(t, []string{eventTraceparent}, h.Values("traceparent"))
		require.Equal(t, []string{eventTracestate}, h.Values("tracestate"))
	}
}

// A traceparent the W3C specification calls invalid is no parent: nothing
// is forwarded, and the request goes without trace headers rather than
// with one the receiver would choke on. Its tracestate is dropped with it.
func TestParentOfRefusesAnInvalidTraceparent(t *testing.T) {
	t.Parallel()
	for name, v := range map[string]string{
		"empty":                   "",
		"short":                   "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0",
		"version 00 with a field": eventTraceparent + "-extra",
		"upper-case hex":          "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
		"not hex":                 "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
		"zero trace id":           "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
		"zero parent id":          "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
		"version ff":              "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"reserved flags in 00":    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09",
		"wrong separators":        "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",
		"a later version glued":   "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
		"a control character":     "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0\x01",
	} {
		p := ParentOf(copyHeader("traceparent", v, "tracestate", eventTracestate))
		require.False(t, p.Valid(), name)
		require.Nil(t, p.Forward(nil), name)
		require.Equal(t, trace0(), p.SpanContext().TraceID().String(), name)
	}
	// Two traceparents, in one header or under two spellings, are
	// ambiguous: none.
	require.False(t, ParentOf(copyHeader("traceparent", eventTraceparent, "traceparent", eventTraceparent)).Valid())
	require.False(t, ParentOf(copyHeader("traceparent", eventTraceparent, "Traceparent", eventTraceparent)).Valid())
	require.False(t, ParentOf(nil).Valid())
}

func trace0() string { return strings.Repeat("0", 32) }

// A traceparent of a later version is carried on as version 00, its first
// four fields alone and only the flags version 00 knows, as the
// specification asks of a vendor that speaks version 00.
func TestParentOfCarriesALaterVersionAsVersion00(t *testing.T) {
	t.Parallel()
	p := ParentOf(copyHeader("traceparent", "cc-"+eventTraceID+"-"+eventSpanID+"-ff-what-comes-next"))
	require.Equal(t, "00-"+eventTraceID+"-"+eventSpanID+"-03", p.Traceparent())
	p = ParentOf(copyHeader("traceparent", "01-"+eventTraceID+"-"+eventSpanID+"-01"))
	require.Equal(t, eventTraceparent, p.Traceparent())
}

// A tracestate goes with its traceparent when it can be sent as it is:
// several values are joined, as the specification says; one too long or
// holding a byte outside printable ASCII is dropped, the traceparent kept.
func TestParentOfForwardsTracestateOnlyWhenItCan(t *testing.T) {
	t.Parallel()
	h := copyHeader("traceparent", eventTraceparent, "tracestate", "congo=t61rcWkgMzE")
	h.Add("tracestate", "rojo=00f067aa0ba902b7")
	require.Equal(t, eventTracestate, ParentOf(h).Tracestate())

	long := "k=" + strings.Repeat("v", MaxTracestate-1)
	for name, v := range map[string]string{"too long": long, "tab": "a=b\tc", "non-ASCII": "a=ü"} {
		p := ParentOf(copyHeader("traceparent", eventTraceparent, "tracestate", v))
		require.True(t, p.Valid(), name)
		require.Empty(t, p.Tracestate(), name)
		require.Empty(t, p.Forward(nil).Values("tracestate"), name)
	}
	fits := "k=" + strings.Repeat("v", MaxTracestate-2)
	require.Equal(t, fits, ParentOf(copyHeader("traceparent", eventTraceparent, "tracestate", fits)).Tracestate())
	require.Empty(t, ParentOf(copyHeader("tracestate", eventTracestate)).Tracestate(), "no tracestate without a traceparent")
}

// Forward adds to a subscriber's own headers, replaces a traceparent among
// them (the event's trace is the one that goes on) and drops a tracestate
// the event does not carry.
func TestForwardKeepsTheSubscribersHeaders(t *testing.T) {
	t.Parallel()
	own := http.Header{}
	own.Set("Authorization", "Bearer x")
	own.Set("Traceparent", "00-11111111111111111111111111111111-2222222222222222-01")
	own.Set("Tracestate", "mine=1")
	h := ParentOf(copyHeader("traceparent", eventTraceparent)).Forward(own)
	require.Equal(t, "Bearer x", h.Get("Authorization"))
	require.Equal(t, []string{eventTraceparent}, h.Values("Traceparent"))
	require.Empty(t, h.Values("Tracestate"))
	require.Equal(t, own, ParentOf(copyHeader()).Forward(own), "no parent: the header as it was")
}

// The cost of propagation on a lane: reading a delivery without trace
// headers and forwarding nothing allocates nothing; one with them
// allocates the forwarded values alone.
func TestParentOfAllocatesNothingWithoutTraceHeaders(t *testing.T) {
	without := copyHeader("Content-Type", "application/json")
	require.Zero(t, testing.AllocsPerRun(1000, func() {
		if ParentOf(without).Forward(nil) != nil {
			t.Fatal("forwarded something")
		}
	}))
	with := copyHeader("traceparent", eventTraceparent, "tracestate", eventTracestate)
	require.Zero(t, testing.AllocsPerRun(1000, func() {
		if !ParentOf(with).Valid() {
			t.Fatal("no parent")
		}
	}))
	into := http.Header{"Authorization": {"Bearer x"}}
	require.Equal(t, 2.0, testing.AllocsPerRun(1000, func() { ParentOf(with).Forward(into) }),
		"the two forwarded values, nothing more")
}

// SetOn replaces the trace headers of a copy, whatever the case they were
// published in, so that a copy never carries two traceparents.
func TestSetOnReplacesTheTraceHeadersInAnyCase(t *testing.T) {
	t.Parallel()
	h := copyHeader("Traceparent", eventTraceparent, "TRACESTATE", eventTracestate)
	p := ParentOf(copyHeader("traceparent", "00-"+strings.Repeat("a", 32)+"-"+strings.Repeat("b", 16)+"-01", "tracestate", "x=y"))
	p.SetOn(h)
	require.Equal(t, []string{p.Traceparent()}, h["traceparent"])
	require.Equal(t, []string{"x=y"}, h["tracestate"])
	require.NotContains(t, h, "Traceparent")
	require.NotContains(t, h, "TRACESTATE")
	require.Equal(t, "ord-1", h.Get(streams.HeaderEventID), "other headers kept")

	before := copyHeader("traceparent", eventTraceparent)
	Parent{}.SetOn(before)
	require.Equal(t, eventTraceparent, before.Get("traceparent"), "no parent: nothing changed")
}

// A parent's span context is the remote parent the SDK needs: its ids,
// flags and parsed tracestate; and a span's context written back is the
// same traceparent.
func TestSpanContextRoundTrips(t *testing.T) {
	t.Parallel()
	p := ParentOf(copyHeader("traceparent", eventTraceparent, "tracestate", eventTracestate))
	sc := p.SpanContext()
	require.True(t, sc.IsValid())
	require.True(t, sc.IsRemote())
	require.True(t, sc.IsSampled())
	require.Equal(t, eventTraceID, sc.TraceID().String())
	require.Equal(t, eventSpanID, sc.SpanID().String())
	require.Equal(t, eventTracestate, sc.TraceState().String())
	require.Equal(t, p, parentOfSpan(sc))

	unsampled := ParentOf(copyHeader("traceparent", "00-"+eventTraceID+"-"+eventSpanID+"-00")).SpanContext()
	require.False(t, unsampled.IsSampled())
	require.Equal(t, Parent{}, parentOfSpan(Parent{}.SpanContext()))
}

// What Forward writes passes relay's own HTTP client untouched: the
// receiver gets the event's traceparent and tracestate as they were
// published, beside the subscriber's own headers.
func TestForwardedTraceReachesTheReceiver(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = r.Header.Clone()
		mu.Unlock()
	}))
	defer srv.Close()
	client, err := deliver.NewClient(deliver.WithAllowPrivate(true))
	require.NoError(t, err)
	defer client.CloseIdleConnections()

	own := http.Header{"X-Tenant": {"acme"}}
	out := client.Send(context.Background(), deliver.Request{
		URL: srv.URL, ID: "ord-1", Body: []byte(`{}`),
		Header: ParentOf(copyHeader("traceparent", eventTraceparent, "tracestate", eventTracestate)).Forward(own),
	})
	require.Equal(t, deliver.Delivered, out.Class, out.Err)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, eventTraceparent, got.Get("traceparent"))
	require.Equal(t, eventTracestate, got.Get("tracestate"))
	require.Equal(t, "acme", got.Get("X-Tenant"))
}
