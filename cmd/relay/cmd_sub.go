package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/relay-dev/relay/internal/deliver"
	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/streams"
)

// cmdTimeout bounds a CLI command's NATS calls, so that a command against an
// unreachable cluster fails with a message instead of hanging.
const cmdTimeout = 15 * time.Second

func newSubCmd(conn *connFlags) *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "sub",
		Short: "Add, change, list, show, remove, pause, enable, disable and test subscribers",
	})
	cmd.AddCommand(
		newSubAddCmd(conn),
		newSubUpdateCmd(conn),
		newSubRotateSecretCmd(conn),
		newSubPauseCmd(conn),
		newSubResumeCmd(conn),
		newSubLsCmd(conn),
		newSubGetCmd(conn),
		newSubRmCmd(conn),
		newSubEnableCmd(conn, "enable", false),
		newSubEnableCmd(conn, "disable", true),
		newSubTestCmd(conn),
	)
	return cmd
}

// withJetStream connects as the named client and runs fn with a JetStream
// context, bounded by cmdTimeout.
func withJetStream(ctx context.Context, conn *connFlags, name string, fn func(ctx context.Context, js jetstream.JetStream) error) error {
	return withJetStreamFor(ctx, conn, name, cmdTimeout, fn)
}

// withJetStreamFor is withJetStream bounded by timeout, or only by ctx (and
// each NATS request's own timeout) when timeout is 0.
func withJetStreamFor(ctx context.Context, conn *connFlags, name string, timeout time.Duration, fn func(ctx context.Context, js jetstream.JetStream) error) error {
	nc, err := conn.connect(name)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	return fn(ctx, js)
}

// withStore is withJetStream with the subscriber bucket opened.
func withStore(ctx context.Context, conn *connFlags, name string, fn func(ctx context.Context, js jetstream.JetStream, s *subscribers.Store) error) error {
	return withJetStream(ctx, conn, name, func(ctx context.Context, js jetstream.JetStream) error {
		store, err := conn.openStore(ctx, js)
		if err != nil {
			return err
		}
		return fn(ctx, js, store)
	})
}

// withSubscriberStore is withStore for a command on one subscriber: an id
// that cannot be one is a usage error, before anything connects.
func withSubscriberStore(ctx context.Context, conn *connFlags, id string, fn func(ctx context.Context, js jetstream.JetStream, s *subscribers.Store) error) error {
	if err := subscribers.ValidateID(id); err != nil {
		return validationErr(err)
	}
	return withStore(ctx, conn, "relay sub", fn)
}

// validationErr turns a subscriber validation error into a usage error.
func validationErr(err error) error {
	if errors.Is(err, subscribers.ErrInvalid) {
		return usageError{err}
	}
	return err
}

