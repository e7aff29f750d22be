package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"sync"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/relay-dev/relay/internal/tracing"
)

// otlpTracesPath is where an OTLP/HTTP exporter posts its spans: the
// endpoint of OTEL_EXPORTER_OTLP_ENDPOINT with this path added.
const otlpTracesPath = "/v1/traces"

// otlpProtobuf is the content type of an OTLP/HTTP protobuf export, the
// only encoding the endpoint decodes (relay exports nothing else).
const otlpProtobuf = "application/x-protobuf"

// The largest export the endpoint takes, as sent and once gunzipped: far
// above the SDK's batches of 512 spans, low enough that a stray client
// cannot make the program hold gigabytes.
const (
	otlpMaxBody    = 64 << 20
	otlpMaxDecoded = 256 << 20
)

// otlpCounts is what an otlpEndpoint received: what the tracing scenario
// reports of each run, so that the spans a relay exported are seen where a
// collector would see them.
type otlpCounts struct {
	requests int64 // exports decoded and answered 200
	bytes    int64 // their bodies as sent (compressed when they were)
	spans    int64 // the spans in them
	fanout   int64 // those named tracing.SpanFanout
	attempt  int64 // those named tracing.SpanAttempt
	refused  int64 // requests answered otherwise: another path or method, a body that did not decode
}

// minus is what was received between b and a, b read first: the counts of
// one run on an endpoint that lives for the whole scenario.
func (a otlpCounts) minus(b otlpCounts) otlpCounts {
	return otlpCounts{
		requests: a.requests - b.requests, bytes: a.bytes - b.bytes, spans: a.spans - b.spans,
		fanout: a.fanout - b.fanout, attempt: a.attempt - b.attempt, refused: a.refused - b.refused,
	}
}

// otlpEndpoint is an OTLP/HTTP traces endpoint on a loopback port of this
// program: the collector the tracing scenario's relays export to. It
// decodes every export, as a collector must, so that relay's exporter does
// the whole of its work, and counts what it received; it keeps no span.
// It is not internal/testutil's sink because that one needs a testing.TB
// and keeps every span, which a run of many thousands would only grow.
type otlpEndpoint struct {
	url    string // for OTEL_EXPORTER_OTLP_ENDPOINT: http://127.0.0.1:PORT
	srv    *http.Server
	served chan error // Serve's return, once it has stopped
	reply  []byte     // an empty ExportTraceServiceResponse, encoded once

	mu     sync.Mutex
	counts otlpCounts
}

// startOTLPEndpoint listens on a random loopback port and serves until
// close, which the caller owes.
func startOTLPEndpoint() (*otlpEndpoint, error) {
	reply, err := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	if err != nil {
		return nil, fmt.Errorf("OTLP endpoint: encoding its reply: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("OTLP endpoint: %w", err)
	}
	o := &otlpEndpoint{url: "http://" + ln.Addr().String(), served: make(chan error, 1), reply: reply}
	o.srv = &http.Server{Handler: o, ReadHeaderTimeout: 10 * time.Second}
	go func() { o.served <- o.srv.Serve(ln) }() // ends when close shuts the server down
	return o, nil
}

// close stops the endpoint: it waits up to 5 s for the exports being
// answered, then drops what is left, and returns once Serve has returned.
func (o *otlpEndpoint) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	shutErr := o.srv.Shutdown(ctx)
	if shutErr != nil {
		shutErr = errors.Join(shutErr, o.srv.Close())
	}
	if err := <-o.served; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("OTLP endpoint: %w", errors.Join(err, shutErr))
	}
	if shutErr != nil {
		return fmt.Errorf("OTLP endpoint: stopping: %w", shutErr)
	}
	return nil
}

// received is what the endpoint has received so far.
func (o *otlpEndpoint) received() otlpCounts {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.counts
}

// ServeHTTP takes a POST of a protobuf ExportTraceServiceRequest on
// /v1/traces, gunzipped when its Content-Encoding is gzip, counts it and
// answers 200 with an empty ExportTraceServiceResponse, as a collector that
// took every span does. Any other path is 404, another method 405, a body
// that does not decode 400 (415 for another content type); each of those
// is counted as refused, so that an exporter that went astray shows.
func (o *otlpEndpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	status, err := o.take(w, r)
	if err != nil {
		o.mu.Lock()
		o.counts.refused++
		o.mu.Unlock()
		if status == http.StatusMethodNotAllowed {
			w.Header().Set("Allow", http.MethodPost)
		}
		http.Error(w, err.Error(), status)
		return
	}
	w.Header().Set("Content-Type", otlpProtobuf)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(o.reply) // an exporter that hung up has nothing to be told
}

// take decodes and counts one export; on an error it returns the status to
// answer with.
func (o *otlpEndpoint) take(w http.ResponseWriter, r *http.Request) (int, error) {
	if r.URL.Path != otlpTracesPath {
		return http.StatusNotFound, fmt.Errorf("no such path %q: exports go to %s", r.URL.Path, otlpTracesPath)
	}
	if r.Method != http.MethodPost {
		return http.StatusMethodNotAllowed, fmt.Errorf("method %s: exports are POSTed", r.Method)
	}
	if ct, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || ct != otlpProtobuf {
		return http.StatusUnsupportedMediaType, fmt.Errorf("content type %q: only %s is decoded", r.Header.Get("Content-Type"), otlpProtobuf)
	}
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, otlpMaxBody))
	if err != nil {
		return http.StatusBadRequest, fmt.Errorf("reading the export: %w", err)
	}
	got, err := decodeExport(raw, r.Header.Get("Content-Encoding"))
	if err != nil {
		return http.StatusBadRequest, err
	}
	o.mu.Lock()
	o.counts.requests++
	o.counts.bytes += int64(len(raw))
	o.counts.spans += got.spans
	o.counts.fanout += got.fanout
	o.counts.attempt += got.attempt
	o.mu.Unlock()
	return http.StatusOK, nil
}

// decodeExport decodes one export's body as sent, with its
// Content-Encoding (gzip, or none), and counts its spans, those of each of
// relay's span names apart. Only the span fields of the result are set.
func decodeExport(raw []byte, encoding string) (otlpCounts, error) {
	var out otlpCounts
	body := raw
	switch encoding {
	case "", "identity":
	case "gzip":
		gz, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			return out, fmt.Errorf("gunzipping the export: %w", err)
		}
		body, err = io.ReadAll(io.LimitReader(gz, otlpMaxDecoded+1))
		if err != nil {
			return out, fmt.Errorf("gunzipping the export: %w", err)
		}
		if len(body) > otlpMaxDecoded {
			return out, fmt.Errorf("the export is over %d bytes once gunzipped", otlpMaxDecoded)
		}
	default:
		return out, fmt.Errorf("content encoding %q: only gzip is decoded", encoding)
	}
	var req coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &req); err != nil {
		return out, fmt.Errorf("decoding the export: %w", err)
	}
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				out.spans++
				switch sp.GetName() {
				case tracing.SpanFanout:
					out.fanout++
				case tracing.SpanAttempt:
					out.attempt++
				}
			}
		}
	}
	return out, nil
}
