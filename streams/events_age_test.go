package streams_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

// oldEventsMaxAge is the max_age of EVENTS.json before relay purged EVENTS
// itself: 604800000000000 ns, 7 days.
const oldEventsMaxAge = 604800000000000 * time.Nanosecond

// TestEnsureTakesOverEventsOldDefaultAge: a new EVENTS has no max_age; one
// found with relay's old 7-day max_age is set to none, said once at Info;
// neither warns.
func TestEnsureTakesOverEventsOldDefaultAge(t *testing.T) {
	t.Parallel()
	n := testutil.StartNATS(t)
	if log := ensure(t, n.JS, streams.Options{}); strings.Contains(log, "level=WARN") || strings.Contains(log, "old default") {
		t.Fatalf("Ensure of a new EVENTS warned or migrated:\n%s", log)
	}
	if got := info(t, n.JS, streams.Events).Config.MaxAge; got != 0 {
		t.Fatalf("a new EVENTS has max_age %s, want none", got)
	}

	edit(t, n.JS, streams.Events, func(c *jetstream.StreamConfig) { c.MaxAge = oldEventsMaxAge })
	log := ensure(t, n.JS, streams.Options{})
	want := `level=INFO msg="streams: EVENTS max_age 168h0m0s was relay's old default: set to none`
	if !strings.Contains(log, want) || strings.Count(log, "old default") != 1 {
		t.Errorf("no single line %q:\n%s", want, log)
	}
	if strings.Contains(log, "level=WARN") {
		t.Errorf("taking over the old default warned:\n%s", log)
	}
	if got := info(t, n.JS, streams.Events).Config.MaxAge; got != 0 {
		t.Fatalf("EVENTS with the old default max_age has %s after Ensure, want none", got)
	}
	if log := ensure(t, n.JS, streams.Options{}); strings.Contains(log, "old default") || strings.Contains(log, "level=WARN") {
		t.Errorf("a second Ensure said it again, or warned:\n%s", log)
	}
}

// TestEnsureKeepsAnOperatorsEventsAgeWithAWarning: any other max_age on
// EVENTS, longer or shorter than the old default, is an operator's: kept,
// with a warning that JetStream may delete events the fan-out has not
// copied.
func TestEnsureKeepsAnOperatorsEventsAgeWithAWarning(t *testing.T) {
	t.Parallel()
	n := testutil.StartNATS(t)
	ensure(t, n.JS, streams.Options{})
	for _, age := range []time.Duration{oldEventsMaxAge + time.Second, 48 * time.Hour} {
		edit(t, n.JS, streams.Events, func(c *jetstream.StreamConfig) { c.MaxAge = age })
		log := ensure(t, n.JS, streams.Options{})
		want := `level=WARN msg="streams: EVENTS has max_age ` + age.String() + `, under the unlimited relay advises: JetStream may delete events the fan-out has not copied yet`
		if !strings.Contains(log, want) {
			t.Errorf("max_age %s: no warning %q:\n%s", age, want, log)
		}
		if strings.Contains(log, "old default") {
			t.Errorf("max_age %s was taken for the old default:\n%s", age, log)
		}
		if got := info(t, n.JS, streams.Events).Config.MaxAge; got != age {
			t.Errorf("EVENTS' max_age is %s after Ensure, want the operator's %s kept", got, age)
		}
	}
}
