package status

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/internal/ratelimit"
	"github.com/relay-dev/relay/internal/retry"
	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

const testLanes = 16

// pub stores n plain messages on subject, as a lane, the fan-out or the
// rate limiter would leave them, without anything that makes them move.
func pub(t *testing.T, js jetstream.JetStream, subject string, n int) {
	t.Helper()
	ctx := testutil.Context(t)
	for i := range n {
		if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: subject, Data: fmt.Appendf(nil, "m%d", i)}); err != nil {
			t.Fatalf("publish %s: %v", subject, err)
		}
	}
}

// queue stores n deliveries for sub on its lane.
func queue(t *testing.T, js jetstream.JetStream, sub subscribers.Subscriber, n int) {
	t.Helper()
	pub(t, js, "deliveries."+sub.Lane(testLanes)+"."+sub.ID, n)
}

// park parks n deliveries for subscriber id in RETRIES as a lane does,
// each a JetStream message schedule on a subject of its own, due in an hour
// so that nothing moves them during the test.
func park(t *testing.T, js jetstream.JetStream, id string, n int) {
	t.Helper()
	ctx := testutil.Context(t)
	at := time.Now().Add(time.Hour)
	for i := range n {
		if err := retry.Park(ctx, js, id, fmt.Appendf(nil, "p%d", i), nats.Header{}, at, fmt.Sprintf("park-%s-%d", id, i)); err != nil {
			t.Fatalf("park for %s: %v", id, err)
		}
	}
}

func collect(t *testing.T, js jetstream.JetStream, subs ...subscribers.Subscriber) map[string]Subscriber {
	t.Helper()
	report, err := Collect(testutil.Context(t), js, subs, testLanes)
	if err != nil {
		t.Fatalf("Collect: %v", err)
	}
	rows := report.Subscribers
	if len(rows) != len(subs) {
		t.Fatalf("Collect returned %d rows for %d subscribers", len(rows), len(subs))
	}
	byID := map[string]Subscriber{}
	for _, r := range rows {
		byID[r.ID] = r
	}
	return byID
}

func limited(id string, rate float64) subscribers.Subscriber {
	s := subscribers.Subscriber{ID: id, Rate: rate}
	s.SetDefaults()
	return s
}

// laneMates returns two ids that share a shared lane among testLanes.
func laneMates(t *testing.T) (string, string) {
	t.Helper()
	seen := map[string]string{}
	for i := range 1000 {
		id := fmt.Sprintf("mate%d", i)
		lane := subscribers.LaneFor(id, testLanes)
		if other, ok := seen[lane]; ok {
			return other, id
		}
		seen[lane] = id
	}
	t.Fatal("no two ids share a lane")
	return "", ""
}

func TestCollectWithoutSubscribersIsEmptyNotNil(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	report, err := Collect(testutil.Context(t), n.JS, nil, testLanes)
	if err != nil {
		t.Fatal(err)
	}
	rows := report.Subscribers
	if rows == nil || len(rows) != 0 {
		t.Fatalf("Collect(no subscribers) = %#v, want an empty slice", rows)
	}
	raw, _ := json.Marshal(rows)
	if string(raw) != "[]" {
		t.Fatalf("JSON = %s, want []", raw)
	}
}

func TestCollectRefusesFewerThanOneLane(t *testing.T) {
	t.Parallel()
	_, err := Collect(t.Context(), nil, []subscribers.Subscriber{limited("a", 1)}, 0)
	if !errors.Is(err, ErrInvalidLanes) {
		t.Fatalf("Collect with 0 lanes: %v, want ErrInvalidLanes", err)
	}
}

