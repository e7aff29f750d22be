package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/relay-dev/relay/internal/attempts"
	"github.com/relay-dev/relay/internal/deliver"
	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/streams"
)

// traceTimeout bounds relay trace's reads: one message get per record.
const traceTimeout = 30 * time.Second

func newTraceCmd(conn *connFlags) *cobra.Command {
	var asJSON, filtered, wide bool
	cmd := &cobra.Command{
		Use:   "trace EVENT_ID",
		Short: "Show what became of one event: each subscriber's attempts and where its copy is now",
		Long: `Shows, for each subscriber event EVENT_ID (its Nats-Msg-Id, or EVENTS-<seq>,
or the webhook-id its receivers saw, order~2E42~2Ecreated for order.42.created) was fanned out to, every attempt to deliver it (when, from which relay, the
status or error, how long it took, what it led to) and where the delivery is
now: delivered; waiting for a retry until a time, and after what; queued (not
attempted yet); in its overflow; scheduled until its Relay-Deliver-At; or dead,
with its reason and DLQ sequence (relay dlq show SEQ).

It reads the stream ATTEMPTS, where relay run records each fan-out (but one to
a single subscriber's lane, which its attempts tell) and each attempt (relay
run --record-attempts, on by default), and only that event's records.
ATTEMPTS keeps them 72 hours (relay run --attempts-max-age), within its size:
an older event has no trace. Nor has an event not fanned out yet, one that
matched no subscriber, one queued for a first attempt on the lane of its one
subscriber (relay status --subscriber ID shows its queue), or one handled by
relays run with --record-attempts=false. Exits 1 when there is none.`,
		Example: `  relay trace order-1042
  relay trace order-1042 --filtered     # also the subscribers a content filter skipped
  relay trace order-1042 --json | jq '.deliveries[] | {subscriber, state}'`,
		Args: exactArgs(1, "an event id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withJetStreamFor(cmd.Context(), conn, "relay trace", traceTimeout, func(ctx context.Context, js jetstream.JetStream) error {
				t, err := attempts.Find(ctx, js, args[0])
				err = attempts.Explain(err, args[0])
				if err != nil {
					return err
				}
				if !filtered {
					t.Filtered = nil
				}
				subscriberStates(ctx, conn, js, &t, time.Now())
				if asJSON {
					return writeJSON(cmd.OutOrStdout(), t)
				}
				return printTrace(cmd.OutOrStdout(), t, time.Now(), wide)
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().BoolVar(&wide, "wide", false, "print every column (relay, duration) and times in full, whatever the width")
	cmd.Flags().BoolVar(&filtered, "filtered", false, "also list the subscribers whose content filter (--filter) skipped the event")
	return cmd
}

// printTrace writes a trace as relay trace shows it: the event, each
// subscriber's state, then every attempt; within 100 columns unless wide,
// its times to the second and an attempt's result cut to its end.
func printTrace(out io.Writer, t attempts.Trace, now time.Time, wide bool) error {
	when := shortTime
	if wide {
		when = traceTime
	}
	tw := &table{wide: wide, fit: wrap}
	tw.add("event", cell(t.Event, 0))
	if w := deliver.WebhookID(t.Event); w != t.Event {
		tw.add("webhook-id", w)
	}
	tw.add("type", cell(t.Type, 0))
	if !t.FannedOut.IsZero() {
		tw.add("fanned out", fmt.Sprintf("%s by %s, to %d subscribers", traceTime(t.FannedOut), cell(t.By, 0), len(t.Deliveries)))
	} else if len(t.Deliveries) == 1 && len(t.Filtered) == 0 {
		tw.add("fanned out", "- (no fan-out record: none is written for an event that went to one subscriber's lane)")
	} else {
		tw.add("fanned out", fmt.Sprintf("- (no record of its fan-out: lost, or older than %s keeps)", streams.Attempts))
	}
	if t.Truncated {
		tw.add("note", "more records than one trace reads: the newest are left out")
	}
	if err := tw.flush(out); err != nil {
		return err
	}
	fmt.Fprintln(out)
	tw = &table{wide: wide, fit: wrap}
	since := "SINCE"
	if !wide {
		since = "SINCE (UTC)"
	}
	tw.add("SUBSCRIBER", "STATE", since, "DETAIL")
	for _, d := range t.Deliveries {
		tw.add(d.Subscriber, string(d.State), when(d.At), cell(traceDetail(d, now, when), 0))
	}
	for _, id := range t.Filtered {
		tw.add(id, "filtered", "-", "its content filter did not match")
	}
	for _, id := range t.Disabled {
		tw.add(id, "disabled", "-", "not copied: it was disabled (a disabled subscriber gets no copy of what is published meanwhile)")
	}
	if err := tw.flush(out); err != nil {
		return err
	}
	fmt.Fprintln(out)
	tw = &table{wide: wide, fit: keepEnd}
	if wide {
		tw.add("SUBSCRIBER", "ATTEMPT", "AT", "RELAY", "RESULT", "TOOK", "THEN")
	} else {
		tw.add("SUBSCRIBER", "ATTEMPT", "AT (UTC)", "TOOK", "THEN", "RESULT")
	}
	n := 0
	for _, d := range t.Deliveries {
		for _, r := range d.Attempts {
			n++
			attempt, took, result := "-", "-", cell(r.Error, 0)
			if r.Attempt > 0 {
				attempt, took, result = strconv.Itoa(r.Attempt), fmt.Sprintf("%dms", r.Millis), cell(attempts.Result(r), 0)
			}
			if wide {
				tw.add(d.Subscriber, attempt, traceTime(r.At), cell(r.Relay, 0), result, took, traceThen(r, traceTime))
			} else {
				tw.add(d.Subscriber, attempt, shortTime(r.At), took, traceThen(r, shortTime), result)
			}
		}
	}
	if n == 0 {
		_, err := fmt.Fprintln(out, "(no attempt yet)")
		return err
	}
	return tw.flush(out)
}

// traceGetsAtMost is how many waiting deliveries a trace looks up one
// subscriber at a time; past it, one read of every subscriber serves them.
const traceGetsAtMost = 4

// subscriberStates says, of each delivery of t that still waits, what its
// subscriber's state now holds it for: removed with relay sub rm (its
// deliveries are dropped), disabled or paused by an operator. Only what
// the bucket tells: a trace made without access to it stays as its
// records say.
func subscriberStates(ctx context.Context, conn *connFlags, js jetstream.JetStream, t *attempts.Trace, now time.Time) {
	store, err := conn.openStore(ctx, js)
	if err != nil {
		return
	}
	var waiting []*attempts.Delivery
	for i := range t.Deliveries {
		switch t.Deliveries[i].State {
		case attempts.StateQueued, attempts.StateOverflow, attempts.StateWaiting, attempts.StateScheduled:
			waiting = append(waiting, &t.Deliveries[i])
		}
	}
	get := store.Get
	if len(waiting) > traceGetsAtMost {
		// A broad fan-out: one read of every subscriber rather than one
		// request each, one after the other.
		subs, err := store.List(ctx)
		if err != nil && !errors.Is(err, subscribers.ErrCorrupt) {
			return
		}
		byID := make(map[string]subscribers.Subscriber, len(subs))
		for _, sub := range subs {
			byID[sub.ID] = sub
		}
		get = func(ctx context.Context, id string) (subscribers.Subscriber, error) {
			if sub, ok := byID[id]; ok {
				return sub, nil
			}
			return store.Get(ctx, id) // not found, or a value List left out
		}
	}
	for _, d := range waiting {
		sub, err := get(ctx, d.Subscriber)
		switch {
		case errors.Is(err, subscribers.ErrNotFound):
			if removed, err := store.Removed(ctx, d.Subscriber); err == nil && removed {
				d.State, d.Until, d.Why = attempts.StateRemoved, time.Time{}, "its subscriber was removed (relay sub rm): dropped, not dead-lettered"
			}
		case err != nil, sub.SealedWith() != "":
			// Unknown, or held for a key not given: relay status says so.
		case sub.Disabled:
			d.Why += "; its subscriber is disabled: held until relay sub enable " + d.Subscriber
		case sub.PausedAt(now):
			d.Why += "; its subscriber is paused: held until relay sub resume " + d.Subscriber
		}
	}
}

// traceDetail says more of a delivery's state: when a wait ends, why it
// waits or died, its dead letter.
func traceDetail(d attempts.Delivery, now time.Time, when func(time.Time) string) string {
	switch d.State {
	case attempts.StateDelivered:
		if n := len(d.Attempts); n > 0 {
			return fmt.Sprintf("at attempt %d", d.Attempts[n-1].Attempt)
		}
		return ""
	case attempts.StateWaiting, attempts.StateScheduled:
		if !d.Until.After(now) {
			return fmt.Sprintf("due since %s (%s): back on its lane", when(d.Until), d.Why)
		}
		return fmt.Sprintf("until %s (%s)", when(d.Until), d.Why)
	case attempts.StateDead:
		s := d.Reason
		if d.Why != "" {
			s += ", " + d.Why
		}
		if d.DLQSeq != 0 {
			s += fmt.Sprintf(" (relay dlq show %d)", d.DLQSeq)
		}
		return s
	case attempts.StateQueued, attempts.StateOverflow:
		return d.Why + " (relay status --subscriber " + d.Subscriber + " shows a pause or an open circuit)"
	}
	return d.Why
}

// traceThen says what an attempt led to.
func traceThen(r attempts.Record, when func(time.Time) string) string {
	switch r.Outcome {
	case attempts.Retry:
		return "retry at " + when(r.Next)
	case attempts.Dead:
		if r.DLQSeq != 0 {
			return fmt.Sprintf("dead: %s (DLQ %d)", r.Reason, r.DLQSeq)
		}
		return "dead: " + r.Reason
	}
	return string(r.Outcome)
}

func traceTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z")
}
