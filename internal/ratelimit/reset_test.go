package ratelimit_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/internal/clock"
	"github.com/relay-dev/relay/internal/ratelimit"
	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

// TestResetClosesTheCircuitEveryRelayHolds: a relay holds a subscriber for
// its Retry-After pause and its open circuit, ten minutes more. Reset, as
// relay sub resume calls it, clears both, the run of cool-downs and the
// failures (keeping the tokens); the relay's watch tells it at once
// (Lifted), and its next Reserve lets a request go. Before, only the cool-down's end and a probe
// closed it.
func TestResetClosesTheCircuitEveryRelayHolds(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	s := newShared(t, n, clock.Real, ratelimit.Options{})
	id := subID(t)
	l := ratelimit.Limit{Rate: 10, Burst: 10}
	open := time.Now().Add(10 * time.Minute).UTC()
	testutil.PutJSON(t, n.JS, streams.RateLimitBucket, id, ratelimit.State{Tokens: 7, At: time.Now().UTC(), Failures: 5, OpenUntil: open, Opens: 8, PausedUntil: open})
	testutil.Eventually(t, func() bool {
		d, err := s.Reserve(testutil.Context(t), id, l)
		return err == nil && d.Verdict == ratelimit.Paused
	}, "the relay does not hold the pause and the open circuit")

	was, err := ratelimit.Reset(testutil.Context(t), n.JS, id)
	if err != nil {
		t.Fatal(err)
	}
	if !was.OpenUntil.Equal(open) || was.Opens != 8 {
		t.Fatalf("Reset returned %+v, want the open circuit it closed", was)
	}
	st := entry(t, n, id)
	if !st.OpenUntil.IsZero() || st.Opens != 0 || st.Failures != 0 || !st.PausedUntil.IsZero() || st.Tokens != 7 {
		t.Fatalf("entry after Reset: %+v, want closed, no run, no failures, its tokens kept", st)
	}
	select {
	case <-s.Lifted():
	case <-time.After(10 * time.Second):
		t.Fatal("the watch did not tell the lanes the circuit was closed")
	}
	if ids := s.TakeLifted(); len(ids) != 1 || ids[0] != id {
		t.Fatalf("lifted %v, want [%s]", ids, id)
	}
	if d, err := s.Reserve(testutil.Context(t), id, l); err != nil || d.Verdict != ratelimit.Go {
		t.Fatalf("Reserve after Reset: %+v, %v; want go", d, err)
	}
	if was, err := ratelimit.Reset(testutil.Context(t), n.JS, "nobody"); err != nil || was != (ratelimit.State{}) {
		t.Fatalf("Reset of a subscriber without an entry: %+v, %v", was, err)
	}
}

// TestResetErrorNamesNoPackage: relay sub resume prints what Reset returns,
// so its error names the bucket, not the package it came from.
func TestResetErrorNamesNoPackage(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	nc := testutil.Connect(t, n.URL)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
	_, err = ratelimit.Reset(testutil.Context(t), js, "a")
	if err == nil || strings.HasPrefix(err.Error(), "ratelimit:") || !strings.Contains(err.Error(), streams.RateLimitBucket) {
		t.Fatalf("Reset on a closed connection: %v", err)
	}
}
