package tracing

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/testutil"
)

// otelEnv lists the variables these tests set, each cleared first so that
// the machine's own environment plays no part.
var otelEnv = []string{
	"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
	"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_HEADERS",
	"OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
	"OTEL_EXPORTER_OTLP_CERTIFICATE", "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
	"OTEL_EXPORTER_OTLP_CLIENT_KEY", "OTEL_EXPORTER_OTLP_COMPRESSION", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG",
	"OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_BSP_SCHEDULE_DELAY",
}

// setEnv clears the OTEL_* variables, then sets kv (name, value, …) for
// the test. The tests that call it cannot run in parallel.
func setEnv(t *testing.T, kv ...string) {
	t.Helper()
	for _, k := range otelEnv {
		t.Setenv(k, "")
	}
	for i := 0; i+1 < len(kv); i += 2 {
		t.Setenv(kv[i], kv[i+1])
	}
}

// Without an endpoint, and whenever the environment turns tracing off,
// there is no tracer: a nil one, whose spans are the zero Span and cost
// nothing, not even an allocation.
func TestFromEnvIsOffUnlessAnExporterIsAsked(t *testing.T) {
	for name, kv := range map[string][]string{
		"nothing set":      nil,
		"only a sampler":   {"OTEL_TRACES_SAMPLER", "always_on"},
		"SDK disabled":     {"OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1", "OTEL_SDK_DISABLED", "true"},
		"exporter is none": {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:1/v1/traces", "OTEL_TRACES_EXPORTER", "none"},
	} {
		setEnv(t, kv...)
		tr, err := FromEnv(context.Background(), nil, "test")
		require.NoError(t, err, name)
		require.Nil(t, tr, name)
	}
	var off *Tracer
	event := copyHeader("traceparent", eventTraceparent)
	require.Zero(t, testing.AllocsPerRun(1000, func() {
		s := off.Fanout(context.Background(), event, "ord-1", "order.paid")
		s.SetOn(event)
		s.EndFanout(1, nil)
		a := off.Attempt(context.Background(), event, "ord-1", "api", 1)
		if a.Inject(nil) != nil {
			t.Fatal("a header from no span")
		}
		a.EndAttempt(200, "delivered", nil)
	}))
	require.Equal(t, eventTraceparent, event.Get("traceparent"), "a copy's trace headers left alone")
	require.NoError(t, off.Shutdown(context.Background()))
}

// A setting relay cannot honour stops relay run at its start, naming the
// variable, rather than leaving the operator without the traces asked for.
func TestFromEnvRefusesWhatItCannotHonour(t *testing.T) {
	const endpoint = "OTEL_EXPORTER_OTLP_ENDPOINT"
	for name, kv := range map[string][]string{
		"another exporter":    {"OTEL_TRACES_EXPORTER", "zipkin"},
		"gRPC":                {endpoint, "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"},
		"gRPC for traces":     {endpoint, "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc"},
		"no scheme":           {endpoint, "127.0.0.1:4318"},
		"unknown sampler":     {endpoint, "http://127.0.0.1:4318", "OTEL_TRACES_SAMPLER", "xray"},
		"timeout not ms":      {endpoint, "http://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_TIMEOUT", "10s"},
		"missing certificate": {endpoint, "https://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_CERTIFICATE", filepath.Join(t.TempDir(), "none.pem")},
		"key without a cert":  {endpoint, "https://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_CLIENT_KEY", filepath.Join(t.TempDir(), "key.pem")},
	} {
		setEnv(t, kv...)
		tr, err := FromEnv(context.Background(), nil, "test")
		require.True(t, errors.Is(err, ErrConfig), "%s: %v", name, err)
		require.Nil(t, tr, name)
		require.Contains(t, err.Error(), "OTEL", name)
	}
}

// With an endpoint, the spans of an event's trace reach it over OTLP/HTTP
// when the tracer shuts down (the batch delay is a minute: only the
// flush at Shutdown can have sent them). The fan-out span is the child of
// the event's traceparent; its context goes on the copy; the attempt span
// is the child of the copy's; the request carries the attempt's. An event
// without a traceparent starts a trace of its own. The exporter sends the
// OTEL_EXPORTER_OTLP_HEADERS, and the service is "relay".
func TestFromEnvExportsTheSpansOfAnEventsTrace(t *testing.T) {
	sink := testutil.StartOTLPSink(t)
	setEnv(t, "OTEL_EXPORTER_OTLP_ENDPOINT", sink.URL, "OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=acme",
		"OTEL_BSP_SCHEDULE_DELAY", "60000")
	tr, err := FromEnv(context.Background(), nil, "v9")
	require.NoError(t, err)
	require.NotNil(t, tr)
	ctx := context.Background()

	// An event with a trace, fanned out and sent once.
	event := copyHeader("traceparent", eventTraceparent, "tracestate", eventTracestate)
	fan := tr.Fanout(ctx, event, "ord-1", "order.paid")
	copied := copyHeader("traceparent", eventTraceparent, "tracestate", eventTracestate)
	fan.SetOn(copied)
	fan.EndFanout(2, nil)
	attempt := tr.Attempt(ctx, copied, "ord-1", "api", 1)
	sent := attempt.Inject(ParentOf(copied).Forward(nil))
	attempt.EndAttempt(503, "retryable", errors.New("status: 503 Service Unavailable"))

	// An event without one.
	bare := copyHeader()
	rootFan := tr.Fanout(ctx, bare, "ord-2", "order.paid")
	rootCopy := copyHeader()
	rootFan.SetOn(rootCopy)
	rootFan.EndFanout(1, nil)
	rootAttempt := tr.Attempt(ctx, rootCopy, "ord-2", "api", 1)
	rootSent := rootAttempt.Inject(nil)
	rootAttempt.EndAttempt(200, "delivered", nil)

	require.Empty(t, sink.Spans(), "exported before the flush")
	require.NoError(t, tr.Shutdown(ctx))
	spans := sink.Spans()
	require.Len(t, spans, 4)
	byName := map[string][]testutil.ExportedSpan{}
	for _, s := range spans {
		require.Equal(t, ServiceName, s.Service)
		byName[s.Name] = append(byName[s.Name], s)
	}
	require.Len(t, byName[SpanFanout], 2)
	require.Len(t, byName[SpanAttempt], 2)
	find := func(name, event string) testutil.ExportedSpan {
		for _, s := range byName[name] {
			if s.Attributes[AttrEventID] == event {
				return s
			}
		}
		t.Fatalf("no %s span of %s in %+v", name, event, spans)
		return testutil.ExportedSpan{}
	}

	f := find(SpanFanout, "ord-1")
	require.Equal(t, eventTraceID, f.TraceID)
	require.Equal(t, eventSpanID, f.ParentSpanID, "the fan-out is the child of the event's span")
	require.Equal(t, "order.paid", f.Attributes[AttrEventType])
	require.Equal(t, "2", f.Attributes[AttrCopies])
	require.Equal(t, "00-"+eventTraceID+"-"+f.SpanID+"-01", copied.Get("traceparent"), "the copy carries the fan-out's context")
	require.Equal(t, eventTracestate, copied.Get("tracestate"))

	a := find(SpanAttempt, "ord-1")
	require.Equal(t, eventTraceID, a.TraceID)
	require.Equal(t, f.SpanID, a.ParentSpanID, "the attempt is the child of the fan-out")
	require.Equal(t, "api", a.Attributes[AttrSubscriber])
	require.Equal(t, "1", a.Attributes[AttrAttempt])
	require.Equal(t, "503", a.Attributes[AttrHTTPStatus])
	require.Equal(t, "retryable", a.Attributes[AttrOutcome])
	require.Contains(t, a.Error, "503")
	require.Equal(t, []string{"00-" + eventTraceID + "-" + a.SpanID + "-01"}, sent.Values("traceparent"),
		"the receiver's parent is the attempt span")
	require.Equal(t, []string{eventTracestate}, sent.Values("tracestate"))

	rf, ra := find(SpanFanout, "ord-2"), find(SpanAttempt, "ord-2")
	require.Empty(t, rf.ParentSpanID, "no traceparent: a new root")
	require.NotEqual(t, eventTraceID, rf.TraceID)
	require.Equal(t, rf.TraceID, ra.TraceID)
	require.Equal(t, rf.SpanID, ra.ParentSpanID)
	require.Equal(t, "200", ra.Attributes[AttrHTTPStatus])
	require.Empty(t, ra.Error)
	require.Equal(t, "00-"+rf.TraceID+"-"+ra.SpanID+"-01", rootSent.Get("Traceparent"))

	for _, h := range sink.Headers() {
		require.Equal(t, "acme", h.Get("X-Tenant"))
	}
}

// OTEL_SERVICE_NAME names the service in place of "relay".
func TestFromEnvTakesTheServiceName(t *testing.T) {
	sink := testutil.StartOTLPSink(t)
	setEnv(t, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", sink.URL+"/v1/traces", "OTEL_SERVICE_NAME", "billing-relay")
	tr, err := FromEnv(context.Background(), nil, "test")
	require.NoError(t, err)
	tr.Fanout(context.Background(), nats.Header{}, "e", "t").EndFanout(0, nil)
	require.NoError(t, tr.Shutdown(context.Background()))
	spans := sink.Spans()
	require.Len(t, spans, 1)
	require.Equal(t, "billing-relay", spans[0].Service)
}

// OTEL_TRACES_SAMPLER is the SDK's to honour: with always_off nothing is
// exported, and the receiver still gets the event's trace id (propagation
// never depends on sampling), unsampled.
func TestFromEnvSamplerOffStillPropagates(t *testing.T) {
	sink := testutil.StartOTLPSink(t)
	setEnv(t, "OTEL_EXPORTER_OTLP_ENDPOINT", sink.URL, "OTEL_TRACES_SAMPLER", "always_off")
	tr, err := FromEnv(context.Background(), nil, "test")
	require.NoError(t, err)
	copied := copyHeader("traceparent", eventTraceparent)
	attempt := tr.Attempt(context.Background(), copied, "ord-1", "api", 1)
	sent := attempt.Inject(http.Header{})
	attempt.EndAttempt(200, "delivered", nil)
	require.NoError(t, tr.Shutdown(context.Background()))
	require.Empty(t, sink.Spans())
	p := ParentOf(nats.Header{"traceparent": sent.Values("traceparent")})
	require.True(t, p.Valid(), sent)
	require.Equal(t, eventTraceID, p.SpanContext().TraceID().String())
	require.False(t, p.SpanContext().IsSampled())
}

// OTEL_TRACES_EXPORTER=otlp alone asks for the export, to the default
// endpoint.
func TestFromEnvExporterOTLPAloneTurnsTheExportOn(t *testing.T) {
	setEnv(t, "OTEL_TRACES_EXPORTER", "otlp")
	tr, err := FromEnv(context.Background(), nil, "test")
	require.NoError(t, err)
	require.NotNil(t, tr)
	require.NoError(t, tr.Shutdown(context.Background()))
}

// A collector that is down holds nothing up: spans end at once, the
// export's failure is logged as a warning, and Shutdown returns by its
// deadline.
func TestCollectorDownHoldsNothing(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now
	setEnv(t, "OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+addr, "OTEL_BSP_SCHEDULE_DELAY", "10")
	var logs testutil.Buffer
	tr, err := FromEnv(context.Background(), slog.New(slog.NewTextHandler(&logs, nil)), "test")
	require.NoError(t, err)
	start := time.Now()
	for i := range 1000 {
		tr.Attempt(context.Background(), copyHeader("traceparent", eventTraceparent), "ord", "api", i+1).EndAttempt(200, "delivered", nil)
	}
	require.Less(t, time.Since(start), 5*time.Second, "spans waited for the collector")
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = tr.Shutdown(ctx)
	require.Less(t, time.Since(start), 10*time.Second, "Shutdown outlived its deadline")
	require.Contains(t, logs.String(), "tracing: exporting spans")
}
