package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/relay-dev/relay/internal/deadletter"
	"github.com/relay-dev/relay/internal/lanes"
)

// tableChunk is how many rows of a long table are aligned together: a
// listing streams, so its columns are measured a chunk at a time.
const tableChunk = 1000

// maxSeqRange bounds one N-M range of --seq.
const maxSeqRange = 1_000_000

func newDLQCmd(conn *connFlags) *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "dlq",
		Short: "List, show, replay and purge dead-lettered deliveries",
		Long: `Deliveries that could not succeed are kept in the DLQ stream, on subjects
dlq.<subscriber>.<reason>, with why and when they died, for --dlq-max-age of
relay run (30 days by default). Reasons: ` + reasonNames() + `.`,
	})
	cmd.AddCommand(
		newDLQLsCmd(conn),
		newDLQShowCmd(conn),
		newDLQReplayCmd(conn),
		newDLQPurgeCmd(conn),
	)
	return cmd
}

// withDLQ connects for a relay dlq subcommand. Listing, replaying or
// purging a large DLQ takes as long as it takes, so there is no overall
// timeout: each NATS request has its own, and Ctrl-C stops the command.
func withDLQ(ctx context.Context, conn *connFlags, fn func(ctx context.Context, js jetstream.JetStream) error) error {
	return withJetStreamFor(ctx, conn, "relay dlq", 0, fn)
}

// dlqFilterFlags are the flags of the relay dlq subcommands that select
// entries.
type dlqFilterFlags struct {
	subscriber string
	reason     string
	eventType  string
	event      string
	since      string
	until      string
	seqs       string
}

func (d *dlqFilterFlags) add(cmd *cobra.Command, withSeq bool) {
	f := cmd.Flags()
	f.StringVar(&d.subscriber, "subscriber", "", "only this subscriber's dead letters")
	f.StringVar(&d.reason, "reason", "", "only dead letters of this reason: "+reasonNames())
	f.StringVar(&d.eventType, "type", "", "only events of this type; wildcards as in relay sub add --events (video.*)")
	f.StringVar(&d.event, "event", "", "only dead letters of this event: its id, or the webhook-id its subscriber saw")
	f.StringVar(&d.since, "since", "", "only dead letters stored at or after TIME: RFC 3339, or a duration ago such as 24h")
	f.StringVar(&d.until, "until", "", "only dead letters stored at or before TIME: RFC 3339, or a duration ago such as 1h")
	if withSeq {
		f.StringVar(&d.seqs, "seq", "", "only these DLQ sequences: N,M,… and ranges N-M, instead of the other filters")
	}
}

// filter validates the flags into a deadletter.Filter
// (deadletter.ParseFilter); a bad value is a usage error naming its flag.
func (d *dlqFilterFlags) filter(cmd *cobra.Command, now time.Time) (deadletter.Filter, error) {
	fl := cmd.Flags()
	given := func(name string, v *string) *string {
		if fl.Changed(name) {
			return v
		}
		return nil
	}
	f, err := deadletter.ParseFilter(deadletter.FilterArgs{Subscriber: given("subscriber", &d.subscriber), Reason: given("reason", &d.reason),
		Type: given("type", &d.eventType), Event: given("event", &d.event), Since: given("since", &d.since), Until: given("until", &d.until)}, now)
	if err != nil {
		return f, usageError{err}
	}
	if fl.Lookup("seq") != nil && fl.Changed("seq") {
		for _, other := range []string{"subscriber", "reason", "type", "event", "since", "until"} {
			if fl.Changed(other) {
				return f, usagef("--seq: names the entries on its own; leave out --%s", other)
			}
		}
		if f.Seqs, err = parseSeqs(d.seqs); err != nil {
			return f, err
		}
	}
	return f, nil
}