func newSubAddCmd(conn *connFlags) *cobra.Command {
	var (
		f     subFlags
		force bool
	)
	cmd := &cobra.Command{
		Use:   "add ID --url URL [--secret whsec_...|--secret-file PATH|--secret-env NAME]",
		Short: "Create a subscriber",
		Long: `Creates a subscriber. A running relay
picks the change up within a second, without a restart. The subscriber receives
the events published after it was added whose type matches --events (NATS
wildcards: video.* matches video.trending, video.> matches video.a.b; no
--events means every event).

--filter narrows them by content: a CEL expression over body (the event's JSON
body), type (the event type) and headers (its NATS headers, name to first
value), such as 'body.status == "paid" && body.amount > 100'. It is checked
here (a bad one exits 2 with CEL's message and its line:column); an event whose
body is not JSON never matches one that reads body, and a field the body lacks
makes the expression false (has(body.x) tests for one). See docs/filters.md.

The secret is given with at most one of --secret, --secret-file (one secret a
line, newest first) or --secret-env (the name of an environment variable); the
last two keep it out of the process list and the shell history. Without any,
relay generates one (whsec_ and 32 random bytes) and prints it alone on stdout,
once: no command prints it again.

--signing ed25519 signs with an ed25519 key instead (Standard Webhooks v1a):
the receiver verifies with its public key (whpk_...) and holds nothing that can
sign. Without --signing-key-file (whsk_ keys, one a line) relay generates the
key and prints its public key on stdout; relay sub get shows it again, and no
command prints the private key. --signing both signs with one key of each kind.

A URL on a loopback or private address (127.0.0.1, 10.0.0.5, localhost) is
stored, with a note: a relay refuses to deliver there unless it runs with
--allow-private-targets.

An id that exists is refused (exit 2) and changes nothing, so that an add
repeated by a script never changes a secret the receiver holds nor sends the
subscriber's events elsewhere: change some settings and keep the others with
relay sub update. --force replaces it with what is given, a new secret
included; replacing keeps the subscriber's state: disabled, paused, and the
old secrets of a rotation still in its grace.

--lane dedicated gives the subscriber a JetStream consumer of its own; at most
` + fmt.Sprint(subscribers.MaxDedicated) + ` subscribers may have one.`,
		Example: `  relay sub add demo --url https://example.com/hook --secret whsec_... --events 'video.*' --rate 50
  relay sub add paid --url https://example.com/hook --events 'order.*' \
    --filter 'body.status == "paid"'
  relay sub add demo --url https://example.com/hook --secret-file demo-secret.txt
  relay sub add demo --url https://example.com/hook --signing ed25519`,
		Args: exactArgs(1, "a subscriber ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			sub := subscribers.Subscriber{ID: args[0]}
			change, secretFlag, err := f.changes(cmd.Flags())
			if err != nil {
				return err
			}
			change(&sub)
			generated := f.generated
			sub.SetDefaults()
			if err := sub.Validate(); err != nil {
				return secretErr(err, secretFlag)
			}
			var opts []subscribers.PutOption
			if !force {
				opts = append(opts, subscribers.Create())
			}
			return withStore(cmd.Context(), conn, "relay sub", func(ctx context.Context, _ jetstream.JetStream, s *subscribers.Store) error {
				err := s.Put(ctx, sub, opts...)
				var exists *subscribers.ExistsError
				switch {
				case err != nil && len(generated) > 0 && !errors.Is(err, subscribers.ErrInvalid) && !errors.As(err, &exists) &&
					!errors.Is(err, subscribers.ErrTooManyDedicated):
					// The write may have landed with its reply lost: then
					// nobody but this command knows the secret.
					printGenerated(cmd.OutOrStdout(), generated)
					return fmt.Errorf("adding subscriber %s: %w; the key printed may or may not be stored: relay sub get %s shows whether it is", sub.ID, err, sub.ID)
				case errors.As(err, &exists):
					return usagef("%s: change what you give, keeping its secret, with relay sub update %s; or replace it, secret included, with --force",
						exists, sub.ID)
				case errors.Is(err, subscribers.ErrTooManyDedicated):
					return usageError{err}
				case err != nil:
					return secretErr(err, secretFlag)
				}
				if len(generated) > 0 {
					// As rotate-secret: the key alone on stdout, once.
					printGenerated(cmd.OutOrStdout(), generated)
					fmt.Fprintf(cmd.ErrOrStderr(), "subscriber %s saved: %s\n", sub.ID, summary(sub))
					_ = wrapLine(cmd.ErrOrStderr(), generatedNote(generated), 0)
				} else {
					fmt.Fprintf(cmd.OutOrStdout(), "subscriber %s saved: %s\n", sub.ID, summary(sub))
				}
				warnPrivate(cmd.ErrOrStderr(), sub.URL)
				return nil
			})
		},
	}
	fl := cmd.Flags()
	f.register(fl, true)
	fl.BoolVar(&force, "force", false, "replace a subscriber that exists, its secret included")
	_ = cmd.MarkFlagRequired("url")
	return cmd
}

// generatedNote says what printGenerated printed.
func generatedNote(generated []string) string {
	switch subscribers.SigningOf(generated) {
	case subscribers.SigningBoth:
		return "its secret and its public key, printed above, were generated; the secret is never printed again (relay sub get shows the public key)"
	case subscribers.SigningEd25519:
		return "its signing key was generated and stays with relay; give the receiver its public key, printed above (relay sub get shows it again)"
	}
	return "its secret, printed above, was generated and is never printed again"
}

// summary is the description, on two lines, of a subscriber that add and update
// print, its URL redacted.
func summary(sub subscribers.Subscriber) string {
	return fmt.Sprintf("%s, events %s\n  rate %s, signing %s", subscribers.RedactURL(sub.URL), eventsString(sub.Events), rateString(sub), sub.Signing())
}

