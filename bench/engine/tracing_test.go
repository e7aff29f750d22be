package main

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/relay-dev/relay/internal/tracing"
)

// The OTLP endpoint decodes what an exporter posts, gzipped or not, counts
// its spans by relay's span names and answers 200 with an empty
// ExportTraceServiceResponse; whatever else comes is refused and counted
// as such, so that an exporter gone astray shows in the table.
func TestOTLPEndpointCountsExports(t *testing.T) {
	t.Parallel()
	ep, err := startOTLPEndpoint()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := ep.close(); err != nil {
			t.Error(err)
		}
	}()
	export := func(names ...string) []byte {
		var spans []*tracepb.Span
		for _, n := range names {
			spans = append(spans, &tracepb.Span{Name: n, TraceId: bytes.Repeat([]byte{1}, 16), SpanId: bytes.Repeat([]byte{2}, 8)})
		}
		b, err := proto.Marshal(&coltracepb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{
			{ScopeSpans: []*tracepb.ScopeSpans{{Spans: spans[:1]}, {Spans: spans[1:]}}},
		}})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	client := &http.Client{Timeout: 10 * time.Second}
	post := func(method, path, contentType, encoding string, body []byte) *http.Response {
		t.Helper()
		req, err := http.NewRequest(method, ep.url+path, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", contentType)
		if encoding != "" {
			req.Header.Set("Content-Encoding", encoding)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}

	plain := export(tracing.SpanFanout, tracing.SpanAttempt, "other")
	resp := post(http.MethodPost, otlpTracesPath, otlpProtobuf, "", plain)
	reply, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != otlpProtobuf {
		t.Fatalf("a plain export: %s, %q; want 200 with %s", resp.Status, resp.Header.Get("Content-Type"), otlpProtobuf)
	}
	if err := proto.Unmarshal(reply, &coltracepb.ExportTraceServiceResponse{}); err != nil {
		t.Errorf("the reply is no ExportTraceServiceResponse: %v", err)
	}

	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	if _, err := zw.Write(export(tracing.SpanAttempt, tracing.SpanAttempt)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	resp = post(http.MethodPost, otlpTracesPath, otlpProtobuf, "gzip", gz.Bytes())
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("a gzipped export: %s, want 200", resp.Status)
	}

	for _, bad := range []struct {
		method, path, contentType, encoding string
		body                                []byte
		want                                int
	}{
		{http.MethodPost, "/v1/metrics", otlpProtobuf, "", plain, http.StatusNotFound},
		{http.MethodGet, otlpTracesPath, otlpProtobuf, "", nil, http.StatusMethodNotAllowed},
		{http.MethodPost, otlpTracesPath, "application/json", "", []byte("{}"), http.StatusUnsupportedMediaType},
		{http.MethodPost, otlpTracesPath, otlpProtobuf, "gzip", plain, http.StatusBadRequest}, // not gzip
		{http.MethodPost, otlpTracesPath, otlpProtobuf, "", []byte{0xff, 0xff, 0xff}, http.StatusBadRequest},
	} {
		resp := post(bad.method, bad.path, bad.contentType, bad.encoding, bad.body)
		resp.Body.Close()
		if resp.StatusCode != bad.want {
			t.Errorf("%s %s (%s, %q): %s, want %d", bad.method, bad.path, bad.contentType, bad.encoding, resp.Status, bad.want)
		}
	}

	got := ep.received()
	want := otlpCounts{requests: 2, bytes: int64(len(plain) + gz.Len()), spans: 5, fanout: 1, attempt: 3, refused: 5}
	if got != want {
		t.Errorf("received %+v, want %+v", got, want)
	}
	if d := got.minus(otlpCounts{requests: 1, spans: 3, fanout: 1, attempt: 1, bytes: int64(len(plain))}); d.spans != 2 || d.attempt != 2 || d.fanout != 0 || d.bytes != int64(gz.Len()) {
		t.Errorf("minus: %+v, want the gzipped export alone", d)
	}
}

// Every other event carries a traceparent, each valid W3C (relay forwards
// it as it is) and sampled, each a new one; the header comes new for each
// event, since the publish adds the Nats-Msg-Id to it.
func TestTraceparents(t *testing.T) {
	t.Parallel()
	const n = 101
	tps, err := traceparents(n)
	if err != nil {
		t.Fatal(err)
	}
	header := traceparentHeader(tps)
	seen := map[string]bool{}
	for i, tp := range tps {
		h := header(i)
		if i%2 == 1 {
			if tp != "" || h != nil {
				t.Errorf("event %d: traceparent %q, header %v; want none", i, tp, h)
			}
			continue
		}
		p := tracing.ParentOf(h)
		if !p.Valid() || p.Traceparent() != tp || tp[53:] != "01" {
			t.Errorf("event %d: traceparent %q is not a valid sampled one", i, tp)
		}
		if seen[tp[3:35]] {
			t.Errorf("event %d: trace id of %q twice", i, tp)
		}
		seen[tp[3:35]] = true
		h.Set(nats.MsgIdHdr, "x")
		if header(i).Get(nats.MsgIdHdr) != "" {
			t.Errorf("event %d: the header is shared between calls", i)
		}
	}
	if len(seen) != (n+1)/2 {
		t.Errorf("%d traceparents, want %d", len(seen), (n+1)/2)
	}
}

// Over the pairs: the median of the on/off ratios and the worst, the
// lowest.
func TestOnOffSummary(t *testing.T) {
	t.Parallel()
	pair := func(off, on int) tracingRun {
		return tracingRun{off: burstRun{delivered: off, total: time.Second}, on: burstRun{delivered: on, total: time.Second}}
	}
	med, worst := medianWorst([]tracingRun{pair(1000, 900), pair(1000, 700), pair(1000, 1100), pair(1000, 950)}, tracingRun.ratio)
	if med < 0.924 || med > 0.926 || worst < 0.699 || worst > 0.701 {
		t.Errorf("median %.3f, worst %.3f; want 0.925 and 0.700", med, worst)
	}
	if r := pair(0, 100).ratio(); r != 0 {
		t.Errorf("on/off over an off run that delivered nothing: %v, want 0", r)
	}
}