// parseSeqs reads --seq: sequences and ranges separated by commas, in the
// order given, each once.
func parseSeqs(v string) ([]uint64, error) {
	bad := func(part, why string) error {
		return usagef("--seq: %q %s; give DLQ sequences such as 12,15,20-30 (relay dlq ls shows them)", part, why)
	}
	var seqs []uint64
	seen := map[uint64]bool{}
	addSeq := func(n uint64) {
		if !seen[n] {
			seen[n] = true
			seqs = append(seqs, n)
		}
	}
	for _, part := range strings.Split(v, ",") {
		part = strings.TrimSpace(part)
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.ParseUint(strings.TrimSpace(lo), 10, 64)
		if err != nil || a == 0 {
			return nil, bad(part, "is not a sequence")
		}
		if !isRange {
			addSeq(a)
			continue
		}
		b, err := strconv.ParseUint(strings.TrimSpace(hi), 10, 64)
		if err != nil || b < a {
			return nil, bad(part, "is not a range from low to high")
		}
		if b-a >= maxSeqRange {
			return nil, bad(part, fmt.Sprintf("spans more than %d sequences (select by --subscriber, --reason or time instead)", maxSeqRange))
		}
		for n := a; n <= b; n++ {
			addSeq(n)
		}
	}
	return seqs, nil
}

func reasonNames() string { return deadletter.ReasonNames() }

// dlqErr turns what the deadletter package refuses into the CLI's exit
// codes: a filter it cannot use is a usage error.
func dlqErr(err error) error {
	if errors.Is(err, deadletter.ErrInvalidFilter) {
		return usageError{err}
	}
	return err
}

func newDLQLsCmd(conn *connFlags) *cobra.Command {
	var (
		filter dlqFilterFlags
		asJSON bool
		wide   bool
		limit  int
	)
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List dead-lettered deliveries, oldest first",
		Long: `Lists the dead-lettered deliveries, oldest first. --subscriber, --reason and
--since are applied by the server; --type, --event and --until on each entry,
reading headers only. At most --limit are listed (0: all; the listing streams, so a
large one costs time, not memory); when more match, a note on stderr says so.`,
		Example: `  relay dlq ls
  relay dlq ls --subscriber demo --reason max_attempts --since 24h --json
  relay dlq ls --type 'video.*' --limit 0
  relay dlq ls --event order~2E42~2Ecreated`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := filter.filter(cmd, time.Now())
			if err != nil {
				return err
			}
			if limit < 0 {
				return usagef("--limit: must be 0 (all) or more, got %d", limit)
			}
			return withDLQ(cmd.Context(), conn, func(ctx context.Context, js jetstream.JetStream) error {
				p := newEntryPrinter(cmd.OutOrStdout(), asJSON, wide)
				n := 0
				more := false
				err := deadletter.Scan(ctx, js, f, func(e deadletter.Entry) error {
					if limit > 0 && n == limit {
						more = true
						return errLimitReached
					}
					n++
					return p.add(e)
				})
				if err != nil && !errors.Is(err, errLimitReached) && !errors.Is(err, deadletter.ErrMalformedEntry) {
					return dlqErr(err)
				}
				if perr := p.close(); perr != nil {
					return perr
				}
				if more {
					fmt.Fprintf(cmd.ErrOrStderr(), "relay: only the oldest %d dead letters are listed; raise --limit (0 for all) or narrow with --subscriber, --reason, --type, --since\n", n)
				}
				if errors.Is(err, deadletter.ErrMalformedEntry) {
					return err
				}
				return nil
			})
		},
	}
	filter.add(cmd, false)
	f := cmd.Flags()
	f.BoolVar(&asJSON, "json", false, "print a JSON array")
	f.BoolVar(&wide, "wide", false, "print every column (type, attempts, last status) and the whole error, whatever the width")
	f.IntVar(&limit, "limit", deadletter.DefaultLimit, "list at most this many dead letters; 0 lists all")
	return cmd
}

// errLimitReached ends a listing at --limit.
var errLimitReached = errors.New("limit reached")

// entryPrinter prints DLQ entries as they are read: a JSON array written
// element by element, or a table aligned a chunk of rows at a time.
type entryPrinter struct {
	out    io.Writer
	asJSON bool
	wide   bool
	n      int
	tw     *table
	rows   int
}

