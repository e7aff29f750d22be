package docs

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/internal/testutil"
)

// TestLargestEventIsAsTheReadmeSays: an event of 960 KiB (983,040 bytes
// with its headers) is stored; one a little larger is refused with error
// 10054, and one past the server's 1 MiB max_payload is refused by the
// client before it is sent, as README.md's "The largest event" says.
func TestLargestEventIsAsTheReadmeSays(t *testing.T) {
	t.Parallel()
	readme, err := readFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, said := range []string{"**960 KiB** (983,040 bytes, its headers included)", "(10054)", "maximum payload exceeded"} {
		if !strings.Contains(strings.Join(strings.Fields(readme), " "), said) {
			t.Fatalf("README.md no longer says %q: change this test with it", said)
		}
	}
	n := testutil.StartRelayNATS(t)
	ctx := testutil.Context(t)
	publish := func(id string, size int) error {
		m := nats.NewMsg("events.doc.big")
		m.Header.Set("Nats-Msg-Id", id)
		m.Data = bytes.Repeat([]byte("a"), size)
		_, err := n.JS.PublishMsg(ctx, m)
		return err
	}
	// Its headers count against the limit too: a little under it.
	if err := publish("big-1", 983_040-64); err != nil {
		t.Errorf("an event just under 960 KiB: %v", err)
	}
	var apiErr *jetstream.APIError
	if err := publish("big-2", 983_041); !errors.As(err, &apiErr) || apiErr.ErrorCode != 10054 {
		t.Errorf("an event over 960 KiB: %v, want error 10054", err)
	}
	if err := publish("big-3", 1<<20+1); !errors.Is(err, nats.ErrMaxPayload) {
		t.Errorf("an event over 1 MiB: %v, want %v", err, nats.ErrMaxPayload)
	}
}