func TestCollectCountsEachSubscribersMessages(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	alpha, beta := limited("alpha", 0), limited("beta", 100)
	beta.Disabled, beta.DisabledReason = true, "410 Gone"
	queue(t, n.JS, alpha, 3)
	queue(t, n.JS, beta, 1)
	// A delivery left on another lane (before a --lanes change) is still
	// the subscriber's.
	pub(t, n.JS, "deliveries.d_alpha.alpha", 1)
	pub(t, n.JS, "deliveries.overflow.alpha", 2)
	park(t, n.JS, "alpha", 2)
	pub(t, n.JS, "retries.due.alpha", 1)
	park(t, n.JS, "beta", 1)
	pub(t, n.JS, "dlq.alpha.rejected", 1)
	pub(t, n.JS, "dlq.beta.gone", 2)
	pub(t, n.JS, "dlq.beta.max_attempts", 3)
	// Messages of a removed subscriber belong to nobody in the report.
	pub(t, n.JS, "deliveries.s00.gone", 5)

	report, err := Collect(testutil.Context(t), n.JS, []subscribers.Subscriber{beta, alpha}, testLanes)
	if err != nil {
		t.Fatal(err)
	}
	rows := report.Subscribers
	if len(rows) != 2 || rows[0].ID != "alpha" || rows[1].ID != "beta" {
		t.Fatalf("rows %+v, want alpha then beta", rows)
	}
	a, b := rows[0], rows[1]
	if a.Pending != 6 || a.Queued != 4 || a.Overflow != 2 || a.Dead != 1 {
		t.Errorf("alpha pending/queued/overflow/dead = %d/%d/%d/%d, want 6/4/2/1", a.Pending, a.Queued, a.Overflow, a.Dead)
	}
	if b.Pending != 1 || b.Queued != 1 || b.Overflow != 0 || b.Dead != 5 {
		t.Errorf("beta pending/queued/overflow/dead = %d/%d/%d/%d, want 1/1/0/5", b.Pending, b.Queued, b.Overflow, b.Dead)
	}
	// Parked deliveries are counted in all, not per subscriber: the
	// server could count them only one request per subscriber.
	if a.Parked != nil || b.Parked != nil {
		t.Errorf("parked counted per subscriber in the overview: alpha %v, beta %v", a.Parked, b.Parked)
	}
	want := Summary{Subscribers: 2, Enabled: 1, Disabled: 1, Pending: 7, Parked: 4, DeadLetters: 6, OldestQueue: report.Summary.OldestQueue, OldestQueueAge: report.Summary.OldestQueueAge}
	if report.Summary != want || report.Summary.OldestQueue == "" {
		t.Errorf("summary %+v, want %+v", report.Summary, want)
	}
	if !maps.Equal(a.DeadByReason, map[string]uint64{"rejected": 1}) || !maps.Equal(b.DeadByReason, map[string]uint64{"gone": 2, "max_attempts": 3}) {
		t.Errorf("dead by reason: alpha %v, beta %v", a.DeadByReason, b.DeadByReason)
	}
	if a.State != Enabled || b.State != Disabled || b.DisabledReason != "410 Gone" {
		t.Errorf("states %q, %q (%q)", a.State, b.State, b.DisabledReason)
	}
	if a.Lane != subscribers.LaneFor("alpha", testLanes) || a.Dedicated {
		t.Errorf("alpha lane %q dedicated %v", a.Lane, a.Dedicated)
	}
	if a.Tokens != nil || a.EffectiveRate != 0 {
		t.Errorf("unlimited alpha has tokens %v, effective rate %v", a.Tokens, a.EffectiveRate)
	}
	if b.Tokens == nil || *b.Tokens != 100 || b.EffectiveRate != 100 || b.Circuit != ratelimit.Closed {
		t.Errorf("beta without an entry: tokens %v effective %v circuit %s, want a full bucket of 100, 100/s, closed", b.Tokens, b.EffectiveRate, b.Circuit)
	}
	for _, r := range rows {
		if r.OldestPendingAt.IsZero() || r.OldestPendingAge == "" || r.OldestPendingAt.Location() != time.UTC {
			t.Errorf("%s: oldest pending at %v age %q, want set, in UTC", r.ID, r.OldestPendingAt, r.OldestPendingAge)
		}
		if r.Hint != "" && r.State != Disabled {
			t.Errorf("%s: unexpected hint %q", r.ID, r.Hint)
		}
	}
}