func newEntryPrinter(out io.Writer, asJSON, wide bool) *entryPrinter {
	return &entryPrinter{out: out, asJSON: asJSON, wide: wide}
}

func (p *entryPrinter) add(e deadletter.Entry) error {
	p.n++
	if p.asJSON {
		b, err := json.MarshalIndent(e, "  ", "  ")
		if err != nil {
			return err
		}
		sep := ",\n  "
		if p.n == 1 {
			sep = "[\n  "
		}
		_, err = fmt.Fprintf(p.out, "%s%s", sep, b)
		return err
	}
	if p.tw == nil {
		p.tw = &table{wide: p.wide, fit: keepEnd}
		switch {
		case p.n != 1:
		case p.wide:
			p.tw.add("DLQ_SEQ", "SUBSCRIBER", "EVENT_ID", "TYPE", "REASON", "ATTEMPTS", "LAST_STATUS", "DEAD_AT", "LAST_ERROR")
		default:
			p.tw.add("DLQ_SEQ", "SUBSCRIBER", "EVENT_ID", "REASON", "DEAD_AT (UTC)", "LAST_ERROR")
		}
	}
	status := "-"
	if e.LastStatus != 0 {
		status = fmt.Sprint(e.LastStatus)
	}
	if p.wide {
		p.tw.add(strconv.FormatUint(e.DLQSeq, 10), cell(e.Subscriber, 0), cell(e.EventID, 0), cell(e.EventType, 0), cell(string(e.Reason), 0),
			strconv.Itoa(e.Attempts), status, e.DeadAt.UTC().Format(time.RFC3339), cell(e.LastError, 0))
	} else {
		p.tw.add(strconv.FormatUint(e.DLQSeq, 10), cell(e.Subscriber, 16), cell(e.EventID, 24), cell(string(e.Reason), 0),
			shortTime(e.DeadAt), cell(e.LastError, 0))
	}
	if p.rows++; p.rows == tableChunk {
		err := p.tw.flush(p.out)
		p.tw, p.rows = nil, 0
		return err
	}
	return nil
}

func (p *entryPrinter) close() error {
	switch {
	case p.asJSON && p.n == 0:
		_, err := fmt.Fprintln(p.out, "[]")
		return err
	case p.asJSON:
		_, err := fmt.Fprintln(p.out, "\n]")
		return err
	case p.n == 0:
		_, err := fmt.Fprintln(p.out, "no dead letters")
		return err
	case p.tw != nil:
		return p.tw.flush(p.out)
	}
	return nil
}

// cell makes a value safe for one table cell: no tab or line break can shift
// the columns, an empty value shows as "-", and with width > 0 a longer
// value is cut to width characters, the cut marked with an ellipsis.
func cell(s string, width int) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, "\uFFFD"))
	if s == "" {
		return "-"
	}
	if width > 0 && utf8.RuneCountInString(s) > width {
		s = string([]rune(s)[:width-1]) + "…"
	}
	return s
}

// printableText reports whether a UTF-8 body can go to a terminal as it is:
// no control character but line breaks and tabs, which could move the
// cursor or rewrite what the terminal shows.
func printableText(b []byte) bool {
	for _, r := range string(b) {
		if unicode.IsControl(r) && r != '\n' && r != '\r' && r != '\t' {
			return false
		}
	}
	return true
}

// parseSeqArg reads the SEQ argument of relay dlq show.
func parseSeqArg(v string) (uint64, error) {
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil || n == 0 {
		return 0, usagef("SEQ: %q is not a DLQ sequence; relay dlq ls shows them in its DLQ_SEQ column", v)
	}
	return n, nil
}

