package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/relay-dev/relay/internal/attempts"
	"github.com/relay-dev/relay/internal/lanes"
	"github.com/relay-dev/relay/internal/status"
	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/streams"
)

// Defaults and bounds of relay status --watch.
const (
	// defaultWatchInterval redraws often enough to follow a backlog
	// draining, rarely enough that a report of thousands of subscribers
	// (about a second's reads at 10,000) is not redone back to back.
	defaultWatchInterval = 2 * time.Second
	// minWatchInterval keeps a mistyped --interval (1ms for 1s) from
	// turning the report into a load on the cluster.
	minWatchInterval = 100 * time.Millisecond
)

// clearScreen moves the cursor home and clears the terminal, so that each
// frame of --watch is drawn in place.
const clearScreen = "\033[H\033[2J"

// statusFlags are relay status's own flags.
type statusFlags struct {
	asJSON      bool
	wide        bool
	sharedLanes int
	watch       bool
	interval    time.Duration
	subscriber  string
	streams     bool
	// limit and page cut the report's rows in pages (--limit, --page);
	// paged says whether --json is paged too (either flag given).
	limit, page int
	paged       bool
}

// validate checks the flags before anything connects, so that a bad one
// exits 2 with a message naming it.
func (f statusFlags) validate(cmd *cobra.Command) error {
	if cmd.Flags().Changed("lanes") && (f.sharedLanes < 1 || f.sharedLanes > maxSharedLanes) {
		return usagef("--lanes: must be between 1 and %d, got %d", maxSharedLanes, f.sharedLanes)
	}
	if cmd.Flags().Changed("interval") {
		if !f.watch {
			return usagef("--interval: only with --watch, which it paces")
		}
		if f.interval < minWatchInterval {
			return usagef("--interval: must be at least %s, got %s", minWatchInterval, f.interval)
		}
	}
	if f.limit < 0 {
		return usagef("--limit: must be 0 (every subscriber) or more, got %d", f.limit)
	}
	if f.page < 1 {
		return usagef("--page: must be 1 or more, got %d", f.page)
	}
	if (cmd.Flags().Changed("limit") || cmd.Flags().Changed("page")) && (cmd.Flags().Changed("subscriber") || f.streams) {
		return usagef("--limit, --page: only for the report of every subscriber, not with --subscriber or --streams")
	}
	if cmd.Flags().Changed("subscriber") {
		if err := subscribers.ValidateID(f.subscriber); err != nil {
			return usagef("--subscriber: %w", err)
		}
		if f.streams {
			return usagef("--streams: not with --subscriber; each shows a report of its own")
		}
	}
	return nil
}