func TestCollectOldestPendingIsEmptyWithoutAQueue(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	idle := limited("idle", 5)
	park(t, n.JS, "idle", 1)
	row := collect(t, n.JS, idle)["idle"]
	if !row.OldestPendingAt.IsZero() || row.OldestPendingAge != "" {
		t.Fatalf("oldest pending at %v age %q, want none", row.OldestPendingAt, row.OldestPendingAge)
	}
	raw, err := json.Marshal(row)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), "oldest_pending_at") || !strings.Contains(string(raw), `"oldest_pending_age":""`) {
		t.Fatalf("JSON %s: want no oldest_pending_at and an empty oldest_pending_age", raw)
	}
}

func TestCollectReadsTheRateLimitEntry(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	future := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	paused, probing, past := limited("paused", 1), limited("probing", 10), limited("past", 10)
	paused.Burst = 10
	testutil.PutJSON(t, n.JS, streams.RateLimitBucket, "paused", ratelimit.State{Tokens: 2, PausedUntil: future, OpenUntil: future, Failures: 5})
	testutil.PutJSON(t, n.JS, streams.RateLimitBucket, "probing", ratelimit.State{Tokens: 0, Rate: 2.5, OpenUntil: time.Now().Add(-time.Minute), Failures: 7})
	testutil.PutJSON(t, n.JS, streams.RateLimitBucket, "past", ratelimit.State{Tokens: 10, PausedUntil: time.Now().Add(-time.Minute)})

	// A deleted entry (the rate limiter's bucket has a TTL too) is no
	// entry: a full bucket.
	erased := limited("erased", 4)
	testutil.PutJSON(t, n.JS, streams.RateLimitBucket, "erased", ratelimit.State{Tokens: 0, Failures: 9, OpenUntil: future})
	kv, err := n.JS.KeyValue(testutil.Context(t), streams.RateLimitBucket)
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(testutil.Context(t), "erased"); err != nil {
		t.Fatal(err)
	}

	rows := collect(t, n.JS, paused, probing, past, erased)
	if e := rows["erased"]; e.Tokens == nil || *e.Tokens != 4 || e.Circuit != ratelimit.Closed || e.Failures != 0 {
		t.Errorf("erased: tokens %v circuit %s failures %d, want a full bucket of 4, closed, 0", e.Tokens, e.Circuit, e.Failures)
	}
	p := rows["paused"]
	if !p.PausedUntil.Equal(future) || p.Circuit != ratelimit.Open || p.Failures != 5 {
		t.Errorf("paused: until %v circuit %s failures %d, want %v open 5", p.PausedUntil, p.Circuit, p.Failures, future)
	}
	if p.State != Paused || p.PauseReason != ByRetryAfter || !p.ResumesAt.IsZero() {
		t.Errorf("paused: state %q by %q resumes at %v, want paused by retry_after", p.State, p.PauseReason, p.ResumesAt)
	}
	// Written just now at 1/s: about 2 tokens, never more than the burst.
	if p.Tokens == nil || *p.Tokens < 2 || *p.Tokens > 10 {
		t.Errorf("paused: tokens %v, want from 2 to 10", p.Tokens)
	}
	q := rows["probing"]
	if q.Circuit != ratelimit.HalfOpen || q.Failures != 7 || q.EffectiveRate != 2.5 || !q.PausedUntil.IsZero() {
		t.Errorf("probing: circuit %s failures %d effective %v paused %v, want half-open 7 2.5 none", q.Circuit, q.Failures, q.EffectiveRate, q.PausedUntil)
	}
	if r := rows["past"]; !r.PausedUntil.IsZero() || r.Circuit != ratelimit.Closed || r.Tokens == nil || *r.Tokens != 10 || r.State != Enabled || r.PauseReason != "" {
		t.Errorf("past: paused %v circuit %s tokens %v state %q %q, want no pause, closed, 10, enabled", r.PausedUntil, r.Circuit, r.Tokens, r.State, r.PauseReason)
	}
	raw, err := json.Marshal(rows["past"])
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), "paused_until") {
		t.Errorf("a pause in the past is in the JSON: %s", raw)
	}
}