func newDLQShowCmd(conn *connFlags) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show SEQ",
		Short: "Show one dead letter: every header and the body",
		Long: `Shows the dead letter at DLQ sequence SEQ (the DLQ_SEQ column of relay dlq ls):
why and when it died, every header it carries and its body, exactly as it was
published. A body that is not printable UTF-8 text is shown in base64. An entry
whose event's body was lost before it could be sent (reason body_lost) has
none: it says so, and --json has neither "body" nor "body_base64".`,
		Example: `  relay dlq show 42
  relay dlq show 42 --json | jq -r .body`,
		Args: exactArgs(1, "a DLQ sequence"),
		RunE: func(cmd *cobra.Command, args []string) error {
			seq, err := parseSeqArg(args[0])
			if err != nil {
				return err
			}
			return withDLQ(cmd.Context(), conn, func(ctx context.Context, js jetstream.JetStream) error {
				m, err := deadletter.Get(ctx, js, seq)
				if err != nil {
					return err
				}
				return printDLQMessage(cmd.OutOrStdout(), m, asJSON)
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func printDLQMessage(out io.Writer, m deadletter.Message, asJSON bool) error {
	text := utf8.Valid(m.Body)
	if asJSON {
		return writeJSON(out, m.Show())
	}
	tw := &table{fit: wrap}
	row := func(k string, v any) { tw.add(k+":", fmt.Sprint(v)) }
	e := m.Entry
	row("dlq seq", e.DLQSeq)
	row("subject", m.Subject)
	row("subscriber", e.Subscriber)
	row("event id", cell(e.EventID, 0))
	row("event type", cell(e.EventType, 0))
	row("reason", e.Reason)
	row("attempts", e.Attempts)
	if e.LastStatus != 0 {
		row("last status", e.LastStatus)
	}
	row("last error", cell(e.LastError, 0))
	if e.FirstAttemptAt != nil {
		row("first attempt", e.FirstAttemptAt.Format(time.RFC3339Nano))
	}
	if e.DueAt != nil {
		row("due at", e.DueAt.Format(time.RFC3339Nano))
	}
	if e.Deadline != nil {
		row("deadline", e.Deadline.Format(time.RFC3339Nano))
	}
	row("dead at", e.DeadAt.Format(time.RFC3339Nano))
	if err := tw.flush(out); err != nil {
		return err
	}
	fmt.Fprintln(out, "headers:")
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range m.Header {
			if !yield(k) {
				return
			}
		}
	}) {
		for _, v := range m.Header[k] {
			if err := wrapLine(out, "  "+cell(k, 0)+": "+cell(v, 0), 4); err != nil {
				return err
			}
		}
	}
	if m.Bodiless() {
		return wrapLine(out, "body: none: its event's body was lost before it could be sent (see last error); relay dlq replay leaves this entry in the DLQ", 2)
	}
	if text && printableText(m.Body) {
		fmt.Fprintf(out, "body (%d bytes):\n%s\n", len(m.Body), m.Body)
		return nil
	}
	_, err := fmt.Fprintf(out, "body (%d bytes, not printable text, in base64):\n%s\n", len(m.Body), base64.StdEncoding.EncodeToString(m.Body))
	return err
}

func newDLQReplayCmd(conn *connFlags) *cobra.Command {
	var (
		filter         dlqFilterFlags
		sharedLanes    int
		dryRun         bool
		enable         bool
		ignoreDeadline bool
	)
	cmd := &cobra.Command{
		Use:   "replay",
		Short: "Put dead letters back on their subscriber's lane",
		Long: `Puts the selected dead letters back on their subscriber's lane, oldest first,
with the same event id (the receiver sees the same webhook-id) and a fresh
attempt count. Replayed deliveries go through the lane like any other: they obey
the subscriber's rate, pause and circuit. An entry leaves the DLQ only once
JetStream has acknowledged its copy, and each copy has Nats-Msg-Id
replay-<DLQ seq>: two replays at once, or a replay run again after it was
stopped, deliver each entry once.

Entries of subscribers removed since are skipped, and stay in the DLQ (with
--subscriber naming a removed one, nothing is replayed); a disabled one needs
--enable. --seq naming no entry at all exits 1. Entries that died of their deadline (deadline, expired) or whose
Relay-Deadline has passed would die again: they are skipped unless
--ignore-deadline, which replays them without it. Each subscriber's lane is
computed from relay run's --lanes, which the replay reads from the lane
consumers on DELIVERIES unless --lanes is given.`,
		Example: `  relay dlq replay --subscriber demo --dry-run
  relay dlq replay --subscriber demo --reason max_attempts
  relay dlq replay --seq 12,15,20-30`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := filter.filter(cmd, time.Now())
			if err != nil {
				return err
			}
			lanesGiven := cmd.Flags().Changed("lanes")
			if lanesGiven && (sharedLanes < 1 || sharedLanes > maxSharedLanes) {
				return usagef("--lanes: must be between 1 and %d, got %d", maxSharedLanes, sharedLanes)
			}
			return withDLQ(cmd.Context(), conn, func(ctx context.Context, js jetstream.JetStream) error {
				store, err := conn.openStore(ctx, js)
				if err != nil {
					return err
				}
				if !lanesGiven {
					if sharedLanes, err = lanes.SharedLanes(ctx, js); err != nil {
						return err
					}
				}
				r := &deadletter.Replayer{JS: js, Store: store, SharedLanes: sharedLanes, IgnoreDeadline: ignoreDeadline, Enable: enable || dryRun}
				return replay(ctx, cmd, r, f, dryRun, enable)
			})
		},
	}
	filter.add(cmd, true)
	fl := cmd.Flags()
	fl.IntVar(&sharedLanes, "lanes", 0, fmt.Sprintf("number of shared lanes relay run uses (1-%d); default: what the lane consumers on DELIVERIES show", maxSharedLanes))
	fl.BoolVar(&dryRun, "dry-run", false, "list what would be replayed, and change nothing")
	fl.BoolVar(&enable, "enable", false, "enable the disabled subscribers of the selection, then replay")
	fl.BoolVar(&ignoreDeadline, "ignore-deadline", false, "replay entries past their deadline too, without their Relay-Deadline")
	return cmd
}

