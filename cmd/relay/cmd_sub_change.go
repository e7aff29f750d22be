package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/relay-dev/relay/internal/deliver"
	"github.com/relay-dev/relay/internal/ratelimit"
	"github.com/relay-dev/relay/internal/subscribers"
)

// The commands that change one setting or state of a subscriber that
// exists: update, rotate-secret, pause, resume. Each reads the stored value
// and writes it back compare-and-set, so that two of them at once, or one
// racing a relay that disables the subscriber after a 410, never undo each
// other.

func newSubUpdateCmd(conn *connFlags) *cobra.Command {
	var f subFlags
	cmd := &cobra.Command{
		Use:   "update ID [flags]",
		Short: "Change some settings of a subscriber and keep the others",
		Long: `Changes the settings given as flags (the same flags as relay sub add) and keeps
every other one, then checks the result as relay sub add does. --events, --header,
--retry-status and the secret flags replace the whole list they set (--events ''
for every event, --filter '' for no content filter, --retry-status '' for none).
--rate moves a burst that was never given with it (a subscriber added with --rate
50 and no --burst has a burst of 5 after --rate 5, and the command says so); a
burst given with --burst is kept. To change the secret with a grace period
during which the old one still signs, use relay sub rotate-secret instead.

--signing keeps the keys of a kind still in use, generates one for a kind newly
in use (a secret is printed on stdout, an ed25519 key as its public key) and
drops a kind no longer in use at once. To move receivers from hmac to ed25519
without a rejected request, go through --signing both.`,
		Example: `  relay sub update demo --rate 100
  relay sub update demo --url https://example.com/v2/hook --events 'video.*,order.>'
  relay sub update demo --filter 'body.amount > 100'`,
		Args: exactArgs(1, "a subscriber ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			if err := subscribers.ValidateID(id); err != nil {
				return validationErr(err)
			}
			if !anyGiven(cmd.LocalNonPersistentFlags()) {
				return usagef("relay sub update: give at least one setting to change, such as --rate 100 (see relay sub update --help)")
			}
			change, secretFlag, err := f.changes(cmd.Flags())
			if err != nil {
				return err
			}
			return withStore(cmd.Context(), conn, "relay sub", func(ctx context.Context, _ jetstream.JetStream, s *subscribers.Store) error {
				sub, err := s.Update(ctx, id, func(sub *subscribers.Subscriber) error {
					change(sub)
					return nil
				})
				switch {
				case errors.Is(err, subscribers.ErrTooManyDedicated):
					return usageError{err}
				case errors.Is(err, subscribers.ErrNotFound):
					return notFound(err, id)
				case err != nil && len(f.generated) > 0 && !errors.Is(err, subscribers.ErrInvalid):
					// The write may have landed with its reply lost: then
					// nobody but this command knows the key it generated.
					printGenerated(cmd.OutOrStdout(), f.generated)
					return fmt.Errorf("updating subscriber %s: %w; the key printed may or may not be stored: relay sub get %s shows whether it is", id, err, id)
				case err != nil:
					return secretErr(err, secretFlag)
				}
				if len(f.generated) > 0 {
					printGenerated(cmd.OutOrStdout(), f.generated)
					fmt.Fprintf(cmd.ErrOrStderr(), "subscriber %s saved: %s\n", id, summary(sub))
					_ = wrapLine(cmd.ErrOrStderr(), generatedNote(f.generated), 0)
				} else {
					fmt.Fprintf(cmd.OutOrStdout(), "subscriber %s saved: %s\n", id, summary(sub))
				}
				if f.burstFollowed && f.burstWas != sub.Burst {
					fmt.Fprintf(cmd.ErrOrStderr(), "note: its burst followed the rate, from %d to %d (--burst N sets one a rate change keeps)\n",
						f.burstWas, sub.Burst)
				}
				if cmd.Flags().Changed("url") {
					warnPrivate(cmd.ErrOrStderr(), sub.URL)
				}
				return nil
			})
		},
	}
	f.register(cmd.Flags(), false)
	return cmd
}

// anyGiven reports whether any flag of fs was given on the command line.
func anyGiven(fs *pflag.FlagSet) bool {
	given := false
	fs.VisitAll(func(f *pflag.Flag) { given = given || f.Changed })
	return given
}

