package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/internal/tracing"
)

const (
	// traceID and parentSpanID make the traceparent an instrumented
	// publisher puts on its event (sampled).
	traceID      = "4bf92f3577b34da6a3ce929d0e0e4736"
	parentSpanID = "00f067aa0ba902b7"
	traceparent  = "00-" + traceID + "-" + parentSpanID + "-01"
	tracestate   = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
)

// scriptedReceiver answers its requests with the statuses given, in turn,
// then 200, and records each.
type scriptedReceiver struct {
	*httptest.Server
	mu       sync.Mutex
	statuses []int
	got      []http.Header
}

func newScriptedReceiver(t *testing.T, statuses ...int) *scriptedReceiver {
	t.Helper()
	r := &scriptedReceiver{statuses: statuses}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.got = append(r.got, req.Header.Clone())
		status := http.StatusOK
		if len(r.statuses) > 0 {
			status, r.statuses = r.statuses[0], r.statuses[1:]
		}
		r.mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *scriptedReceiver) headers() []http.Header {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]http.Header(nil), r.got...)
}

// withoutOTEL is the environment without any OTEL_* variable.
func withoutOTEL() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OTEL_") {
			env = append(env, kv)
		}
	}
	return env
}

// The real binary, run with OTEL_EXPORTER_OTLP_ENDPOINT pointing at an
// OTLP/HTTP endpoint: an event published with a traceparent is sent twice
// (a 503, then a 200, through RETRIES), and once relay run has stopped on
// SIGTERM the endpoint holds one fan-out span, the child of the event's
// span, and one attempt span per request, each the child of the fan-out
// span, all in the event's trace, with their attributes; each request's
// traceparent names its own attempt span. The batch delay is a minute, so
// the spans arrive only through the flush of the stop.
func TestTraceOfAnEventReachesTheReceiverAndTheCollector(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	sink := testutil.StartOTLPSink(t)
	rcv := newScriptedReceiver(t, http.StatusServiceUnavailable)
	mustRelay(t, "sub", "add", "api", "--nats", n.URL, "--url", rcv.URL, "--secret", testSecret,
		"--retry-base", "100ms", "--retry-max", "100ms")

	logs := &testutil.Buffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("relay's log:\n%s", logs)
		}
	})
	cmd := exec.Command(buildRelay(t), "run", "--nats", n.URL, "--metrics", "", "--lanes", "4", "--allow-private-targets")
	cmd.Env = append(withoutOTEL(), "OTEL_EXPORTER_OTLP_ENDPOINT="+sink.URL, "OTEL_BSP_SCHEDULE_DELAY=60000")
	cmd.Stderr = logs
	relay := testutil.StartProcess(t, cmd)

	publish(t, n.JS, "order.paid", "ord-1", []byte(`{"n":1}`), "traceparent", traceparent, "tracestate", tracestate)
	testutil.Eventually(t, func() bool { return len(rcv.headers()) == 2 }, "not sent twice")
	require.NoError(t, relay.Stop(syscall.SIGTERM, 30*time.Second), "relay run exits 0 on SIGTERM")
	require.Contains(t, logs.String(), "tracing: exporting spans over OTLP/HTTP")

	var fan []testutil.ExportedSpan
	attempts := map[string]testutil.ExportedSpan{} // by attempt number
	for _, s := range sink.Spans() {
		require.Equal(t, tracing.ServiceName, s.Service)
		require.Equal(t, traceID, s.TraceID, "%+v", s)
		switch s.Name {
		case tracing.SpanFanout:
			fan = append(fan, s)
		case tracing.SpanAttempt:
			attempts[s.Attributes[tracing.AttrAttempt]] = s
		}
	}
	require.Len(t, fan, 1, "%+v", sink.Spans())
	require.Equal(t, parentSpanID, fan[0].ParentSpanID, "the fan-out is the child of the event's span")
	require.Equal(t, "ord-1", fan[0].Attributes[tracing.AttrEventID])
	require.Equal(t, "order.paid", fan[0].Attributes[tracing.AttrEventType])
	require.Equal(t, "1", fan[0].Attributes[tracing.AttrCopies])
	require.Len(t, attempts, 2, "%+v", sink.Spans())
	for number, want := range map[string]struct{ status, outcome string }{
		"1": {"503", "retryable"},
		"2": {"200", "delivered"},
	} {
		a := attempts[number]
		require.Equal(t, fan[0].SpanID, a.ParentSpanID, "attempt %s is the child of the fan-out", number)
		require.Equal(t, "api", a.Attributes[tracing.AttrSubscriber])
		require.Equal(t, "ord-1", a.Attributes[tracing.AttrEventID])
		require.Equal(t, want.status, a.Attributes[tracing.AttrHTTPStatus], number)
		require.Equal(t, want.outcome, a.Attributes[tracing.AttrOutcome], number)
	}
	require.NotEmpty(t, attempts["1"].Error, "a failed attempt is an error span")
	require.Empty(t, attempts["2"].Error)
	got := rcv.headers()
	for i, number := range []string{"1", "2"} {
		require.Equal(t, "00-"+traceID+"-"+attempts[number].SpanID+"-01", got[i].Get("traceparent"),
			"request %d names its attempt span", i+1)
		require.Equal(t, tracestate, got[i].Get("tracestate"))
	}
}

