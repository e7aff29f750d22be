package testutil

import (
	"compress/gzip"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// OTLPSink is an OTLP/HTTP traces endpoint for tests: it decodes each
// protobuf ExportTraceServiceRequest posted to /v1/traces and keeps its
// spans, as a collector would receive them.
type OTLPSink struct {
	*httptest.Server

	mu      sync.Mutex
	spans   []ExportedSpan
	headers []http.Header
}

// ExportedSpan is one span an [OTLPSink] received, its ids in hex as a
// traceparent writes them.
type ExportedSpan struct {
	Name string
	// TraceID, SpanID and ParentSpanID are lower-case hex; ParentSpanID is
	// "" for a root span.
	TraceID, SpanID, ParentSpanID string
	// Attributes holds the span's string, int and bool attributes, each
	// written as a string.
	Attributes map[string]string
	// Service is its resource's service.name.
	Service string
	// Error is the description of an error status, "" when the status is
	// not an error.
	Error string
}

// StartOTLPSink starts an OTLP/HTTP endpoint, closed when the test ends.
// Its URL is an OTEL_EXPORTER_OTLP_ENDPOINT.
func StartOTLPSink(t testing.TB) *OTLPSink {
	t.Helper()
	s := &OTLPSink{}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

// Spans returns the spans received so far, in the order they came.
func (s *OTLPSink) Spans() []ExportedSpan {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]ExportedSpan(nil), s.spans...)
}

// Headers returns the headers of the export requests received so far.
func (s *OTLPSink) Headers() []http.Header {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]http.Header(nil), s.headers...)
}

func (s *OTLPSink) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "want a protobuf POST to /v1/traces", http.StatusBadRequest)
		return
	}
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		gz, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = gz
	}
	raw, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var req coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(raw, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var got []ExportedSpan
	for _, rs := range req.GetResourceSpans() {
		service := attributes(rs.GetResource().GetAttributes())["service.name"]
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				e := ExportedSpan{
					Name:       sp.GetName(),
					TraceID:    hex.EncodeToString(sp.GetTraceId()),
					SpanID:     hex.EncodeToString(sp.GetSpanId()),
					Attributes: attributes(sp.GetAttributes()),
					Service:    service,
				}
				if len(sp.GetParentSpanId()) > 0 {
					e.ParentSpanID = hex.EncodeToString(sp.GetParentSpanId())
				}
				if sp.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR {
					e.Error = sp.GetStatus().GetMessage()
				}
				got = append(got, e)
			}
		}
	}
	s.mu.Lock()
	s.spans = append(s.spans, got...)
	s.headers = append(s.headers, r.Header.Clone())
	s.mu.Unlock()
	out, err := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// attributes writes string, int and bool attributes as strings.
func attributes(kvs []*commonpb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		switch v := kv.GetValue().GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.GetKey()] = v.StringValue
		case *commonpb.AnyValue_IntValue:
			m[kv.GetKey()] = strconv.FormatInt(v.IntValue, 10)
		case *commonpb.AnyValue_BoolValue:
			m[kv.GetKey()] = strconv.FormatBool(v.BoolValue)
		}
	}
	return m
}
