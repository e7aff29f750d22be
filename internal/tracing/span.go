package tracing

import (
	"context"
	"net/http"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// The names of relay's spans: low-cardinality, as span names should be;
// what tells two spans apart is in their attributes.
const (
	// SpanFanout is the span of one event's fan-out, from its arrival to
	// the answer for its last copy.
	SpanFanout = "fanout"
	// SpanAttempt is the span of one webhook request.
	SpanAttempt = "attempt"
)

// The attributes of relay's spans.
const (
	// AttrEventID is the event id (docs/headers.md), on both spans.
	AttrEventID = "relay.event.id"
	// AttrEventType is the event type, on the fan-out span.
	AttrEventType = "relay.event.type"
	// AttrCopies is, on the fan-out span, how many subscribers the event
	// was copied for (each copy queued, held or dead-lettered).
	AttrCopies = "relay.copies"
	// AttrSubscriber is the subscriber id, on the attempt span.
	AttrSubscriber = "relay.subscriber.id"
	// AttrAttempt is the attempt's number, 1 for the first, on the
	// attempt span.
	AttrAttempt = "relay.attempt"
	// AttrOutcome is the outcome class of the attempt (delivered,
	// retryable, rejected, gone, refused, local), as relay's metrics name
	// it.
	AttrOutcome = "relay.outcome"
	// AttrHTTPStatus is the HTTP status of the reply, absent when there
	// was none (OpenTelemetry's semantic-convention name).
	AttrHTTPStatus = "http.response.status_code"
)

// Span is one span relay started: an event's fan-out or one attempt. The
// zero Span is none, as a nil [*Tracer] returns: its methods then do
// nothing and cost nothing.
type Span struct {
	span trace.Span
}

// Fanout starts the span of the fan-out of one event whose headers are h:
// a child of the event's traceparent, or a new root when it has none.
func (t *Tracer) Fanout(ctx context.Context, h nats.Header, eventID, eventType string) Span {
	if t == nil {
		return Span{}
	}
	return t.start(ctx, SpanFanout, trace.SpanKindConsumer, ParentOf(h),
		attribute.String(AttrEventID, eventID), attribute.String(AttrEventType, eventType))
}

// Attempt starts the span of one request for a delivery whose headers are
// h: a child of the trace context the delivery carries (the fan-out span's
// when the fan-out traced it, else the event's own), or a new root.
// attempt is its number, 1 for the first.
func (t *Tracer) Attempt(ctx context.Context, h nats.Header, eventID, subscriber string, attempt int) Span {
	if t == nil {
		return Span{}
	}
	return t.start(ctx, SpanAttempt, trace.SpanKindClient, ParentOf(h),
		attribute.String(AttrEventID, eventID), attribute.String(AttrSubscriber, subscriber), attribute.Int(AttrAttempt, attempt))
}

func (t *Tracer) start(ctx context.Context, name string, kind trace.SpanKind, parent Parent, attrs ...attribute.KeyValue) Span {
	opts := []trace.SpanStartOption{trace.WithSpanKind(kind), trace.WithAttributes(attrs...)}
	if sc := parent.SpanContext(); sc.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
	} else {
		opts = append(opts, trace.WithNewRoot())
	}
	_, span := t.tracer.Start(ctx, name, opts...)
	return Span{span: span}
}

// SetOn writes the span's trace context on a copy's headers, in place of
// the event's, so that the work done for the copy is the span's child.
func (s Span) SetOn(h nats.Header) {
	if s.span == nil {
		return
	}
	parentOfSpan(s.span.SpanContext()).SetOn(h)
}

// Inject writes the span's trace context into a request's header, in place
// of what [Parent.Forward] wrote, and returns the header (a new one when h
// is nil). Without a span it returns h as it is.
func (s Span) Inject(h http.Header) http.Header {
	if s.span == nil {
		return h
	}
	return parentOfSpan(s.span.SpanContext()).Forward(h)
}

// EndFanout ends a fan-out span: copies is how many subscribers the event
// was copied for, err why it was handed back to be fanned out again (nil
// when every copy is stored).
func (s Span) EndFanout(copies int, err error) {
	if s.span == nil {
		return
	}
	if s.span.IsRecording() {
		s.span.SetAttributes(attribute.Int(AttrCopies, copies))
		if err != nil {
			s.span.SetStatus(codes.Error, err.Error())
		}
	}
	s.span.End()
}

// EndAttempt ends an attempt span with the request's outcome: the HTTP
// status (0: no reply), the outcome class, and the error of an attempt
// that did not deliver.
func (s Span) EndAttempt(status int, outcome string, err error) {
	if s.span == nil {
		return
	}
	if s.span.IsRecording() {
		s.span.SetAttributes(attribute.String(AttrOutcome, outcome))
		if status != 0 {
			s.span.SetAttributes(attribute.Int(AttrHTTPStatus, status))
		}
		if err != nil {
			s.span.SetStatus(codes.Error, err.Error())
		}
	}
	s.span.End()
}
