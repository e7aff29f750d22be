package tracing

import (
	"encoding/hex"
	"net/http"
	"slices"
	"strings"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"
)

// The W3C Trace Context headers, as the specification writes them. NATS
// header names are case-sensitive: relay reads them whatever their case,
// and writes them in this one.
const (
	HeaderTraceparent = "traceparent"
	HeaderTracestate  = "tracestate"
)

// The same names as net/http canonicalizes them, for a request's header.
const (
	httpTraceparent = "Traceparent"
	httpTracestate  = "Tracestate"
)

// MaxTracestate is the longest tracestate relay forwards, in bytes: the
// 512 characters the specification asks every vendor to propagate. A
// longer one is dropped whole (its traceparent still goes).
const MaxTracestate = 512

// traceparentLen is the length of a version-00 traceparent:
// 00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>.
const traceparentLen = 55

// Parent is the W3C trace context a message carries: the parent of the
// work relay does for it. The zero Parent is none.
type Parent struct {
	// traceparent is the value to forward, always version 00: the
	// message's own when it was one, so that forwarding it copies no byte.
	traceparent string
	// tracestate is the message's tracestate, forwarded with it; "" when
	// it had none or one relay does not forward.
	tracestate string
}

// ParentOf reads the trace context of a message's headers, whatever the
// case of their names. A traceparent that is not valid W3C (a wrong length,
// upper-case or non-hex digits, an all-zero id, version ff) is no parent,
// and neither is a traceparent given twice; a tracestate is kept only with
// a valid traceparent, when it has printable ASCII alone and at most
// [MaxTracestate] bytes (several are joined with commas, as the
// specification says).
//
// It allocates nothing unless the traceparent has a version other than 00
// or the tracestate comes in several values: a message without trace
// headers costs one pass over its few headers.
func ParentOf(h nats.Header) Parent {
	var tp, ts []string
	seen := 0
	for k, v := range h {
		switch len(k) {
		case len(HeaderTraceparent):
			if strings.EqualFold(k, HeaderTraceparent) {
				tp = v
				seen++
			}
		case len(HeaderTracestate):
			if strings.EqualFold(k, HeaderTracestate) {
				if ts == nil {
					ts = v
				} else {
					ts = append(slices.Clip(ts), v...) // a second spelling: rare
				}
			}
		}
	}
	if seen != 1 || len(tp) != 1 {
		return Parent{}
	}
	p := Parent{traceparent: normalTraceparent(tp[0])}
	if p.traceparent == "" {
		return Parent{}
	}
	state := ""
	switch len(ts) {
	case 0:
	case 1:
		state = ts[0]
	default:
		state = strings.Join(ts, ",")
	}
	if forwardable(state) {
		p.tracestate = state
	}
	return p
}

// Valid reports whether p is a trace context.
func (p Parent) Valid() bool { return p.traceparent != "" }

// Traceparent is the version-00 traceparent p forwards; "" when p is none.
func (p Parent) Traceparent() string { return p.traceparent }

// Tracestate is the tracestate p forwards; "" when none.
func (p Parent) Tracestate() string { return p.tracestate }

// Forward writes p into a request's header as traceparent and tracestate,
// replacing any, and returns the header: h, or a new one when h is nil and
// p is valid. With no valid p it returns h unchanged.
func (p Parent) Forward(h http.Header) http.Header {
	if p.traceparent == "" {
		return h
	}
	if h == nil {
		h = make(http.Header, 2)
	}
	h[httpTraceparent] = []string{p.traceparent}
	if p.tracestate != "" {
		h[httpTracestate] = []string{p.tracestate}
	} else {
		delete(h, httpTracestate)
	}
	return h
}

