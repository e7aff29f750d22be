package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/relay-dev/relay/internal/attempts"
	"github.com/relay-dev/relay/streams"
)

// traceTimeout bounds relay trace's reads: one message get per record.
const traceTimeout = 30 * time.Second

func newTraceCmd(conn *connFlags) *cobra.Command {
	var asJSON, filtered bool
	cmd := &cobra.Command{
		Use:   "trace EVENT_ID",
		Short: "Show what became of one event: each subscriber's attempts and where its delivery is now",
		Long: `Shows, for each subscriber event EVENT_ID (its Nats-Msg-Id, or EVENTS-<seq>)
was fanned out to, every attempt to deliver it (when, from which relay, the
status or error, how long it took, what it led to) and where the delivery is
now: delivered; waiting for a retry until a time, and after what; queued (not
attempted yet); in its overflow; scheduled until its Relay-Deliver-At; or dead,
with its reason and DLQ sequence (relay dlq show SEQ).

It reads the stream ATTEMPTS, where relay run records each fan-out (but one to
a single subscriber's lane, which its attempts tell) and each attempt (relay
run --record-attempts, on by default), and only that event's records.
ATTEMPTS keeps them 72 hours (relay run --attempts-max-age), within its size:
an older event has no trace. Exits 1 when there is none.`,
		Example: `  relay trace order-1042
  relay trace order-1042 --filtered     # also the subscribers a content filter skipped
  relay trace order-1042 --json | jq '.deliveries[] | {subscriber, state}'`,
		Args: exactArgs(1, "an event id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withJetStreamFor(cmd.Context(), conn, "relay trace", traceTimeout, func(ctx context.Context, js jetstream.JetStream) error {
				t, err := attempts.Read(ctx, js, args[0])
				err = attempts.Explain(err, args[0])
				if err != nil {
					return err
				}
				if !filtered {
					t.Filtered = nil
				}
				if asJSON {
					return writeJSON(cmd.OutOrStdout(), t)
				}
				return printTrace(cmd.OutOrStdout(), t, time.Now())
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().BoolVar(&filtered, "filtered", false, "also list the subscribers whose content filter (--filter) skipped the event")
	return cmd
}

// printTrace writes a trace as relay trace shows it: the event, each
// subscriber's state, then every attempt.
func printTrace(out io.Writer, t attempts.Trace, now time.Time) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "event\t%s\n", cell(t.Event, 0))
	fmt.Fprintf(tw, "type\t%s\n", cell(t.Type, 0))
	if !t.FannedOut.IsZero() {
		fmt.Fprintf(tw, "fanned out\t%s by %s, to %d subscribers\n", traceTime(t.FannedOut), cell(t.By, 0), len(t.Deliveries))
	} else if len(t.Deliveries) == 1 && len(t.Filtered) == 0 {
		fmt.Fprintf(tw, "fanned out\t- (no fan-out record: none is written for an event that went to one subscriber's lane)\n")
	} else {
		fmt.Fprintf(tw, "fanned out\t- (no record of its fan-out: lost, or older than %s keeps)\n", streams.Attempts)
	}
	if t.Truncated {
		fmt.Fprintf(tw, "note\tmore records than one trace reads: the newest are left out\n")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(out)
	tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SUBSCRIBER\tSTATE\tSINCE\tDETAIL")
	for _, d := range t.Deliveries {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", d.Subscriber, d.State, traceTime(d.At), cell(traceDetail(d, now), 0))
	}
	for _, id := range t.Filtered {
		fmt.Fprintf(tw, "%s\tfiltered\t-\tits content filter did not match\n", id)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(out)
	tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SUBSCRIBER\tATTEMPT\tAT\tRELAY\tRESULT\tTOOK\tTHEN")
	n := 0
	for _, d := range t.Deliveries {
		for _, r := range d.Attempts {
			n++
			attempt, took, result := "-", "-", cell(r.Error, 0)
			if r.Attempt > 0 {
				attempt, took, result = strconv.Itoa(r.Attempt), fmt.Sprintf("%dms", r.Millis), attempts.Result(r)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", d.Subscriber, attempt, traceTime(r.At), cell(r.Relay, 0),
				cell(result, 0), took, traceThen(r))
		}
	}
	if n == 0 {
		fmt.Fprintln(tw, "(no attempt yet)")
	}
	return tw.Flush()
}

// traceDetail says more of a delivery's state: when a wait ends, why it
// waits or died, its dead letter.
func traceDetail(d attempts.Delivery, now time.Time) string {
	switch d.State {
	case attempts.StateDelivered:
		if n := len(d.Attempts); n > 0 {
			return fmt.Sprintf("at attempt %d", d.Attempts[n-1].Attempt)
		}
		return ""
	case attempts.StateWaiting, attempts.StateScheduled:
		if !d.Until.After(now) {
			return fmt.Sprintf("due since %s (%s): back on its lane", traceTime(d.Until), d.Why)
		}
		return fmt.Sprintf("until %s (%s)", traceTime(d.Until), d.Why)
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
func traceThen(r attempts.Record) string {
	switch r.Outcome {
	case attempts.Retry:
		return "retry at " + traceTime(r.Next)
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