func newSubRotateSecretCmd(conn *connFlags) *cobra.Command {
	var (
		secrets secretFlags
		keyFile string
		grace   time.Duration
	)
	cmd := &cobra.Command{
		Use:   "rotate-secret ID [--secret whsec_...|--secret-file PATH|--secret-env NAME] [--signing-key-file PATH] [--grace 24h]",
		Short: "Replace a subscriber's secret, signing with the old one too for a grace period",
		Long: `Makes a new secret the subscriber's signing secret. Without --secret,
--secret-file or --secret-env a random one is generated (whsec_ and base64 of
32 random bytes) and printed alone on stdout, so that NEW=$(relay sub
rotate-secret demo) captures it; a secret given is not printed.

For --grace (default 24h, at most 30 days) every request carries two
signatures, the new secret's and the old one's ("v1,<new> v1,<old>"), so the
receiver can switch to the new secret whenever it likes; after it only the new
one. stderr says until when the old one stays valid. --grace 0 stops signing
with every old secret at once. A running relay then removes the old secret
from the bucket.

A subscriber that signs with ed25519 (relay sub add --signing ed25519) gets a
new whsk_ key the same way, and its public key is printed on stdout: during
the grace requests carry "v1a,<new> v1a,<old>". With --signing both, one key
of each kind is rotated. Give new keys of the kinds the subscriber signs with;
to change the kinds, use relay sub update --signing.`,
		Example: `  NEW=$(relay sub rotate-secret demo --grace 48h)
  relay sub rotate-secret demo --secret-file new-secret.txt --grace 0`,
		Args: exactArgs(1, "a subscriber ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			if err := subscribers.ValidateID(id); err != nil {
				return validationErr(err)
			}
			if err := subscribers.ValidateGrace(grace); err != nil {
				return validationErr(err)
			}
			given, secretFlag, err := secrets.read(cmd.Flags())
			if err != nil {
				return err
			}
			if slices.ContainsFunc(given, deliver.IsSigningKey) {
				return usagef("%s: give whsk_ signing keys with --signing-key-file, not with %s", secretFlag, secretFlag)
			}
			if cmd.Flags().Changed("signing-key-file") {
				keys, err := readSigningKeys(keyFile)
				if err != nil {
					return err
				}
				given = append(given, keys...)
			}
			generated := len(given) == 0
			return withStore(cmd.Context(), conn, "relay sub", func(ctx context.Context, _ jetstream.JetStream, s *subscribers.Store) error {
				// None given: a new key of each kind the subscriber signs with.
				sub, keys, err := subscribers.Rotate(ctx, s, id, given, grace)
				if generated {
					given = keys
				}
				if err != nil && len(keys) > 0 && !errors.Is(err, subscribers.ErrNotFound) && !errors.Is(err, subscribers.ErrInvalid) {
					// The write may have landed with its reply lost: then
					// nobody but this command knows the new secret. It
					// goes to stdout in any case, and the error says so.
					printGenerated(cmd.OutOrStdout(), given)
					return fmt.Errorf("rotating the secret of %s: %w; the key printed may or may not be stored: relay sub get %s shows whether it is", id, err, id)
				}
				if err != nil {
					return secretErr(notFound(err, id), secretFlag)
				}
				if generated {
					printGenerated(cmd.OutOrStdout(), given)
				} else {
					// A signing key given is not printed; its public key is.
					printGenerated(cmd.OutOrStdout(), slices.DeleteFunc(slices.Clone(given), func(k string) bool { return !deliver.IsSigningKey(k) }))
				}
				var until time.Time
				for _, p := range sub.PreviousSecrets {
					if p.Until.After(until) {
						until = p.Until
					}
				}
				if until.IsZero() {
					fmt.Fprintf(cmd.ErrOrStderr(), "subscriber %s: secret rotated; the old secret is no longer used\n", id)
				} else {
					fmt.Fprintf(cmd.ErrOrStderr(), "subscriber %s: secret rotated; the old secret stays valid until %s (requests carry both signatures until then)\n",
						id, until.UTC().Format(time.RFC3339))
				}
				return nil
			})
		},
	}
	fl := cmd.Flags()
	secrets.register(fl, "secret", secretLinesHint, "the new signing secret, whsec_ + base64 of 24-64 bytes (default: generate one)")
	fl.StringVar(&keyFile, "signing-key-file", "", "read the new ed25519 signing keys (whsk_..., one a line) from this file (default: generate one)")
	fl.DurationVar(&grace, "grace", subscribers.DefaultGrace, "how long the old secret still signs (0: stop at once; at most 720h)")
	return cmd
}