func replay(ctx context.Context, cmd *cobra.Command, r *deadletter.Replayer, f deadletter.Filter, dryRun, enable bool) error {
	out, errOut := cmd.OutOrStdout(), cmd.ErrOrStderr()
	plan, err := r.Plan(ctx, f)
	if errors.Is(err, deadletter.ErrSubscriberDisabled) {
		return usagef("%v; add --enable to enable and replay, or run relay sub enable first", err)
	}
	if err != nil && !errors.Is(err, deadletter.ErrMalformedEntry) {
		return fmt.Errorf("%w; nothing was replayed", dlqErr(err))
	}
	if err != nil {
		fmt.Fprintf(errOut, "relay: %v; it is left in the DLQ\n", err)
	}
	if plan.Selected == 0 && len(f.Seqs) > 0 {
		return fmt.Errorf("no dead letter with DLQ sequence %s (relay dlq ls lists them); nothing was replayed", seqsText(f.Seqs))
	}
	unknown := 0
	for _, n := range plan.Unknown {
		unknown += n
	}
	if unknown > 0 {
		fmt.Fprintf(errOut, "relay: %d dead letters of removed subscribers (%s) are skipped and left in the DLQ\n",
			unknown, strings.Join(slices.Sorted(maps.Keys(plan.Unknown)), ", "))
	}
	skipLate := 0
	if !r.IgnoreDeadline {
		skipLate = plan.Late
	}
	lateNote := func() {
		if skipLate > 0 {
			fmt.Fprintf(errOut, "relay: %d dead letters died of their deadline or are past it and are left in the DLQ; add --ignore-deadline to replay them without it\n", skipLate)
		}
	}
	if dryRun {
		p := newEntryPrinter(out, false, false)
		skipped := 0
		err := deadletter.Scan(ctx, r.JS, f, func(e deadletter.Entry) error {
			if r.Skips(e) || plan.Unknown[e.Subscriber] > 0 {
				skipped++
				return nil
			}
			return p.add(e)
		})
		if err != nil && !errors.Is(err, deadletter.ErrMalformedEntry) {
			return err
		}
		if err := p.close(); err != nil {
			return err
		}
		fmt.Fprintf(out, "dry run: would replay %d, skip %d\n", plan.Selected-skipped, skipped)
		if len(plan.Disabled) > 0 && !enable {
			fmt.Fprintf(errOut, "relay: disabled subscribers need --enable: %s\n", strings.Join(plan.Disabled, ", "))
		}
		lateNote()
		return nil
	}
	progress := newProgress(errOut)
	r.Progress = progress.update
	sum, err := r.Run(ctx, plan)
	progress.done()
	fmt.Fprintf(out, "replayed %d, skipped %d%s, failed %d\n", sum.Replayed, sum.Skipped, skippedBy(sum.SkippedBy), sum.Failed)
	lateNote()
	if err != nil {
		return fmt.Errorf("replay: %w (what was not replayed is still in the DLQ; run the same command again)", err)
	}
	return nil
}