func newStatusCmd(conn *connFlags) *cobra.Command {
	var f statusFlags
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show each subscriber's queue, rate, pause and circuit",
		Long: `Shows what NATS holds for every subscriber right now, sorted by id, under a
summary line (subscribers by state, open circuits, pending, parked, scheduled
and dead messages, the share of deliveries that met their deadline, and the
oldest queue):

  STATE           enabled, disabled (relay sub disable, or a 410 Gone), or paused:
                  by an operator (relay sub pause; "paused until <time>" with --until)
                  or by the subscriber's own Retry-After ("paused by Retry-After until")
  PENDING         deliveries in DELIVERIES, held or on the wire: on its lane subject
                  (deliveries.<lane>.<id>), and OVERFLOW, its backlog waiting on
                  deliveries.overflow.<id>
  LANE_IN_FLIGHT  messages its lane's consumer has handed out and not had acked; JetStream
                  counts them per consumer, not per subject, so on a shared lane the
                  figure is the whole lane's, shared with its lane-mates
  DEAD            dead letters in DLQ (see relay dlq ls), and DEAD_BY_REASON
  IN_TIME         of its deliveries with a Relay-Deadline, the share accepted before
                  it, against those dead-lettered as deadline or expired, summed over
                  every relay (met and missed in --json); "-" when none had a deadline
  RATE            the configured rate, and the rate in force (lower after 429s)
  TOKENS          what its token bucket holds now
  PAUSED_UNTIL    the end of the subscriber's own Retry-After pause, when one is running
  CIRCUIT         closed, open (cooling down after failures) or half-open (one probe)
  OLDEST          age of its oldest pending delivery

The table shows --limit subscribers (default ` + strconv.Itoa(status.DefaultPageSize) + `) from --page 1, under the
summary of all of them, and says how to see the others; --json gives every
subscriber unless --limit or --page is given.

Under the table, each relay stream (EVENTS, DELIVERIES, RETRIES, DLQ): the
messages and bytes it holds against its max_msgs and max_bytes (relay keeps
the limits an operator set), the share of max_bytes used, and its max age. A
DELIVERIES near its max_bytes makes the fan-out wait. --streams shows them
alone (with --json, a JSON array of them).

Deliveries parked in RETRIES for a retry, and those scheduled there until
their Relay-Deliver-At, are counted in all in the summary, apart; each waits
on a subject of its own, which the server can count for one subscriber at a
time only, so --subscriber ID counts a subscriber's.

Everything is read from NATS (stream and consumer infos, the relay_ratelimit
and relay_timeliness buckets), never from a relay, and nothing is written: it
shows the same on any cluster, with or without a relay running. Times are the
NATS server's; --json gives them in RFC 3339, UTC.

--subscriber ID shows one subscriber in detail: its parked and scheduled
deliveries, and its last ` + strconv.Itoa(status.LastErrors) + ` dead letters' status and error. --watch redraws the
report every --interval (default ` + defaultWatchInterval.String() + `) until Ctrl-C; when stdout is not
a terminal it prints one report after another (with --json, one JSON value
each).

A subscriber whose pending deliveries (and, in the detail, parked ones) reach
its --max-backlog gets a hint: its new copies are being dead-lettered as
backlog. One on a shared lane whose pending deliveries would take more than
` + fmt.Sprintf("%.0f s", status.HintBacklog.Seconds()) + ` to send at its rate gets a hint to move to a dedicated lane. --lanes is relay run's --lanes, which decides each subscriber's
shared lane; not given, it is read from the lane consumers on DELIVERIES.`,
		Example: `  relay status
  relay status --page 2 --limit 500
  relay status --json | jq '.[] | select(.pending > 0)'
  relay status --streams --json | jq '.[] | select(.used > 0.8)'
  relay status --subscriber demo
  relay status --watch --interval 5s`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.validate(cmd); err != nil {
				return err
			}
			f.paged = cmd.Flags().Changed("limit") || cmd.Flags().Changed("page")
			return withStore(cmd.Context(), conn, "relay status", func(ctx context.Context, js jetstream.JetStream, s *subscribers.Store) error {
				if !cmd.Flags().Changed("lanes") {
					n, err := statusLanes(ctx, js)
					if err != nil {
						return err
					}
					f.sharedLanes = n
				}
				frame := func(ctx context.Context, out io.Writer) error {
					if f.subscriber != "" {
						return statusDetail(ctx, out, js, s, f)
					}
					if f.streams {
						return statusStreams(ctx, out, js, f.asJSON)
					}
					return statusReport(ctx, out, js, s, f)
				}
				if !f.watch {
					return frame(ctx, cmd.OutOrStdout())
				}
				return watch(ctx, cmd.OutOrStdout(), cmd.ErrOrStderr(), f, frame)
			})
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&f.asJSON, "json", false, "print a JSON array (with --subscriber, one JSON object)")
	fl.BoolVar(&f.wide, "wide", false, "print every column (lane, overflow, tokens, failures, dead letters by reason) in full, whatever the width")
	fl.IntVar(&f.sharedLanes, "lanes", 0, fmt.Sprintf("number of shared lanes relay run uses (1-%d); default: what the lane consumers on DELIVERIES show (16 before any relay ran)", maxSharedLanes))
	fl.BoolVar(&f.watch, "watch", false, "redraw the report every --interval until Ctrl-C")
	fl.DurationVar(&f.interval, "interval", defaultWatchInterval, fmt.Sprintf("time between two reports of --watch (at least %s)", minWatchInterval))
	fl.StringVar(&f.subscriber, "subscriber", "", "show this subscriber alone, in detail, with its last dead letters")
	fl.IntVar(&f.limit, "limit", status.DefaultPageSize, "subscribers a page of the table (0: every one); with --json only when given, else every subscriber")
	fl.IntVar(&f.page, "page", 1, "which page of --limit subscribers to show, from 1")
	fl.BoolVar(&f.streams, "streams", false, "show the relay streams alone: messages and bytes against their limits (with --json, a JSON array)")
	return cmd
}