// SpanContext is p as the remote parent of a span; the zero SpanContext
// when p is none. A tracestate the SDK cannot parse is dropped.
func (p Parent) SpanContext() trace.SpanContext {
	if p.traceparent == "" {
		return trace.SpanContext{}
	}
	var cfg trace.SpanContextConfig
	// Checked by normalTraceparent: the decodes cannot fail.
	cfg.TraceID, _ = trace.TraceIDFromHex(p.traceparent[3:35])
	cfg.SpanID, _ = trace.SpanIDFromHex(p.traceparent[36:52])
	flags, _ := hexByte(p.traceparent[53:55])
	cfg.TraceFlags = trace.TraceFlags(flags)
	cfg.TraceState, _ = trace.ParseTraceState(p.tracestate)
	cfg.Remote = true
	return trace.NewSpanContext(cfg)
}

// parentOfSpan is the trace context of a span relay started, to be carried
// on: its ids and flags, and the tracestate it inherited.
func parentOfSpan(sc trace.SpanContext) Parent {
	if !sc.IsValid() {
		return Parent{}
	}
	var b [traceparentLen]byte
	copy(b[:], "00-")
	tid, sid := sc.TraceID(), sc.SpanID()
	hex.Encode(b[3:35], tid[:])
	b[35] = '-'
	hex.Encode(b[36:52], sid[:])
	b[52] = '-'
	hex.Encode(b[53:55], []byte{byte(sc.TraceFlags())})
	p := Parent{traceparent: string(b[:])}
	if state := sc.TraceState().String(); forwardable(state) {
		p.tracestate = state
	}
	return p
}

// SetOn writes p on a copy's headers as traceparent and tracestate, in the
// specification's case, after removing those headers in any case; with no
// valid p it leaves h as it is.
func (p Parent) SetOn(h nats.Header) {
	if p.traceparent == "" || h == nil {
		return
	}
	for k := range h {
		if strings.EqualFold(k, HeaderTraceparent) || strings.EqualFold(k, HeaderTracestate) {
			delete(h, k)
		}
	}
	h[HeaderTraceparent] = []string{p.traceparent}
	if p.tracestate != "" {
		h[HeaderTracestate] = []string{p.tracestate}
	}
}

// normalTraceparent returns v as a version-00 traceparent, or "" when v is
// not a valid one. A version-00 value is returned as it is; a later
// version (the specification lets it add fields after the flags) is cut to
// its first four fields and sent as version 00, which is all relay speaks.
func normalTraceparent(v string) string {
	if len(v) < traceparentLen || v[2] != '-' || v[35] != '-' || v[52] != '-' {
		return ""
	}
	version, ok := hexByte(v[0:2])
	if !ok || version == 0xff {
		return ""
	}
	if !lowerHex(v[3:35]) || !lowerHex(v[36:52]) || allZero(v[3:35]) || allZero(v[36:52]) {
		return ""
	}
	flags, ok := hexByte(v[53:55])
	if !ok {
		return ""
	}
	if version == 0 {
		if len(v) != traceparentLen || flags > 3 {
			return ""
		}
		return v
	}
	if len(v) > traceparentLen && v[traceparentLen] != '-' {
		return ""
	}
	// Only the flags version 00 knows (sampled, random) go on.
	const hexdigits = "0123456789abcdef"
	flags &= 3
	return "00" + v[2:53] + string([]byte{hexdigits[flags>>4], hexdigits[flags&0xf]})
}

// hexByte decodes two lower-case hex digits.
func hexByte(s string) (byte, bool) {
	hi, ok1 := hexDigit(s[0])
	lo, ok2 := hexDigit(s[1])
	return hi<<4 | lo, ok1 && ok2
}

func hexDigit(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// lowerHex reports whether s is lower-case hex digits alone.
func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if _, ok := hexDigit(s[i]); !ok {
			return false
		}
	}
	return true
}

func allZero(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] != '0' {
			return false
		}
	}
	return true
}

// forwardable reports whether a tracestate can be sent as it is: not
// empty, at most MaxTracestate bytes, printable ASCII alone (so that no
// request is refused for its header).
func forwardable(state string) bool {
	if state == "" || len(state) > MaxTracestate {
		return false
	}
	for i := 0; i < len(state); i++ {
		if c := state[i]; c < ' ' || c > '~' {
			return false
		}
	}
	return true
}
