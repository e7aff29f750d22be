// Package tracing owns the trace-context rule of docs/headers.md and the
// OpenTelemetry spans of `relay run`: an event's W3C traceparent and
// tracestate continue into every webhook request made for it, and, when an
// OTLP endpoint is configured through the standard OTEL_* variables, relay
// exports a span for the fan-out of each event and one for each request.
//
// # Propagation
//
// The trace headers ride on the event's copies as any other header of the
// event does (streams.CopyHeader keeps them through DELIVERIES, RETRIES,
// the overflow, the DLQ and a replay): nothing here copies a message. A
// lane reads them back with [ParentOf] and forwards them to the receiver
// with [Parent.Forward], whether or not spans are exported, so that a
// receiver's traceparent carries the event's trace id even on a relay with
// no exporter. Only a valid traceparent is forwarded (a malformed one never
// reaches a request, where it could make the receiver refuse it), and its
// tracestate only with it.
//
// # Spans
//
// [FromEnv] builds a [Tracer] when OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set (or OTEL_TRACES_EXPORTER is
// otlp), and returns nil otherwise: a nil *Tracer is tracing off, and each
// of its methods returns at once, with no span made and nothing allocated.
//
// The fan-out span is a child of the event's traceparent (a new root when
// the event has none or an invalid one), and its context replaces the
// event's trace headers on the copies, so that each attempt span is its
// child: producer, fan-out, attempt and receiver form one trace. Spans are
// exported in batches by the SDK's batch processor, whose queue drops
// spans rather than wait when it is full: tracing never holds a delivery.
// [Tracer.Shutdown] flushes what is queued and stops the exporter.
package tracing