func newSubPauseCmd(conn *connFlags) *cobra.Command {
	var until string
	cmd := &cobra.Command{
		Use:   "pause ID [--until TIME]",
		Short: "Hold every delivery to a subscriber, new events included, until resume",
		Long: `Pauses a subscriber: every relay stops sending to it within a second, without
making a request or counting an attempt. Unlike relay sub disable, the
subscriber still gets a copy of every new event; everything waits, at no cost,
until relay sub resume, or until --until (an RFC 3339 time such as
2026-12-01T18:00:00Z, or a duration from now such as 30m), and is then
delivered. Pausing a paused subscriber replaces its pause.`,
		Example: `  relay sub pause demo --until 30m
  relay sub pause demo`,
		Args: exactArgs(1, "a subscriber ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			if err := subscribers.ValidateID(id); err != nil {
				return validationErr(err)
			}
			var at time.Time
			if cmd.Flags().Changed("until") {
				var err error
				if at, err = parseUntil(until, time.Now()); err != nil {
					return err
				}
			}
			return withStore(cmd.Context(), conn, "relay sub", func(ctx context.Context, _ jetstream.JetStream, s *subscribers.Store) error {
				sub, err := s.Pause(ctx, id, at)
				if err != nil {
					return validationErr(notFound(err, id))
				}
				if sub.PausedUntil.IsZero() {
					fmt.Fprintf(cmd.OutOrStdout(), "subscriber %s paused until relay sub resume %s\n", id, id)
				} else {
					fmt.Fprintf(cmd.OutOrStdout(), "subscriber %s paused until %s (relay sub resume %s ends it sooner)\n",
						id, sub.PausedUntil.UTC().Format(time.RFC3339), id)
				}
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&until, "until", "", "end the pause by itself at this RFC 3339 time, or after this duration from now (30m)")
	return cmd
}

// parseUntil reads --until (subscribers.ParseUntil).
func parseUntil(s string, now time.Time) (time.Time, error) {
	at, err := subscribers.ParseUntil(s, now)
	return at, validationErr(err)
}

func newSubResumeCmd(conn *connFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "resume ID",
		Short: "End a subscriber's pause and close its circuit: what it holds is delivered at once",
		Long: `Ends an operator's pause (relay sub pause), a pause a Retry-After asked for,
and an open circuit, on every relay within a second: what the subscriber holds
is delivered at once, the first delivery alone after an open circuit, and the
next cool-down starts again from the shortest. Use it once the receiver is
fixed (relay sub test shows it answers), rather than wait for the breaker's
next probe, which may be up to 15 minutes away. relay status shows the circuit
closed.`,
		Args: exactArgs(1, "a subscriber ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			return withSubscriberStore(cmd.Context(), conn, id, func(ctx context.Context, js jetstream.JetStream, s *subscribers.Store) error {
				was, flow, err := subscribers.Resume(ctx, js, s, id)
				var reset *subscribers.ResetError
				if errors.As(err, &reset) {
					return fmt.Errorf("subscriber %s: its pause or circuit was not reset (run relay sub resume %s again): %w", id, id, reset.Err)
				}
				if err != nil {
					return notFound(err, id)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "subscriber %s %s\n", id, resumed(was, flow, time.Now()))
				return nil
			})
		},
	}
}

// resumed says what relay sub resume ended: the operator's pause (paused),
// and what the subscriber's flow-control entry held before it was reset.
func resumed(paused bool, flow ratelimit.State, now time.Time) string {
	var ended []string
	if paused {
		ended = append(ended, "its pause ended")
	}
	if now.Before(flow.PausedUntil) {
		ended = append(ended, "the pause its Retry-After asked for (until "+flow.PausedUntil.UTC().Format(time.RFC3339)+") ended")
	}
	if c := flow.CircuitAt(now); c != ratelimit.Closed {
		ended = append(ended, "its circuit closed (it was "+string(c)+")")
	}
	if len(ended) == 0 {
		return "was not paused, and its circuit is closed"
	}
	if len(ended) == 1 {
		return "resumed: " + ended[0]
	}
	return "resumed:\n  " + strings.Join(ended, "\n  ")
}