func TestCollectHintsAtADedicatedLaneForABigBacklog(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	slow, fast, own, free := limited("slow", 1), limited("fast", 100), limited("own", 1), limited("free", 0)
	own.Dedicated = true
	queue(t, n.JS, slow, 70)
	park(t, n.JS, "slow", 20)
	queue(t, n.JS, fast, 70)
	queue(t, n.JS, own, 70)
	queue(t, n.JS, free, 70)

	rows := collect(t, n.JS, slow, fast, own, free)
	if got, want := rows["slow"].Hint, "backlog of 70 s at its rate: consider --lane dedicated"; got != want {
		t.Errorf("slow: hint %q, want %q", got, want)
	}
	// The detail counts the parked ones too.
	d, err := Describe(testutil.Context(t), n.JS, slow, testLanes)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := d.Hint, "backlog of 90 s at its rate: consider --lane dedicated"; got != want {
		t.Errorf("slow in detail: hint %q, want %q", got, want)
	}
	for _, id := range []string{"fast", "own", "free"} {
		if h := rows[id].Hint; h != "" {
			t.Errorf("%s: hint %q, want none", id, h)
		}
	}
	if rows["own"].Lane != "d_own" || !rows["own"].Dedicated {
		t.Errorf("own: lane %q dedicated %v", rows["own"].Lane, rows["own"].Dedicated)
	}
}

func TestCollectLaneInFlightIsSharedByLaneMates(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	ctx := testutil.Context(t)
	a, b := laneMates(t)
	subA, subB, other := limited(a, 0), limited(b, 0), limited("other", 0)
	for subscribers.LaneFor(other.ID, testLanes) == subA.Lane(testLanes) {
		other.ID += "x"
	}
	queue(t, n.JS, subA, 2)
	queue(t, n.JS, subB, 1)
	queue(t, n.JS, other, 1)

	lane := subA.Lane(testLanes)
	c, err := n.JS.CreateConsumer(ctx, streams.Deliveries, jetstream.ConsumerConfig{
		Durable:       streams.LaneConsumer(lane),
		FilterSubject: "deliveries." + lane + ".>",
		AckPolicy:     jetstream.AckExplicitPolicy,
	})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := c.FetchNoWait(10)
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for range batch.Messages() {
		got++ // fetched and never acked: outstanding on the lane
	}
	if got != 3 {
		t.Fatalf("fetched %d messages from lane %s, want 3", got, lane)
	}

	rows := collect(t, n.JS, subA, subB, other)
	if rows[a].LaneInFlight != 3 || rows[b].LaneInFlight != 3 {
		t.Errorf("lane-mates %s and %s: in flight %d and %d, want the lane's 3 each", a, b, rows[a].LaneInFlight, rows[b].LaneInFlight)
	}
	if rows[other.ID].LaneInFlight != 0 {
		t.Errorf("%s on a lane without a consumer: in flight %d, want 0", other.ID, rows[other.ID].LaneInFlight)
	}
}

func TestFormatAge(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{-time.Second, "0s"},
		{0, "0s"},
		{250*time.Millisecond + 300*time.Microsecond, "250ms"},
		{90*time.Second + 400*time.Millisecond, "1m30s"},
		{2 * time.Hour, "2h0m0s"},
	} {
		if got := formatAge(tc.d); got != tc.want {
			t.Errorf("formatAge(%v) = %q, want %q", tc.d, got, tc.want)
		}
	}
}

