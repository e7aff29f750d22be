package timeliness_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/sourcegraph/conc"

	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/internal/timeliness"
	"github.com/relay-dev/relay/streams"
)

// bucket opens relay_timeliness on its own connection to n, as a relay of
// its own would.
func bucket(t *testing.T, n *testutil.NATS) jetstream.KeyValue {
	t.Helper()
	js, err := jetstream.New(testutil.Connect(t, n.URL))
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(testutil.Context(t), streams.TimelinessBucket)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

func read(t *testing.T, kv jetstream.KeyValue, id string) timeliness.Counts {
	t.Helper()
	c, err := timeliness.Read(testutil.Context(t), kv, id)
	if err != nil {
		t.Fatalf("Read %s: %v", id, err)
	}
	return c
}

// flush flushes r until nothing is left, as the next intervals would: a
// flush that lost its races to the other relays too often keeps its counts.
func flush(t *testing.T, r *timeliness.Recorder) {
	t.Helper()
	for range 20 {
		err := r.Flush(testutil.Context(t))
		if err == nil {
			return
		}
		if !errors.Is(err, timeliness.ErrContended) {
			t.Fatalf("Flush: %v", err)
		}
	}
	t.Fatal("Flush kept losing its races")
}

// Two relays count deliveries of the same subscribers while both flush
// again and again, each racing the other for the same entries: the bucket
// ends with the exact sum of what both counted, nothing lost to a race and
// nothing counted twice.
func TestTwoRecordersAddUpUnderConcurrentFlushes(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	ids := []string{"alpha", "beta", "gamma"}
	relays := []*timeliness.Recorder{timeliness.NewRecorder(bucket(t, n)), timeliness.NewRecorder(bucket(t, n))}
	const rounds = 400
	ctx, stop := context.WithCancel(testutil.Context(t))
	var flushers, counters conc.WaitGroup
	for _, r := range relays {
		flushers.Go(func() {
			for ctx.Err() == nil {
				if err := r.Flush(ctx); err != nil && !errors.Is(err, timeliness.ErrContended) && ctx.Err() == nil {
					t.Errorf("Flush: %v", err)
					return
				}
			}
		})
		counters.Go(func() {
			for i := range rounds {
				for j, id := range ids {
					r.Met(id)
					if (i+j)%4 == 0 {
						r.Missed(id)
					}
				}
			}
		})
	}
	counters.Wait()
	stop()
	flushers.Wait()
	for _, r := range relays {
		flush(t, r)
	}
	kv := bucket(t, n)
	for j, id := range ids {
		missed := 0
		for i := range rounds {
			if (i+j)%4 == 0 {
				missed++
			}
		}
		want := timeliness.Counts{Met: 2 * rounds, Missed: uint64(2 * missed)}
		if got := read(t, kv, id); got != want {
			t.Errorf("%s: %+v, want %+v", id, got, want)
		}
	}
}

// A nil Recorder counts nothing and fails nothing, so that a caller without
// a bucket needs no checks.
func TestNilRecorderIsANoOp(t *testing.T) {
	t.Parallel()
	var r *timeliness.Recorder
	r.Met("alpha")
	r.Missed("alpha")
	r.Forget("alpha")
	if err := r.Flush(t.Context()); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := r.Run(ctx); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// A Recorder without a bucket refuses to run rather than count for nobody.
func TestRecorderWithoutABucketRefusesToRun(t *testing.T) {
	t.Parallel()
	r := timeliness.NewRecorder(nil)
	r.Met("alpha")
	if err := r.Run(t.Context()); !errors.Is(err, timeliness.ErrNoBucket) {
		t.Fatalf("Run: %v, want ErrNoBucket", err)
	}
	if err := r.Flush(t.Context()); !errors.Is(err, timeliness.ErrNoBucket) {
		t.Fatalf("Flush: %v, want ErrNoBucket", err)
	}
}

// Run writes every interval, and once more when its context is cancelled,
// so that a relay that stops loses nothing it counted.
func TestRunFlushesEveryIntervalAndAtTheStop(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	kv := bucket(t, n)
	for _, c := range []struct {
		name     string
		interval time.Duration
		cancel   bool
	}{
		{"every interval", 20 * time.Millisecond, false},
		{"at the stop", time.Hour, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			id := fmt.Sprintf("s%d", c.interval)
			r := timeliness.NewRecorder(kv, timeliness.WithInterval(c.interval), timeliness.WithLogger(nil))
			r.Met(id)
			r.Met(id)
			r.Missed(id)
			ctx, cancel := context.WithCancel(testutil.Context(t))
			defer cancel()
			done := make(chan error, 1)
			var wg conc.WaitGroup
			wg.Go(func() { done <- r.Run(ctx) })
			defer wg.Wait()
			if c.cancel {
				cancel()
				if err := <-done; err != nil {
					t.Fatalf("Run: %v", err)
				}
			}
			want := timeliness.Counts{Met: 2, Missed: 1}
			testutil.Eventually(t, func() bool { return read(t, kv, id) == want }, "counts of %s not written", id)
			cancel()
		})
	}
}

// Counts a flush cannot write wait for the next flush, added to what came
// since: here the bucket is gone for a while, as on a NATS outage.
func TestFlushKeepsWhatItCouldNotWrite(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	ctx := testutil.Context(t)
	kv := bucket(t, n)
	r := timeliness.NewRecorder(kv)
	r.Met("alpha")
	r.Missed("beta")
	if err := n.JS.DeleteKeyValue(ctx, streams.TimelinessBucket); err != nil {
		t.Fatal(err)
	}
	if err := r.Flush(ctx); err == nil {
		t.Fatal("Flush without a bucket succeeded")
	}
	r.Met("alpha")
	if err := streams.Ensure(ctx, n.JS, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	flush(t, r)
	if got := read(t, kv, "alpha"); got != (timeliness.Counts{Met: 2}) {
		t.Errorf("alpha: %+v, want 2 met", got)
	}
	if got := read(t, kv, "beta"); got != (timeliness.Counts{Missed: 1}) {
		t.Errorf("beta: %+v, want 1 missed", got)
	}
}

// A flush writes the subscribers whose counts changed and no other: a quiet
// subscriber costs nothing, and a flush with nothing new writes nothing.
func TestFlushWritesOnlyWhatChanged(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	ctx := testutil.Context(t)
	kv := bucket(t, n)
	r := timeliness.NewRecorder(kv)
	r.Met("busy")
	r.Met("quiet")
	flush(t, r)
	revision := func(id string) uint64 {
		e, err := kv.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return e.Revision()
	}
	busy, quiet := revision("busy"), revision("quiet")
	r.Missed("busy")
	flush(t, r)
	if revision("busy") == busy || revision("quiet") != quiet {
		t.Errorf("revisions busy %d→%d, quiet %d→%d: want only busy rewritten", busy, revision("busy"), quiet, revision("quiet"))
	}
	stream, err := n.JS.Stream(ctx, "KV_"+streams.TimelinessBucket)
	if err != nil {
		t.Fatal(err)
	}
	last := stream.CachedInfo().State.LastSeq
	flush(t, r)
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.LastSeq != last {
		t.Errorf("a flush with nothing new wrote %d messages", info.State.LastSeq-last)
	}
}

// Delete removes a subscriber's counts, so that one added again under the
// same id starts from nothing; a key that does not exist is no error and
// is not written.
func TestDeleteRemovesTheCounts(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	ctx := testutil.Context(t)
	kv := bucket(t, n)
	r := timeliness.NewRecorder(kv)
	r.Met("gone")
	flush(t, r)
	if err := timeliness.Delete(ctx, kv, "gone"); err != nil {
		t.Fatal(err)
	}
	if got := read(t, kv, "gone"); got != (timeliness.Counts{}) {
		t.Fatalf("after Delete: %+v, want none", got)
	}
	stream, err := n.JS.Stream(ctx, "KV_"+streams.TimelinessBucket)
	if err != nil {
		t.Fatal(err)
	}
	last := stream.CachedInfo().State.LastSeq
	if err := timeliness.Delete(ctx, kv, "never"); err != nil {
		t.Fatalf("Delete of a key that does not exist: %v", err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.LastSeq != last {
		t.Errorf("Delete of a key that does not exist wrote %d messages", info.State.LastSeq-last)
	}
	// Counted again after the delete: written over the delete marker.
	r.Missed("gone")
	flush(t, r)
	if got := read(t, kv, "gone"); got != (timeliness.Counts{Missed: 1}) {
		t.Fatalf("counted again after Delete: %+v, want 1 missed", got)
	}
}

// Forget drops what a removed subscriber counted and was not written, so
// that its key does not come back after `relay sub rm`.
func TestForgetDropsWhatWasNotWritten(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	kv := bucket(t, n)
	r := timeliness.NewRecorder(kv)
	r.Met("gone")
	r.Met("kept")
	r.Forget("gone")
	flush(t, r)
	if _, err := kv.Get(testutil.Context(t), "gone"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("a forgotten subscriber's key: %v, want none", err)
	}
	if got := read(t, kv, "kept"); got != (timeliness.Counts{Met: 1}) {
		t.Errorf("kept: %+v, want 1 met", got)
	}
}

// A value that is not Counts (written around relay) fails Read, and a
// flush starts the subscriber over from its own counts rather than stop
// counting it.
func TestFlushStartsOverFromAnUnreadableValue(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	ctx := testutil.Context(t)
	kv := bucket(t, n)
	if _, err := kv.Put(ctx, "odd", []byte("not json")); err != nil {
		t.Fatal(err)
	}
	if _, err := timeliness.Read(ctx, kv, "odd"); !errors.Is(err, timeliness.ErrCorrupt) {
		t.Fatalf("Read of an unreadable value: %v, want ErrCorrupt", err)
	}
	r := timeliness.NewRecorder(kv)
	r.Missed("odd")
	flush(t, r)
	if got := read(t, kv, "odd"); got != (timeliness.Counts{Missed: 1}) {
		t.Fatalf("odd: %+v, want 1 missed", got)
	}
}

// Met and Missed are called once per delivery: after a subscriber's first
// count they allocate nothing. (Not parallel: AllocsPerRun counts the
// whole process's allocations.)
func TestCountingDoesNotAllocate(t *testing.T) {
	r := timeliness.NewRecorder(nil)
	id := fmt.Sprintf("sub-%d", 42)
	r.Met(id)
	r.Missed(id)
	if a := testing.AllocsPerRun(1000, func() { r.Met(id); r.Missed(id) }); a != 0 {
		t.Fatalf("Met and Missed allocate %.1f times a call", a)
	}
}

func TestCountsInTime(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		counts timeliness.Counts
		want   float64
		ok     bool
	}{
		{timeliness.Counts{}, 0, false},
		{timeliness.Counts{Met: 3}, 1, true},
		{timeliness.Counts{Missed: 2}, 0, true},
		{timeliness.Counts{Met: 3, Missed: 1}, 0.75, true},
	} {
		got, ok := c.counts.InTime()
		if got != c.want || ok != c.ok {
			t.Errorf("%+v.InTime() = %v, %v; want %v, %v", c.counts, got, ok, c.want, c.ok)
		}
	}
}
