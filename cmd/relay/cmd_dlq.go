package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/relay-dev/relay/internal/deadletter"
	"github.com/relay-dev/relay/internal/subscribers"
)

// dlqErrorWidth is how many characters of LAST_ERROR the dlq ls table
// shows; relay dlq ls --json has the whole (≤ 1 KiB) text.
const dlqErrorWidth = 60

func newDLQCmd(conn *connFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dlq",
		Short: "List dead-lettered deliveries",
		Long: `Deliveries that could not succeed are kept in the DLQ stream, on subjects
dlq.<subscriber>.<reason>, with why and when they died. Reasons: ` + reasonNames() + `.`,
	}
	cmd.AddCommand(
		newDLQLsCmd(conn),
	)
	return cmd
}

// withDLQ connects for a relay dlq subcommand.
func withDLQ(ctx context.Context, conn *connFlags, fn func(ctx context.Context, js jetstream.JetStream) error) error {
	return withJetStream(ctx, conn, "relay dlq", fn)
}

// dlqFilterFlags are the --subscriber and --reason flags of the relay dlq
// subcommands that select entries.
type dlqFilterFlags struct {
	subscriber string
	reason     string
}

func (d *dlqFilterFlags) add(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&d.subscriber, "subscriber", "", "only this subscriber's dead letters")
	f.StringVar(&d.reason, "reason", "", "only dead letters of this reason: "+reasonNames())
}

// filter validates the flags into a deadletter.Filter; a bad value is a
// usage error naming its flag.
func (d *dlqFilterFlags) filter(cmd *cobra.Command) (deadletter.Filter, error) {
	var f deadletter.Filter
	fl := cmd.Flags()
	if fl.Changed("subscriber") {
		if err := subscribers.ValidateID(d.subscriber); err != nil {
			var ve *subscribers.ValidationError
			if errors.As(err, &ve) {
				return f, usagef("--subscriber: %s", ve.Msg)
			}
			return f, usagef("--subscriber: %v", err)
		}
		f.Subscriber = d.subscriber
	}
	if fl.Changed("reason") {
		r, err := deadletter.ParseReason(d.reason)
		if err != nil {
			return f, usagef("--reason: %q is not a reason; valid reasons are %s", d.reason, reasonNames())
		}
		f.Reason = r
	}
	return f, nil
}

func reasonNames() string {
	rs := deadletter.Reasons()
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = string(r)
	}
	return strings.Join(s, ", ")
}

func newDLQLsCmd(conn *connFlags) *cobra.Command {
	var (
		filter dlqFilterFlags
		asJSON bool
		limit  int
	)
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List dead-lettered deliveries, oldest first",
		Long: `Lists the dead-lettered deliveries, oldest first, optionally only one
subscriber's or one reason's. At most --limit are listed; when more match, the
oldest are printed and a note on stderr says how many were left out.`,
		Example: `  relay dlq ls
  relay dlq ls --subscriber demo --reason max_attempts --json`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := filter.filter(cmd)
			if err != nil {
				return err
			}
			if limit < 1 {
				return usagef("--limit: must be at least 1, got %d", limit)
			}
			return withDLQ(cmd.Context(), conn, func(ctx context.Context, js jetstream.JetStream) error {
				entries, err := deadletter.List(ctx, js, f, limit)
				if err != nil && !errors.Is(err, deadletter.ErrTruncated) && !errors.Is(err, deadletter.ErrMalformedEntry) {
					return err
				}
				if perr := printDLQEntries(cmd, entries, asJSON); perr != nil {
					return perr
				}
				if errors.Is(err, deadletter.ErrTruncated) {
					fmt.Fprintf(cmd.ErrOrStderr(), "relay: only the oldest %d dead letters are listed; raise --limit or narrow with --subscriber/--reason\n", len(entries))
				}
				if errors.Is(err, deadletter.ErrMalformedEntry) {
					return err
				}
				return nil
			})
		},
	}
	filter.add(cmd)
	f := cmd.Flags()
	f.BoolVar(&asJSON, "json", false, "print a JSON array")
	f.IntVar(&limit, "limit", deadletter.DefaultLimit, "list at most this many dead letters")
	return cmd
}

func printDLQEntries(cmd *cobra.Command, entries []deadletter.Entry, asJSON bool) error {
	return printList(cmd.OutOrStdout(), entries, asJSON, "no dead letters",
		"DLQ_SEQ\tSUBSCRIBER\tEVENT_ID\tTYPE\tREASON\tATTEMPTS\tLAST_STATUS\tDEAD_AT\tLAST_ERROR",
		func(e deadletter.Entry) string {
			status := "-"
			if e.LastStatus != 0 {
				status = fmt.Sprint(e.LastStatus)
			}
			return fmt.Sprintf("%d\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s",
				e.DLQSeq, cell(e.Subscriber, 0), cell(e.EventID, 0), cell(e.EventType, 0), cell(string(e.Reason), 0),
				e.Attempts, status, e.DeadAt.UTC().Format(time.RFC3339), cell(e.LastError, dlqErrorWidth))
		})
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
