package logs

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/relay-dev/relay/internal/clock"
)

func TestMask(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"no secret here", "no secret here"},
		{"secret whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw used", "secret whsec_… used"},
		{"key whsk_nWGxne/9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A= and whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "key whsk_… and whsec_…"},
		{"https://hooks.example.com/in", "https://hooks.example.com/in"},
		{"https://user:pa55@hooks.example.com/in?token=abc#frag", "https://…@hooks.example.com/in?…"},
		{`Post "https://hooks.example.com/in?sig=x": dial tcp: refused`, `Post "https://hooks.example.com/in?…": dial tcp: refused`},
		{"nats://relay:s3cret@nats-1:4222,nats://nats-2:4222", "nats://…@nats-1:4222,nats://nats-2:4222"},
		{"http://[::1]:8080/a?b=c", "http://[::1]:8080/a?…"},
	} {
		if got := Mask(tc.in); got != tc.want {
			t.Errorf("Mask(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestHandlerMasksEveryAttribute: messages, strings, errors, groups and
// attributes added with With are masked, in text and JSON.
func TestHandlerMasksEveryAttribute(t *testing.T) {
	t.Parallel()
	for _, format := range []string{"text", "json"} {
		var buf bytes.Buffer
		var next slog.Handler = slog.NewTextHandler(&buf, nil)
		if format == "json" {
			next = slog.NewJSONHandler(&buf, nil)
		}
		log := slog.New(NewHandler(next, 0, nil)).With("nats", "nats://u:p4ss@host:4222")
		log.Info("sent to https://x:pw@h/p?k=v", "url", "https://h/p?token=t0k",
			"err", errors.New("Post \"https://h/p?token=t0k\": EOF"),
			slog.Group("sub", "secret", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"))
		out := buf.String()
		for _, leak := range []string{"p4ss", "pw@", "k=v", "t0k", "MfKQ9r8"} {
			if strings.Contains(out, leak) {
				t.Errorf("%s: %q leaked in %s", format, leak, out)
			}
		}
	}
}

// TestHandlerHoldsBackRepeatedWarnings: a warning repeated within the
// window is written once, and the next one after it says how many were
// held back; info lines and other warnings are never held back.
func TestHandlerHoldsBackRepeatedWarnings(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	fake := clock.NewFake(time.Now())
	log := slog.New(NewHandler(slog.NewTextHandler(&buf, nil), 10*time.Second, fake))
	for range 100 {
		log.Warn("ratelimit: bucket unreachable", "subscriber", "a")
		log.Info("lanes: dead-lettered", "subscriber", "a")
	}
	log.Warn("another warning")
	fake.Advance(11 * time.Second)
	log.Warn("ratelimit: bucket unreachable", "subscriber", "b")

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	count := func(s string) int {
		n := 0
		for _, l := range lines {
			if strings.Contains(l, s) {
				n++
			}
		}
		return n
	}
	if got := count("bucket unreachable"); got != 2 {
		t.Errorf("repeated warning written %d times, want 2:\n%s", got, buf.String())
	}
	if got := count("repeated=99"); got != 1 {
		t.Errorf("the warning after the window does not say 99 were held back:\n%s", buf.String())
	}
	if got := count("dead-lettered"); got != 100 {
		t.Errorf("info lines written %d times, want 100", got)
	}
	if got := count("another warning"); got != 1 {
		t.Errorf("a different warning written %d times, want 1", got)
	}
}
