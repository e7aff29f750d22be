// Package logs is the slog handler `relay run` writes through. It wraps a
// text or JSON handler with two rules that no call site has to remember:
//
//   - Nothing secret leaves: a signing secret (whsec_…), the userinfo of a
//     URL (https://user:password@host) and a URL's query string, where
//     tokens tend to hide, are masked in every message and attribute,
//     errors included, whatever code logged them.
//   - A warning that repeats is written once per window: when NATS or the
//     rate-limit bucket is unreachable, every delivery fails the same way,
//     and thousands of identical lines a second would bury what matters.
//     The first line of a window goes out at once; the next one, after the
//     window, says how many were held back.
//
// Info and debug lines are never held back: each dead letter, pause or
// breaker change is its own event.
package logs

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/relay-dev/relay/internal/clock"
)

// DefaultRepeatWindow is how long a repeated warning stays quiet.
const DefaultRepeatWindow = 10 * time.Second

// Handler masks secrets and rate-limits repeated warnings before handing
// each record to the handler it wraps.
type Handler struct {
	next   slog.Handler
	window time.Duration
	clock  clock.Clock
	state  *repeats // shared by the handlers derived with WithAttrs/WithGroup
}

// repeats remembers, per warning message, when it was last written and how
// many were held back since.
type repeats struct {
	mu   sync.Mutex
	seen map[string]*repeat
}

type repeat struct {
	last time.Time
	held int
}

// NewHandler wraps next. A window of 0 takes DefaultRepeatWindow; a
// negative one holds nothing back. clk nil is clock.Real.
func NewHandler(next slog.Handler, window time.Duration, clk clock.Clock) *Handler {
	if window == 0 {
		window = DefaultRepeatWindow
	}
	if clk == nil {
		clk = clock.Real
	}
	return &Handler{next: next, window: window, clock: clk, state: &repeats{seen: map[string]*repeat{}}}
}

// Enabled implements slog.Handler.
func (h *Handler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.next.Enabled(ctx, level)
}

// Handle implements slog.Handler.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	held := 0
	if r.Level >= slog.LevelWarn && h.window > 0 {
		var write bool
		if write, held = h.state.admit(r.Message, h.clock.Now(), h.window); !write {
			return nil
		}
	}
	out := slog.NewRecord(r.Time, r.Level, Mask(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(maskAttr(a))
		return true
	})
	if held > 0 {
		out.AddAttrs(slog.Int("repeated", held))
	}
	return h.next.Handle(ctx, out)
}

// WithAttrs implements slog.Handler.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	masked := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		masked[i] = maskAttr(a)
	}
	c := *h
	c.next = h.next.WithAttrs(masked)
	return &c
}

// WithGroup implements slog.Handler.
func (h *Handler) WithGroup(name string) slog.Handler {
	c := *h
	c.next = h.next.WithGroup(name)
	return &c
}

// admit says whether a warning with this message is written now, and how
// many like it were held back since the last one written.
func (s *repeats) admit(msg string, now time.Time, window time.Duration) (bool, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.seen[msg]
	if !ok {
		if len(s.seen) >= maxRepeats {
			// Messages are constants in the code, so this holds them all;
			// should it not, forgetting is safe: a line is written twice.
			clear(s.seen)
		}
		s.seen[msg] = &repeat{last: now}
		return true, 0
	}
	if now.Sub(r.last) < window {
		r.held++
		return false, 0
	}
	held := r.held
	r.last, r.held = now, 0
	return true, held
}

// maxRepeats bounds the messages remembered.
const maxRepeats = 1024

// maskAttr masks an attribute's value, in groups too. Errors and other
// values are masked in their text form.
func maskAttr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, Mask(v.String()))
	case slog.KindGroup:
		group := v.Group()
		masked := make([]any, len(group))
		for i, g := range group {
			masked[i] = maskAttr(g)
		}
		return slog.Group(a.Key, masked...)
	case slog.KindAny:
		switch x := v.Any().(type) {
		case error:
			return slog.String(a.Key, Mask(x.Error()))
		case fmt.Stringer:
			return slog.String(a.Key, Mask(x.String()))
		case []string:
			return slog.String(a.Key, Mask(strings.Join(x, ",")))
		}
		return slog.String(a.Key, Mask(fmt.Sprint(v.Any())))
	}
	return slog.Attr{Key: a.Key, Value: v}
}

var (
	// secretRe matches a Standard Webhooks secret or ed25519 signing key.
	secretRe = regexp.MustCompile(`(whsec|whsk)_[A-Za-z0-9+/=_-]+`)
	// urlRe matches a URL: scheme, optional userinfo, the rest up to a
	// space or a quote; its query (or fragment) is what follows ? or #.
	urlRe = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://)([^/\s"'@]*@)?([^\s"'?#]*)([?#][^\s"']*)?`)
)

// Mask returns s with secrets, URL userinfo and URL queries masked.
func Mask(s string) string {
	if strings.Contains(s, "whsec_") || strings.Contains(s, "whsk_") {
		s = secretRe.ReplaceAllString(s, "${1}_…")
	}
	if !strings.Contains(s, "://") {
		return s
	}
	return urlRe.ReplaceAllStringFunc(s, func(u string) string {
		m := urlRe.FindStringSubmatch(u)
		out := m[1]
		if m[2] != "" {
			out += "…@"
		}
		out += m[3]
		if m[4] != "" {
			out += m[4][:1] + "…"
		}
		return out
	})
}
