package deadletter

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// One reading of a filter's words, whose errors name the field by its
// flag.
func TestParseFilter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 8, 10, 0, 0, 0, time.UTC)
	s := func(v string) *string { return &v }
	f, err := ParseFilter(FilterArgs{Subscriber: s("demo"), Reason: s("gone"), Type: s("video.*"), Since: s("1h"), Until: s("2026-12-08T09:30:00Z")}, now)
	if err != nil {
		t.Fatal(err)
	}
	if f.Subscriber != "demo" || f.Reason != Gone || f.Type != "video.*" || !f.Since.Equal(now.Add(-time.Hour)) || !f.Until.Equal(now.Add(-30*time.Minute)) {
		t.Fatalf("ParseFilter = %+v", f)
	}
	for _, c := range []struct {
		args FilterArgs
		want string
	}{
		{FilterArgs{Reason: s("nope")}, `--reason: "nope" is not a reason; valid reasons are `},
		{FilterArgs{Subscriber: s("a.b")}, "--subscriber: "},
		{FilterArgs{Type: s("a,b")}, "--type: takes one event type"},
		{FilterArgs{Since: s("yesterday")}, `--since: "yesterday" is neither an RFC 3339 time`},
		{FilterArgs{Since: s("1h"), Until: s("2h")}, "--until: 2026-12-08T08:00:00Z is before --since 2026-12-08T09:00:00Z; swap them"},
	} {
		_, err := ParseFilter(c.args, now)
		if !errors.Is(err, ErrInvalidFilter) || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("ParseFilter = %v, want ErrInvalidFilter beginning %q", err, c.want)
		}
	}
}