func eventsString(events []string) string {
	if len(events) == 0 {
		return "all"
	}
	return strings.Join(events, ",")
}

func rateString(s subscribers.Subscriber) string {
	if s.Rate <= 0 {
		return "unlimited"
	}
	return fmt.Sprintf("%g/s burst %d", s.Rate, s.Burst)
}

// stateString is a subscriber's state at now: disabled (and why), paused
// (and until when, if the pause ends by itself) or enabled.
func stateString(s subscribers.Subscriber, now time.Time) string {
	switch {
	case s.Disabled && s.DisabledReason != "":
		return "disabled (" + s.DisabledReason + ")"
	case s.Disabled:
		return "disabled"
	case s.SealedWith() != "":
		return "held (secrets sealed with key " + s.SealedWith() + ", not given)"
	case s.PausedAt(now) && !s.PausedUntil.IsZero():
		return "paused until " + s.PausedUntil.UTC().Format(time.RFC3339)
	case s.PausedAt(now):
		return "paused"
	}
	return "enabled"
}

// shownSubscriber is a subscriber as ls and get show it.
type shownSubscriber = subscribers.Shown

// printable is what ls and get show of a subscriber (subscribers.Show).
func printable(s subscribers.Subscriber, showURL bool) shownSubscriber {
	return s.Show(showURL)
}

func laneString(s subscribers.Subscriber) string {
	if s.Dedicated {
		return "dedicated"
	}
	return "shared"
}

// printList prints what a list command found: with --json one JSON array
// ([] when empty), else a table under header, one row a line, or the line
// empty when there is nothing to list.
func printList[T any](out io.Writer, items []T, asJSON, wide bool, empty, header string, row func(T) string) error {
	if asJSON {
		if items == nil {
			items = []T{}
		}
		return writeJSON(out, items)
	}
	if len(items) == 0 {
		_, err := fmt.Fprintln(out, empty)
		return err
	}
	t := &table{wide: wide}
	t.add(strings.Split(header, "\t")...)
	for _, it := range items {
		t.add(strings.Split(row(it), "\t")...)
	}
	return t.flush(out)
}