// statusLanes is the number of shared lanes the relays use, as their lane
// consumers on DELIVERIES show it; before any relay ran, relay run's default,
// which is what the first relay will use unless told otherwise.
func statusLanes(ctx context.Context, js jetstream.JetStream) (int, error) {
	n, err := lanes.SharedLanes(ctx, js)
	if errors.Is(err, lanes.ErrNoLanes) {
		return defaultSharedLanes, nil
	}
	return n, err
}

// statusReport prints the report of every subscriber.
func statusReport(ctx context.Context, out io.Writer, js jetstream.JetStream, s *subscribers.Store, f statusFlags) error {
	subs, listErr := s.List(ctx)
	if listErr != nil && !errors.Is(listErr, subscribers.ErrCorrupt) {
		return listErr
	}
	report, err := status.Collect(ctx, js, subs, f.sharedLanes)
	if err != nil {
		return err
	}
	limit := f.limit
	if f.asJSON && !f.paged {
		limit = 0
	}
	if err := printStatus(out, report, status.Paged(report.Subscribers, limit, f.page), f.asJSON, f.wide, time.Now()); err != nil {
		return err
	}
	if !f.asJSON {
		if _, err := fmt.Fprintln(out); err != nil {
			return err
		}
		if err := printStreams(out, report.Streams); err != nil {
			return err
		}
	}
	// Subscribers whose stored value is unreadable are left out of the
	// report; the error names them, and the exit code says the report is
	// incomplete.
	return listErr
}

// statusStreams prints the streams' use of --streams.
func statusStreams(ctx context.Context, out io.Writer, js jetstream.JetStream, asJSON bool) error {
	use, err := status.Streams(ctx, js)
	if err != nil {
		return err
	}
	if asJSON {
		return writeJSON(out, use)
	}
	return printStreams(out, use)
}

// printStreams prints the streams' use as a table: what each holds
// against its limits, the share of max_bytes used, its max age.
func printStreams(out io.Writer, use []status.Stream) error {
	return printList(out, use, false, false, "no relay streams",
		"STREAM\tMESSAGES\tMAX_MSGS\tBYTES\tMAX_BYTES\tUSED\tMAX_AGE\tWHEN_FULL",
		func(s status.Stream) string {
			used := "-"
			if s.Used != nil {
				used = strconv.FormatFloat(*s.Used*100, 'f', 1, 64) + "%"
			}
			maxMsgs := "unlimited"
			if s.MaxMessages > 0 {
				maxMsgs = strconv.FormatInt(s.MaxMessages, 10)
			}
			full := "drops oldest"
			if s.Discard == "new" {
				full = "refuses new"
			}
			return fmt.Sprintf("%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s", s.Name, s.Messages, maxMsgs,
				storedBytes(s.Bytes), streams.FormatBytes(s.MaxBytes), used, cell(s.MaxAge, 0), full)
		})
}

// storedBytes writes what a stream stores, "0 B" when empty (FormatBytes
// writes a limit, where 0 is unlimited).
func storedBytes(n uint64) string {
	if n == 0 {
		return "0 B"
	}
	return streams.FormatBytes(int64(min(n, math.MaxInt64)))
}

// statusDetail prints the detail of --subscriber.
func statusDetail(ctx context.Context, out io.Writer, js jetstream.JetStream, s *subscribers.Store, f statusFlags) error {
	sub, err := s.Get(ctx, f.subscriber)
	if errors.Is(err, subscribers.ErrNotFound) {
		return err
	}
	if err != nil {
		return fmt.Errorf("--subscriber %s: %w", f.subscriber, err)
	}
	d, err := status.Describe(ctx, js, sub, f.sharedLanes)
	if err != nil {
		return err
	}
	if f.asJSON {
		return writeJSON(out, d)
	}
	return printDetail(out, d, f.wide)
}