// An operator's pause is the subscriber's state, with the time it ends by
// itself if it has one; a pause already over is no pause, and disabled wins.
func TestCollectShowsAnOperatorsPause(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	until := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	held, timed, over, both := limited("held", 1), limited("timed", 1), limited("over", 1), limited("both", 1)
	held.Paused = true
	timed.Paused, timed.PausedUntil = true, until
	over.Paused, over.PausedUntil = true, time.Now().Add(-time.Hour)
	both.Paused, both.Disabled = true, true
	report, err := Collect(testutil.Context(t), n.JS, []subscribers.Subscriber{held, timed, over, both}, testLanes)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Subscriber{}
	for _, r := range report.Subscribers {
		got[r.ID] = r
	}
	if r := got["held"]; r.State != Paused || r.PauseReason != ByOperator || !r.ResumesAt.IsZero() {
		t.Errorf("held: state %q resumes at %v, want paused until resume", r.State, r.ResumesAt)
	}
	if r := got["timed"]; r.State != Paused || !r.ResumesAt.Equal(until) || r.ResumesAt.Location() != time.UTC {
		t.Errorf("timed: state %q resumes at %v, want paused until %v", r.State, r.ResumesAt, until)
	}
	if r := got["over"]; r.State != Enabled || r.PauseReason != "" || !r.ResumesAt.IsZero() {
		t.Errorf("over: state %q resumes at %v, want enabled", r.State, r.ResumesAt)
	}
	if r := got["both"]; r.State != Disabled {
		t.Errorf("both: state %q, want disabled", r.State)
	}
	raw, err := json.Marshal(got["timed"])
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), `"state":"paused"`) || !strings.Contains(string(raw), `"resumes_at":"`+until.Format(time.RFC3339)+`"`) {
		t.Errorf("JSON %s", raw)
	}
}

func TestCollectHintsAtABacklogAtItsBound(t *testing.T) {
	t.Parallel()
	n := testutil.StartRelayNATS(t)
	full, under := limited("full", 0), limited("under", 0)
	full.MaxBacklog, under.MaxBacklog = 30, 31
	queue(t, n.JS, full, 30)
	queue(t, n.JS, under, 30)
	rows := collect(t, n.JS, full, under)
	want := "30 deliveries wait, its --max-backlog is 30: new copies are dead-lettered as backlog (relay dlq replay --subscriber full --reason backlog once it recovers)"
	if got := rows["full"].Hint; got != want {
		t.Errorf("full: hint %q, want %q", got, want)
	}
	if h := rows["under"].Hint; h != "" {
		t.Errorf("under: hint %q, want none", h)
	}
	if rows["full"].MaxBacklog != 30 || rows["under"].MaxBacklog != 31 {
		t.Errorf("max backlog %d and %d, want 30 and 31", rows["full"].MaxBacklog, rows["under"].MaxBacklog)
	}
}

// TestHintAboutLanesOnlyForABacklogItsRateMakes: the advice of a lane of
// its own is for a backlog its rate makes; the backlog of an open circuit
// gets the way to close it, and that of a pause or a disabled subscriber
// no advice about lanes.
func TestHintAboutLanesOnlyForABacklogItsRateMakes(t *testing.T) {
	t.Parallel()
	base := Subscriber{ID: "slow", State: Enabled, Pending: 700, Rate: 10, Circuit: ratelimit.Closed}
	for _, tt := range []struct {
		name   string
		change func(*Subscriber)
		want   string
	}{
		{"its rate", func(*Subscriber) {}, "backlog of 70 s at its rate: consider --lane dedicated"},
		{"an open circuit", func(r *Subscriber) { r.Circuit = ratelimit.Open },
			"its circuit is open: once its receiver answers (relay sub test slow), relay sub resume slow closes it"},
		{"a half-open circuit", func(r *Subscriber) { r.Circuit = ratelimit.HalfOpen },
			"its circuit is half-open: once its receiver answers (relay sub test slow), relay sub resume slow closes it"},
		{"a Retry-After pause", func(r *Subscriber) { r.State, r.PauseReason = Paused, ByRetryAfter }, ""},
		{"an operator's pause", func(r *Subscriber) { r.State, r.PauseReason = Paused, ByOperator }, ""},
		{"disabled", func(r *Subscriber) { r.State = Disabled }, "disabled: new events are not copied to it; what waits is held until relay sub enable slow"},
	} {
		row := base
		tt.change(&row)
		if got := hint(row); got != tt.want {
			t.Errorf("%s: hint %q, want %q", tt.name, got, tt.want)
		}
	}
}