// Without any OTEL_* variable relay makes no span, and the receiver gets
// the event's own traceparent and tracestate, byte for byte, on the first
// request, on a retry (through RETRIES) and on a request replayed from the
// DLQ; an event without them is sent without them.
func TestTraceContextWithoutOTELGoesThroughRetriesAndReplays(t *testing.T) {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_TRACES_EXPORTER"} {
		t.Setenv(k, "") // relay run runs in this process: no exporter
	}
	n := testutil.StartRelayNATS(t)
	retried := newScriptedReceiver(t, http.StatusServiceUnavailable)
	refused := newScriptedReceiver(t, http.StatusBadRequest)
	mustRelay(t, "sub", "add", "retried", "--nats", n.URL, "--url", retried.URL, "--secret", testSecret,
		"--retry-base", "100ms", "--retry-max", "100ms", "--events", "order.*")
	mustRelay(t, "sub", "add", "refused", "--nats", n.URL, "--url", refused.URL, "--secret", testSecret, "--events", "order.*")
	r := startRelay(t, n.URL, "--allow-private-targets")

	publish(t, n.JS, "order.paid", "ord-1", []byte(`{"n":1}`), "traceparent", traceparent, "tracestate", tracestate)
	testutil.Eventually(t, func() bool { return len(retried.headers()) == 2 }, "not retried")
	waitDead(t, n.URL, 1)
	mustRelay(t, "dlq", "replay", "--nats", n.URL, "--lanes", "4")
	testutil.Eventually(t, func() bool { return len(refused.headers()) == 2 }, "not replayed")
	for name, got := range map[string][]http.Header{"retried": retried.headers(), "refused then replayed": refused.headers()} {
		for i, h := range got {
			require.Equal(t, traceparent, h.Get("traceparent"), "%s, request %d", name, i+1)
			require.Equal(t, tracestate, h.Get("tracestate"), "%s, request %d", name, i+1)
		}
	}

	publish(t, n.JS, "order.paid", "ord-2", []byte(`{"n":2}`))
	testutil.Eventually(t, func() bool { return len(retried.headers()) == 3 }, "not delivered")
	require.Empty(t, retried.headers()[2].Values("traceparent"))
	require.Empty(t, retried.headers()[2].Values("tracestate"))
	require.NotContains(t, r.stderr.String(), "tracing:")
}

// An OTEL_* setting relay run cannot honour stops it at its start, exit 2,
// with one line naming the variable, before it connects to NATS.
func TestRunRefusesAnOTELSettingItCannotHonour(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	code, _, stderr := relayCmd(t, "run", "--nats", "nats://127.0.0.1:1", "--metrics", "")
	require.Equal(t, exitUsage, code, stderr)
	require.Contains(t, stderr, "OTEL_EXPORTER_OTLP_PROTOCOL=grpc")
	require.Equal(t, 1, strings.Count(stderr, "\n"), stderr)
}