// progress draws one line on a terminal while a long replay runs; on
// anything else (a pipe, a file, a test) it prints nothing.
type progress struct {
	w    io.Writer
	on   bool
	last time.Time
	drew bool
}

// progressEvery is how often the progress line is redrawn.
const progressEvery = 200 * time.Millisecond

func newProgress(w io.Writer) *progress {
	p := &progress{w: w}
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			p.on = true
		}
	}
	return p
}

func (p *progress) update(done, total int) {
	if !p.on || (time.Since(p.last) < progressEvery && done < total) {
		return
	}
	p.last = time.Now()
	p.drew = true
	fmt.Fprintf(p.w, "\rreplaying: %d of %d (%d%%)", done, total, done*100/max(total, 1))
}

func (p *progress) done() {
	if p.drew {
		fmt.Fprint(p.w, "\r\033[K")
	}
}

func newDLQPurgeCmd(conn *connFlags) *cobra.Command {
	var (
		filter dlqFilterFlags
		yes    bool
	)
	cmd := &cobra.Command{
		Use:   "purge --yes",
		Short: "Remove dead letters for good",
		Long: `Removes the selected dead letters (all of them without a filter) for good.
Without --yes it only says how many would go, and exits 2. A selection by
--subscriber and --reason alone is one server-side purge, whatever its size.`,
		Example: `  relay dlq purge --subscriber demo --reason rejected
  relay dlq purge --subscriber demo --reason rejected --yes`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := filter.filter(cmd, time.Now())
			if err != nil {
				return err
			}
			return withDLQ(cmd.Context(), conn, func(ctx context.Context, js jetstream.JetStream) error {
				if !yes {
					n, err := deadletter.Count(ctx, js, f)
					if err != nil {
						return dlqErr(err)
					}
					return usagef("%d dead letters would be purged; add --yes to purge them", n)
				}
				n, err := deadletter.Purge(ctx, js, f)
				if err != nil {
					return fmt.Errorf("purged %d dead letters, then: %w", n, dlqErr(err))
				}
				fmt.Fprintf(cmd.OutOrStdout(), "purged %d dead letters\n", n)
				return nil
			})
		},
	}
	filter.add(cmd, true)
	cmd.Flags().BoolVar(&yes, "yes", false, "really purge")
	return cmd
}

// skippedBy is " (N why, …)" for a replay's skipped entries, "" for none.
func skippedBy(by map[string]int) string {
	if len(by) == 0 {
		return ""
	}
	parts := make([]string, 0, len(by))
	for _, why := range slices.Sorted(maps.Keys(by)) {
		parts = append(parts, fmt.Sprintf("%d %s", by[why], why))
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// seqsText lists DLQ sequences for a message, the first few of many.
func seqsText(seqs []uint64) string {
	const most = 5
	parts := make([]string, 0, min(len(seqs), most))
	for _, seq := range seqs[:min(len(seqs), most)] {
		parts = append(parts, strconv.FormatUint(seq, 10))
	}
	text := strings.Join(parts, ", ")
	if len(seqs) > most {
		text += fmt.Sprintf(" and %d more", len(seqs)-most)
	}
	return text
}
