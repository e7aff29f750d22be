package subscribers

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/relay-dev/relay/internal/deliver"
)

// A Change sets the fields it gives alone, and refuses with the flag's
// line what no subscriber may take.
func TestChange(t *testing.T) {
	t.Parallel()
	sub := Subscriber{ID: "a", URL: "https://example.com/hook", Rate: 50, Burst: 50, MaxAttempts: 3, Owner: "cust_1"}
	rate := 5.0
	followed, was := Change{Rate: &rate}.Apply(&sub)
	if sub.Rate != 5 || sub.URL != "https://example.com/hook" || sub.MaxAttempts != 3 || sub.Owner != "cust_1" || !followed || was != 50 {
		t.Fatalf("after rate 5: %+v, followed %v from %d", sub, followed, was)
	}
	zero, none, bad, lane := Duration(0), "", " x", "fast"
	for _, c := range []struct {
		c    Change
		want string
	}{
		{Change{Timeout: &zero}, "--timeout: must be a positive duration such as 10s, got 0s"},
		{Change{Lane: &lane}, `--lane: must be shared or dedicated, got "fast"`},
		{Change{Owner: &bad}, "--owner: "},
		{Change{Events: &[]string{"events.order"}}, "--events events.order: filters are event types"},
	} {
		if err := c.c.Check(); err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.c, err, c.want)
		}
	}
	if err := (Change{Owner: &none}).Check(); err != nil {
		t.Errorf("no owner: %v", err)
	}
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	if at, err := ParseUntil("30m", now); err != nil || !at.Equal(now.Add(30*time.Minute)) {
		t.Errorf("30m: %v %v", at, err)
	}
	if _, err := ParseUntil("2026-12-01T11:00:00Z", now); err == nil || !strings.HasPrefix(err.Error(), "--until: must be in the future") {
		t.Errorf("past: %v", err)
	}
}

// Keys given replace their kind and keep the other, as relay sub update
// --secret keeps an ed25519 key; none given generates one of each kind
// asked for.
func TestKeysGivenAndGenerated(t *testing.T) {
	t.Parallel()
	ed, err := deliver.NewSigningKey()
	if err != nil {
		t.Fatal(err)
	}
	old, _ := NewSecret()
	fresh, _ := NewSecret()
	if got := ReplaceKeys([]string{old, ed}, []string{fresh}); !slices.Equal(got, []string{fresh, ed}) {
		t.Errorf("a secret given: %v", got)
	}
	keys, generated, err := KeysFor(nil, "both")
	if err != nil || len(keys) != 2 || !slices.Equal(keys, generated) || SigningOf(keys) != SigningBoth {
		t.Errorf("both, none given: %v %v %v", keys, generated, err)
	}
	keys, generated, err = KeysFor([]string{old}, "")
	if err != nil || !slices.Equal(keys, []string{old}) || generated != nil {
		t.Errorf("one given: %v %v %v", keys, generated, err)
	}
	if _, _, err := KeysFor([]string{old}, "ed25519"); err == nil {
		t.Error("a secret given for ed25519 signing taken")
	}
}
