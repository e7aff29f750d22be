package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/relay-dev/relay/internal/status"
	"github.com/relay-dev/relay/internal/subscribers"
)

func newStatusCmd(conn *connFlags) *cobra.Command {
	var (
		asJSON      bool
		sharedLanes int
	)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show each subscriber's queue, rate, pause and circuit",
		Long: `Shows, for every subscriber sorted by id, what NATS holds for it right now:

  STATE           enabled, paused (relay sub pause; "paused until <time>" with --until)
                  or disabled (relay sub disable, or a 410 Gone)
  PENDING         deliveries queued in DELIVERIES (deliveries.*.<id>), held or on the wire
  PARKED          deliveries waiting in RETRIES for a retry or the end of a pause
  LANE_IN_FLIGHT  messages its lane's consumer has handed out and not had acked; JetStream
                  counts them per consumer, not per subject, so on a shared lane the
                  figure is the whole lane's, shared with its lane-mates
  DEAD            dead letters in DLQ (see relay dlq ls)
  RATE            the configured rate, and the rate in force (lower after 429s)
  TOKENS          what its token bucket holds now
  PAUSED_UNTIL    the end of the subscriber's own Retry-After pause, when one is running
  CIRCUIT         closed, open (cooling down after failures) or half-open (one probe)
  OLDEST          age of its oldest pending delivery

Times are the NATS server's; --json gives them in RFC 3339, UTC. A subscriber on a
shared lane whose pending and parked deliveries would take more than ` + fmt.Sprintf("%.0f s", status.HintBacklog.Seconds()) + ` to send
at its rate gets a hint to move to a dedicated lane. --lanes must be relay run's
--lanes, which decides each subscriber's shared lane.`,
		Example: `  relay status
  relay status --json | jq '.[] | select(.pending > 0)'`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if sharedLanes < 1 || sharedLanes > maxSharedLanes {
				return usagef("--lanes: must be between 1 and %d, got %d", maxSharedLanes, sharedLanes)
			}
			return withStore(cmd.Context(), conn, "relay status", func(ctx context.Context, js jetstream.JetStream, s *subscribers.Store) error {
				subs, listErr := s.List(ctx)
				if listErr != nil && !errors.Is(listErr, subscribers.ErrCorrupt) {
					return listErr
				}
				rows, err := status.Collect(ctx, js, subs, sharedLanes)
				if err != nil {
					return err
				}
				if err := printStatus(cmd, rows, asJSON); err != nil {
					return err
				}
				// Subscribers whose stored value is unreadable are left out
				// of the report; the error names them, and the exit code
				// says the report is incomplete.
				return listErr
			})
		},
	}
	f := cmd.Flags()
	f.BoolVar(&asJSON, "json", false, "print a JSON array")
	f.IntVar(&sharedLanes, "lanes", 16, fmt.Sprintf("number of shared lanes relay run uses (1-%d)", maxSharedLanes))
	return cmd
}

func printStatus(cmd *cobra.Command, rows []status.Subscriber, asJSON bool) error {
	out := cmd.OutOrStdout()
	err := printList(out, rows, asJSON, noSubscribers,
		"SUBSCRIBER\tSTATE\tLANE\tPENDING\tPARKED\tLANE_IN_FLIGHT\tDEAD\tRATE\tTOKENS\tPAUSED_UNTIL\tCIRCUIT\tFAILURES\tOLDEST",
		func(r status.Subscriber) string {
			return fmt.Sprintf("%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%d\t%s",
				r.ID, cell(statusState(r), 0), r.Lane, r.Pending, r.Parked, r.LaneInFlight, r.Dead,
				statusRate(r), statusTokens(r), statusTime(r.PausedUntil), r.Circuit, r.Failures, cell(r.OldestPendingAge, 0))
		})
	if err != nil || asJSON {
		return err
	}
	printed := false
	for _, r := range rows {
		if r.Hint == "" {
			continue
		}
		if !printed {
			fmt.Fprintln(out)
			printed = true
		}
		fmt.Fprintf(out, "hint: %s: %s\n", r.ID, r.Hint)
	}
	return nil
}

func statusState(r status.Subscriber) string {
	switch {
	case r.DisabledReason != "":
		return r.State + " (" + r.DisabledReason + ")"
	case !r.ResumesAt.IsZero():
		return r.State + " until " + statusTime(r.ResumesAt)
	}
	return r.State
}

// statusRate shows the configured rate, and the rate in force when the
// adaptive rate has lowered it.
func statusRate(r status.Subscriber) string {
	if r.Rate <= 0 {
		return "unlimited"
	}
	s := strconv.FormatFloat(r.Rate, 'g', -1, 64) + "/s"
	if r.EffectiveRate < r.Rate {
		s += " (now " + strconv.FormatFloat(r.EffectiveRate, 'g', 4, 64) + "/s)"
	}
	return s
}

func statusTokens(r status.Subscriber) string {
	if r.Tokens == nil {
		return "-"
	}
	return fmt.Sprintf("%.1f/%d", *r.Tokens, r.Burst)
}

func statusTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}