// watch prints a frame every f.interval until ctx ends (Ctrl-C), which is a
// success. On a terminal each frame replaces the last; elsewhere (a pipe, a
// file) frames follow one another, so that nothing but the frames is
// written. A frame that fails is reported on errOut and the watch goes on:
// a NATS server that restarts shows as a few errors, not the end of it.
func watch(ctx context.Context, out, errOut io.Writer, f statusFlags, frame func(context.Context, io.Writer) error) error {
	return watchTo(ctx, out, errOut, isTerminal(out), f, frame)
}

// watchTo is watch, told whether out is a terminal.
func watchTo(ctx context.Context, out, errOut io.Writer, term bool, f statusFlags, frame func(context.Context, io.Writer) error) error {
	tick := time.NewTicker(f.interval)
	defer tick.Stop()
	for {
		// Drawn into a buffer first, so that the screen is cleared only
		// when the next frame is ready and never shows half a report.
		var buf bytes.Buffer
		err := frame(ctx, &buf)
		if ctx.Err() != nil {
			return nil
		}
		if term {
			buf.WriteString("\nevery " + f.interval.String() + "; Ctrl-C to stop\n")
			if _, werr := io.WriteString(out, clearScreen); werr != nil {
				return werr
			}
		}
		if _, werr := out.Write(buf.Bytes()); werr != nil {
			return werr
		}
		if err != nil {
			fmt.Fprintf(errOut, "relay: %s\n", oneLine(err.Error()))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// isTerminal reports whether w is a terminal, where --watch may redraw.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// printStatus prints the report: with --json the rows alone, one JSON
// array as before the summary existed, so that scripts keep working; else
// the summary line, then the table: within 100 columns, the time a pause
// ends said once, as how long it has left; with wide every column, the
// time in PAUSED_UNTIL.
func printStatus(out io.Writer, report status.Report, page status.Page, asJSON, wide bool, now time.Time) error {
	rows := page.Rows
	if !asJSON && page.Total > 0 {
		summary := report.Summary.String()
		if wide {
			_, err := fmt.Fprintf(out, "%s\n\n", summary)
			if err != nil {
				return err
			}
		} else {
			if err := wrapLine(out, summary, 0); err != nil {
				return err
			}
			if _, err := fmt.Fprintln(out); err != nil {
				return err
			}
		}
	}
	var err error
	if wide {
		err = printList(out, rows, asJSON, true, noSubscribers,
			"SUBSCRIBER\tSTATE\tLANE\tPENDING\tOVERFLOW\tLANE_IN_FLIGHT\tDEAD\tIN_TIME\tRATE\tTOKENS\tPAUSED_UNTIL\tCIRCUIT\tFAILURES\tOLDEST\tDEAD_BY_REASON",
			func(r status.Subscriber) string {
				return fmt.Sprintf("%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s",
					r.ID, cell(statusStateWide(r), 0), r.Lane, r.Pending, r.Overflow, r.LaneInFlight, r.Dead, status.FormatInTime(r.Met, r.Missed),
					statusRate(r), statusTokens(r), statusTime(r.PausedUntil), r.Circuit, r.Failures, cell(r.OldestPendingAge, 0), deadReasons(r, "=", ","))
			})
	} else {
		err = printList(out, rows, asJSON, false, noSubscribers,
			"SUBSCRIBER\tSTATE\tPENDING\tDEAD\tIN_TIME\tRATE\tCIRCUIT\tOLDEST",
			func(r status.Subscriber) string {
				return fmt.Sprintf("%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s",
					cell(r.ID, 20), cell(statusStateShort(r, now), 36), r.Pending, r.Dead, status.FormatInTime(r.Met, r.Missed),
					cell(statusRate(r), 16), r.Circuit, cell(r.OldestPendingAge, 0))
			})
	}
	if err != nil || asJSON {
		return err
	}
	if len(rows) < page.Total {
		if err := printPageLine(out, page); err != nil {
			return err
		}
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
		hint := fmt.Sprintf("hint: %s: %s", r.ID, r.Hint)
		if wide {
			fmt.Fprintln(out, hint)
		} else if err := wrapLine(out, hint, 2); err != nil {
			return err
		}
	}
	return nil
}

// printPageLine says which subscribers a page of the table showed, and how
// to see the others.
func printPageLine(out io.Writer, page status.Page) error {
	number := page.Number
	if len(page.Rows) == 0 {
		_, err := fmt.Fprintf(out, "\nno subscribers on this page: %d subscribers on %d pages; --limit 0 shows every one\n", page.Total, page.Pages)
		return err
	}
	next := ""
	if number < page.Pages {
		next = fmt.Sprintf(" --page %d for the next,", number+1)
	}
	_, err := fmt.Fprintf(out, "\nsubscribers %d-%d of %d (page %d of %d):%s --limit 0 for every one\n",
		page.First, page.First+len(page.Rows)-1, page.Total, number, page.Pages, next)
	return err
}

// printDetail prints one subscriber's detail: a field a line, then its last
// dead letters as relay dlq ls shows them.
func printDetail(out io.Writer, d status.Detail, wide bool) error {
	r := d.Subscriber
	lane := r.Lane + " (shared)"
	if r.Dedicated {
		lane = r.Lane + " (dedicated)"
	}
	inFlight := fmt.Sprintf("%d on lane %s", r.LaneInFlight, r.Lane)
	if !r.Dedicated {
		inFlight += " (the whole lane's, shared with its lane-mates)"
	}
	oldest := "-"
	if r.OldestPendingAge != "" {
		oldest = r.OldestPendingAge + " (since " + statusTime(r.OldestPendingAt) + ")"
	}
	circuit := string(r.Circuit)
	if r.Failures > 0 {
		circuit += fmt.Sprintf(", opened after %d failures", r.Failures)
	}
	tw := &table{wide: wide, fit: wrap}
	for _, kv := range [][2]string{
		{"subscriber", r.ID},
		{"state", cell(statusState(r), 0)},
		{"lane", lane},
		{"pending", fmt.Sprintf("%d: %d queued on its lane, %d in its overflow", r.Pending, r.Queued, r.Overflow)},
		{"in flight", inFlight},
		{"parked", statusCount(r.Parked)},
		{"scheduled", statusCount(r.Scheduled)},
		{"max backlog", strconv.Itoa(r.MaxBacklog)},
		{"dead", statusDeadDetail(r)},
		{"in time", statusInTime(r)},
		{"rate", statusRate(r)},
		{"tokens", statusTokens(r)},
		{"paused until", statusTime(r.PausedUntil)},
		{"circuit", circuit},
		{"oldest pending", oldest},
	} {
		tw.add(kv[0], kv[1])
	}
	if r.Hint != "" {
		tw.add("hint", r.Hint)
	}
	if err := tw.flush(out); err != nil {
		return err
	}
	if err := printFailedAttempts(out, d.LastFailedAttempts, wide); err != nil {
		return err
	}
	if len(d.LastErrors) == 0 {
		_, err := fmt.Fprintln(out, "\nlast errors: none (no dead letters)")
		return err
	}
	fmt.Fprintf(out, "\nlast errors (its newest dead letters, newest first; relay dlq show SEQ for one):\n")
	p := newEntryPrinter(out, false, wide)
	for _, e := range d.LastErrors {
		if err := p.add(e); err != nil {
			return err
		}
	}
	return p.close()
}

// printFailedAttempts writes the last failed attempts section of relay
// status --subscriber: what each got (a 429 with its Retry-After, a 503, a
// timeout) and what it led to.
func printFailedAttempts(out io.Writer, recs []attempts.Record, wide bool) error {
	if len(recs) == 0 {
		_, err := fmt.Fprintln(out, "\nlast failed attempts: none recorded")
		return err
	}
	fmt.Fprintf(out, "\nlast failed attempts (newest first; relay trace EVENT_ID for one event's):\n")
	tw := &table{wide: wide, fit: keepEnd}
	if wide {
		tw.add("AT", "EVENT", "ATTEMPT", "RESULT", "THEN")
	} else {
		tw.add("AT (UTC)", "EVENT", "ATTEMPT", "THEN", "RESULT")
	}
	for _, r := range recs {
		attempt, result := "-", cell(r.Error, 0)
		if r.Attempt > 0 {
			attempt, result = strconv.Itoa(r.Attempt), cell(attempts.Result(r), 0)
		}
		if wide {
			tw.add(traceTime(r.At), cell(r.Event, 0), attempt, result, traceThen(r, traceTime))
		} else {
			tw.add(shortTime(r.At), cell(r.Event, 24), attempt, traceThen(r, shortTime), result)
		}
	}
	return tw.flush(out)
}

// statusDeadDetail shows the dead letters and their reasons: "3
// (max_attempts 2, rejected 1)".
func statusDeadDetail(r status.Subscriber) string {
	if r.Dead == 0 {
		return "0"
	}
	return fmt.Sprintf("%d (%s)", r.Dead, deadReasons(r, " ", ", "))
}

// statusCount shows a count of the detail that the overview does not make
// (parked, scheduled), "-" when it was not counted.
func statusCount(n *uint64) string {
	if n == nil {
		return "-"
	}
	return strconv.FormatUint(*n, 10)
}

// statusInTime shows the share of deliveries that met their deadline with
// the counts it comes from: "99.2% (1204 met, 10 missed)", or "-" when none
// had a deadline.
func statusInTime(r status.Subscriber) string {
	s := status.FormatInTime(r.Met, r.Missed)
	if r.Met+r.Missed == 0 {
		return s
	}
	return fmt.Sprintf("%s (%d met, %d missed)", s, r.Met, r.Missed)
}

// statusStateWide is statusState for the wide table, whose PAUSED_UNTIL
// column has the time a Retry-After pause ends: it is not said twice.
func statusStateWide(r status.Subscriber) string {
	if r.DisabledReason == "" && r.PauseReason == status.ByRetryAfter {
		return r.State + " by Retry-After"
	}
	return statusState(r)
}

// statusStateShort is the state as the table within 100 columns shows it:
// a pause's end as the time it has left.
func statusStateShort(r status.Subscriber, now time.Time) string {
	left := func(t time.Time) string { return timeLeft(t, now) }
	switch {
	case r.DisabledReason != "":
		return r.State + " (" + r.DisabledReason + ")"
	case r.PauseReason == status.BySealedKey:
		return r.State + " (sealed key)"
	case r.PauseReason == status.ByRetryAfter:
		return r.State + " by Retry-After, " + left(r.PausedUntil)
	case !r.ResumesAt.IsZero():
		return r.State + ", " + left(r.ResumesAt)
	}
	return r.State
}

func statusState(r status.Subscriber) string {
	switch {
	case r.DisabledReason != "":
		return r.State + " (" + r.DisabledReason + ")"
	case r.PauseReason == status.BySealedKey:
		return r.State + " (secrets sealed with a key not given)"
	case r.PauseReason == status.ByRetryAfter:
		return r.State + " by Retry-After until " + statusTime(r.PausedUntil)
	case !r.ResumesAt.IsZero():
		return r.State + " until " + statusTime(r.ResumesAt)
	}
	return r.State
}

// deadReasons lists the dead letters by reason, sorted by reason, each as
// reason, sep, count, the pairs joined by join: "max_attempts=3,rejected=2"
// in the table, "max_attempts 3, rejected 2" in the detail; "-" when none.
func deadReasons(r status.Subscriber, sep, join string) string {
	if len(r.DeadByReason) == 0 {
		return "-"
	}
	reasons := slices.Sorted(maps.Keys(r.DeadByReason))
	parts := make([]string, len(reasons))
	for i, reason := range reasons {
		parts[i] = reason + sep + strconv.FormatUint(r.DeadByReason[reason], 10)
	}
	return strings.Join(parts, join)
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
