package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/fanout"
	"github.com/relay-dev/relay/internal/testutil"
)

// TestContentFilterLetsThroughExactlyTheMatchingEvents: a subscriber with
// --filter 'body.status == "paid" && body.amount > 100' beside one without
// a filter, both on the same events: the first gets exactly the events the
// expression is true of (not the unpaid, the small, those whose body lacks
// a field, nor those whose body is not JSON), the second every event, and
// the fan-out counts each evaluation by its result. Then `sub update
// --filter` changes it and `--filter ”` removes it, each taking effect
// for the events published after.
func TestContentFilterLetsThroughExactlyTheMatchingEvents(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	all, paid := newReceiver(t), newReceiver(t)
	mustRelay(t, "sub", "add", "all", "--nats", n.URL, "--url", all.URL, "--secret", testSecret, "--events", "order.*")
	mustRelay(t, "sub", "add", "paid", "--nats", n.URL, "--url", paid.URL, "--secret", testSecret, "--events", "order.*",
		"--filter", `body.status == "paid" && body.amount > 100`)
	_, base := startReadyRelay(t, n.URL)

	bodies := map[string]string{
		"paid-big":    `{"status":"paid","amount":150}`,
		"paid-float":  `{"amount":100.5,"status":"paid","items":[1,2]}`,
		"paid-small":  `{"status":"paid","amount":100}`,
		"unpaid":      `{"status":"due","amount":500}`,
		"no-amount":   `{"status":"paid"}`,
		"amount-text": `{"status":"paid","amount":"500"}`,
		"not-json":    `status=paid&amount=500`,
		"json-array":  `[{"status":"paid","amount":500}]`,
		"empty":       ``,
		"paid-nested": `{"status":"paid","amount":1e3,"customer":{"id":"c1"}}`,
	}
	want := map[string]bool{"paid-big": true, "paid-float": true, "paid-nested": true}
	publish := func(prefix string) {
		for id, body := range bodies {
			m := &nats.Msg{Subject: fanout.SubjectPrefix + "order.updated", Data: []byte(body), Header: nats.Header{}}
			m.Header.Set(nats.MsgIdHdr, prefix+id)
			_, err := n.JS.PublishMsg(testutil.Context(t), m)
			require.NoError(t, err)
		}
	}
	publish("a-")
	settle := func(wantAll, wantPaid int) {
		t.Helper()
		testutil.Progress(t, func() int { return distinctIDs(all) }, wantAll, 15*time.Second, "the unfiltered subscriber's deliveries")
		testutil.Eventually(t, func() bool { return fannedOut(testutil.Context(t), n.JS) }, "events not all fanned out")
		testutil.Progress(t, func() int { return distinctIDs(paid) }, wantPaid, 15*time.Second, "the filtered subscriber's deliveries")
		// Fanned out, and nothing waits for it: no copy is still to come.
		testutil.Eventually(t, func() bool { return waitingFor(t, n, "paid") == 0 }, "a copy still waits for the filtered subscriber")
		require.Equal(t, wantPaid, distinctIDs(paid))
	}
	settle(len(bodies), len(want))
	for _, d := range paid.deliveries() {
		id := d.header.Get("webhook-id")
		require.True(t, want[id[len("a-"):]], "%s does not match the filter and was delivered", id)
	}
	waitMetrics(t, base,
		expectation{name: "relay_filter_evaluations_total", value: 3, pairs: []string{"result", "matched"}},
		expectation{name: "relay_filter_evaluations_total", value: 2, pairs: []string{"result", "not_matched"}},
		expectation{name: "relay_filter_evaluations_total", value: 2, pairs: []string{"result", "body_not_json"}},
		// A field the body lacks, a string compared with a number, an
		// array where an object was expected.
		expectation{name: "relay_filter_evaluations_total", value: 3, pairs: []string{"result", "error"}},
	)

	// Changed: the running relay applies it within a second, to the
	// events published after.
	mustRelay(t, "sub", "update", "paid", "--nats", n.URL, "--filter", `type == "order.updated" && body.status == "due"`)
	require.Contains(t, mustRelay(t, "sub", "get", "paid", "--nats", n.URL), `body.status == "due"`)
	time.Sleep(1500 * time.Millisecond)
	publish("b-")
	settle(2*len(bodies), len(want)+1)

	mustRelay(t, "sub", "update", "paid", "--nats", n.URL, "--filter", "")
	require.NotContains(t, mustRelay(t, "sub", "get", "paid", "--nats", n.URL, "--json"), `"filter"`)
	time.Sleep(1500 * time.Millisecond)
	publish("c-")
	settle(3*len(bodies), len(want)+1+len(bodies))
	_, dups := uniqueIDs(paid)
	require.Zero(t, dups, fmt.Sprintf("%d duplicate requests", dups))
}

// TestBadFilterExitsTwoWithWhereItIs: an expression CEL refuses is refused
// by sub add and sub update with exit 2 and CEL's message with its column,
// and nothing is stored.
func TestBadFilterExitsTwoWithWhereItIs(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	for expr, want := range map[string]string{
		`body.status == "paid" &&`: "at 1:25: Syntax error",
		`body.amount + 1`:          "must be true or false",
		`tenant == "a"`:            "at 1:1: undeclared reference to 'tenant'",
	} {
		code, _, errOut := relayCmd(t, "sub", "add", "bad", "--nats", n.URL, "--url", "https://example.com/h", "--secret", testSecret, "--filter", expr)
		require.Equal(t, 2, code, errOut)
		require.Contains(t, errOut, "--filter: "+want)
		require.Equal(t, 1, strings.Count(strings.TrimSpace(errOut), "\n")+1, "one line: %q", errOut)
	}
	code, _, errOut := relayCmd(t, "sub", "get", "bad", "--nats", n.URL)
	require.NotEqual(t, 0, code, errOut)
	mustRelay(t, "sub", "add", "good", "--nats", n.URL, "--url", "https://example.com/h", "--secret", testSecret)
	code, _, errOut = relayCmd(t, "sub", "update", "good", "--nats", n.URL, "--filter", `body.x ==`)
	require.Equal(t, 2, code, errOut)
	require.NotContains(t, mustRelay(t, "sub", "get", "good", "--nats", n.URL, "--json"), `"filter"`)
}