// noSubscribers is what the subscriber lists print when there are none.
const noSubscribers = "no subscribers; add one with: relay sub add ID --url URL --secret whsec_..."

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func newSubLsCmd(conn *connFlags) *cobra.Command {
	var asJSON, showURL, wide bool
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List subscribers (secrets masked, URLs without query string)",
		Long: `Lists the subscribers: id, URL (without its query string unless --show-url),
event types, rate, signing scheme (hmac, ed25519 or both), state and content
filter (on a line of its own), each line within 100 columns, long values cut;
--wide prints them in full, a row each, with the burst and the lane.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withStore(cmd.Context(), conn, "relay sub", func(ctx context.Context, _ jetstream.JetStream, s *subscribers.Store) error {
				subs, err := s.List(ctx)
				if err != nil {
					return err
				}
				redacted := make([]shownSubscriber, 0, len(subs))
				for _, sub := range subs {
					redacted = append(redacted, printable(sub, showURL))
				}
				now := time.Now()
				if wide {
					return printList(cmd.OutOrStdout(), redacted, asJSON, true, noSubscribers,
						"ID\tURL\tEVENTS\tRATE\tLANE\tSIGNING\tSTATE\tFILTER", func(shown shownSubscriber) string {
							sub := shown.Subscriber
							return strings.Join([]string{sub.ID, sub.URL, eventsString(sub.Events), rateString(sub), laneString(sub),
								string(shown.Signing), stateString(sub, now), cell(sub.Filter, 0)}, "\t")
						})
				}
				if asJSON || len(redacted) == 0 {
					return printList(cmd.OutOrStdout(), redacted, asJSON, false, noSubscribers, "", nil)
				}
				// Within 100 columns: a content filter on a line of its own,
				// under its subscriber's URL.
				t := &table{fit: wrap}
				t.add("ID", "URL", "EVENTS", "RATE", "SIGNING", "STATE")
				for _, shown := range redacted {
					sub := shown.Subscriber
					// A pause's end as relay status says it within 100 columns.
					state := strings.Replace(stateString(sub, now), " until "+sub.PausedUntil.UTC().Format(time.RFC3339), ", "+timeLeft(sub.PausedUntil, now), 1)
					rate, _, _ := strings.Cut(rateString(sub), " burst ") // the burst: sub get, --wide
					url := cell(sub.URL, 26)
					if showURL {
						url = cell(sub.URL, 0) // asked for whole
					}
					t.add(cell(sub.ID, 20), url, cell(eventsString(sub.Events), 16), rate,
						string(shown.Signing), cell(state, 0))
					if sub.Filter != "" {
						t.add("", "filter: "+cell(sub.Filter, 0))
					}
				}
				return t.flush(cmd.OutOrStdout())
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array")
	cmd.Flags().BoolVar(&showURL, "show-url", false, "print URLs in full, with their query string and fragment")
	cmd.Flags().BoolVar(&wide, "wide", false, "print every column in full, and the lane, whatever the width")
	return cmd
}

func newSubGetCmd(conn *connFlags) *cobra.Command {
	var asJSON, showURL bool
	cmd := &cobra.Command{
		Use:   "get ID",
		Short: "Show one subscriber (secrets masked, URL without query string)",
		Args:  exactArgs(1, "a subscriber ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withSubscriberStore(cmd.Context(), conn, args[0], func(ctx context.Context, _ jetstream.JetStream, s *subscribers.Store) error {
				sub, err := s.Get(ctx, args[0])
				if err != nil {
					return err
				}
				shown := printable(sub, showURL)
				sub = shown.Subscriber
				out := cmd.OutOrStdout()
				if asJSON {
					return writeJSON(out, shown)
				}
				tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
				row := func(k string, v any) { fmt.Fprintf(tw, "%s:\t%v\n", k, v) }
				row("id", sub.ID)
				row("url", sub.URL)
				if sub.Owner != "" {
					row("owner", sub.Owner)
				}
				row("state", stateString(sub, time.Now()))
				if sub.Disabled {
					row("new events", "not copied while it is disabled; what was queued waits for relay sub enable")
				}
				row("signing", shown.Signing)
				row("secrets", strings.Join(sub.Secrets, " "))
				for _, p := range sub.PreviousSecrets {
					row("previous secret", p.Secret+" until "+p.Until.UTC().Format(time.RFC3339))
				}
				switch {
				case len(shown.PublicKeys) > 0:
					row("public keys", strings.Join(shown.PublicKeys, " "))
				case shown.PublicKey != "":
					row("public key", shown.PublicKey)
				}
				row("events", eventsString(sub.Events))
				if sub.Filter != "" {
					row("filter", sub.Filter)
				}
				row("rate", rateString(sub))
				row("max attempts", sub.MaxAttempts)
				row("timeout", sub.Timeout)
				row("retry", fmt.Sprintf("base %s, max %s", sub.RetryBase, sub.RetryMax))
				if len(sub.RetryStatus) > 0 {
					codes := make([]string, len(sub.RetryStatus))
					for i, c := range sub.RetryStatus {
						codes[i] = strconv.Itoa(c)
					}
					row("retry status", strings.Join(codes, ","))
				}
				row("max in flight", sub.MaxInFlight)
				row("max backlog", sub.Backlog())
				row("breaker", breakerString(sub))
				if sub.DeadlineAfter > 0 {
					row("deadline after", sub.DeadlineAfter)
				}
				row("lane", laneString(sub))
				for k, v := range sub.Headers {
					row("header", k+": "+v)
				}
				if g := sub.OAuth2; g != nil {
					row("oauth2", oauth2String(g))
				}
				if sub.TLS != nil {
					row("tls", tlsString(sub.TLS))
				}
				row("created", sub.CreatedAt.UTC().Format(time.RFC3339))
				row("updated", sub.UpdatedAt.UTC().Format(time.RFC3339))
				return tw.Flush()
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().BoolVar(&showURL, "show-url", false, "print the URL in full, with its query string and fragment")
	return cmd
}

func newSubRmCmd(conn *connFlags) *cobra.Command {
	var yes bool
	cmd := &cobra.Command{
		Use:   "rm ID [--yes]",
		Short: "Remove a subscriber and drop its queued, parked and scheduled deliveries",
		Long: `Removes a subscriber. Its deliveries have nowhere to go any more, so they are
dropped: those queued or waiting in its overflow, those parked for a retry,
those scheduled for later, and those a relay holds in memory. Dropped, not
dead-lettered: no dead letter, no relay.delivery.dead event, no alert; this
command prints how many it dropped, and each relay counts those it held in
relay_deliveries_removed_total.

When deliveries wait, it removes nothing without --yes: it says how many
would be dropped and exits 2, as relay dlq purge does. To keep them, pause the
subscriber instead (relay sub pause), or change its URL (relay sub update).`,
		Example: `  relay sub rm demo
  relay sub rm demo --yes`,
		Args: exactArgs(1, "a subscriber ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			return withSubscriberStore(cmd.Context(), conn, id, func(ctx context.Context, js jetstream.JetStream, s *subscribers.Store) error {
				n, err := subscribers.Remove(ctx, js, s, id, yes)
				var w *subscribers.WaitingError
				var partly *subscribers.NotAllDroppedError
				switch {
				case errors.As(err, &w):
					return usagef("%s: add --yes to remove it and drop them (they are not dead-lettered), or pause it with relay sub pause %s", w, id)
				case errors.As(err, &partly):
					return fmt.Errorf("subscriber %s removed, but its queued deliveries were not all dropped (run relay sub rm %s --yes again): %w", id, id, partly.Err)
				case err != nil:
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "subscriber %s removed; %d queued, %d parked and %d scheduled deliveries dropped\n",
					id, n.Queued, n.Parked, n.Scheduled)
				// Its deadline counts are only figures: failing to drop
				// them failed nothing else.
				if err := n.Timeliness; err != nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "relay: warning: subscriber %s removed, but not its deadline counts in %s (a subscriber added again as %s would inherit them; nats kv del %s %s drops them): %s\n",
						id, streams.TimelinessBucket, id, streams.TimelinessBucket, id, oneLine(err.Error()))
				}
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&yes, "yes", false, "remove it even though deliveries wait, and drop them")
	return cmd
}

func newSubEnableCmd(conn *connFlags, verb string, disable bool) *cobra.Command {
	short := "Enable a subscriber: it gets new events again, and what it holds is delivered"
	long := `Enables a subscriber that relay sub disable, or a 410 Gone, disabled: it gets a
copy of the events published from now on, and what was queued for it before it
was disabled is delivered. The events published while it was disabled were not
copied to it and are not delivered (relay sub pause holds those instead).`
	if disable {
		short = "Disable a subscriber: new events are not copied to it until it is enabled again"
		long = `Disables a subscriber: events published while it is disabled are
not copied to it, and are never delivered to it, even after relay sub enable;
what was queued for it before waits, held, and is delivered once it is enabled.
To hold the new events as well and deliver them later, use relay sub pause.`
	}
	return &cobra.Command{
		Use:   verb + " ID",
		Short: short,
		Long:  long,
		Args:  exactArgs(1, "a subscriber ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			return withSubscriberStore(cmd.Context(), conn, id, func(ctx context.Context, _ jetstream.JetStream, s *subscribers.Store) error {
				reason := ""
				if disable {
					reason = "disabled by relay sub disable"
				}
				if err := s.SetDisabled(ctx, id, disable, reason); err != nil {
					return err
				}
				if disable {
					fmt.Fprintf(cmd.OutOrStdout(), "subscriber %s disabled: new events are not copied to it\nuntil relay sub enable %s (relay sub pause would hold them)\n", id, id)
				} else {
					fmt.Fprintf(cmd.OutOrStdout(), "subscriber %s enabled\n", id)
				}
				return nil
			})
		},
	}
}

// warnPrivate says, after a subscriber is saved, that relays refuse its URL
// unless they run with --allow-private-targets: the relay that dials
// decides, by its own flag, so the subscriber is stored all the same.
func warnPrivate(w io.Writer, rawURL string) {
	if why := deliver.PrivateTarget(rawURL); why != "" {
		_ = wrapLine(w, "note: "+why+": relay run refuses to deliver there (its dead letters say refused) unless it runs with --allow-private-targets", 0)
	}
}

// breakerString shows a subscriber's circuit-breaker rule, its defaults
// filled: "50% of 50 requests in 10s, or 5 failures in a row".
func breakerString(sub subscribers.Subscriber) string {
	sub.SetDefaults()
	return fmt.Sprintf("%g%% of %d requests in %s, or %d failures in a row", 100*sub.BreakerFailureRate,
		sub.BreakerMinRequests, sub.BreakerWindow, sub.BreakerConsecutive)
}
