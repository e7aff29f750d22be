package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/relay-dev/relay/internal/secrets"
	"github.com/relay-dev/relay/internal/subscribers"
)

func newSecretsCmd(conn *connFlags) *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "secrets",
		Short: "Make a key that seals subscribers' secrets, and re-seal them under a new one",
	})
	cmd.AddCommand(newSecretsNewKeyCmd(), newSecretsRotateKeyCmd(conn))
	return cmd
}

func newSecretsNewKeyCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "new-key",
		Short: "Print a new random key for --secrets-key-file",
		Long: `Prints a new key on stdout: the base64 of 32 random bytes, one line, as a
--secrets-key-file holds it (openssl rand -base64 32 makes the same). Keep the
file readable by relay alone: whoever holds it can open every sealed secret.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			key, err := secrets.NewKey()
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), key)
			return err
		},
	}
}

func newSecretsRotateKeyCmd(conn *connFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "rotate-key",
		Short: "Seal every subscriber's secrets under the current key of --secrets-key-file",
		Long: `Rewrites every subscriber whose secrets are not all sealed under the current key
(the first line of --secrets-key-file): secrets stored in the clear, and secrets
sealed with an older key the file still holds on a later line. Each rewrite is a
compare-and-set, so a concurrent change is never undone; nothing else of a
subscriber changes.

To rotate: put the new key first in the key file of every relay, the old one
after it, and restart them (each then reads both); run relay secrets rotate-key
with that file; then remove the old key from the files. Every subscriber stays
deliverable throughout. A subscriber sealed with a key the file lacks is left
as it is and named; the command then exits 1.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			keys, err := conn.keys()
			if err != nil {
				return err
			}
			if keys == nil {
				return usageError{fmt.Errorf("relay secrets rotate-key: %w", subscribers.ErrNoKeys)}
			}
			return withJetStreamFor(cmd.Context(), conn, "relay secrets", 0, func(ctx context.Context, js jetstream.JetStream) error {
				store, err := subscribers.Open(ctx, js, subscribers.WithKeys(keys))
				if err != nil {
					return err
				}
				n, err := store.Reseal(ctx)
				fmt.Fprintf(cmd.OutOrStdout(), "re-sealed %d subscribers under key %s\n", n, keys.Current())
				if err == nil {
					return nil
				}
				// One line for every subscriber left as it was.
				msg := strings.ReplaceAll(err.Error(), "\n", "; ")
				if errors.Is(err, subscribers.ErrSealed) {
					msg += "; add the key each needs to the file after the current one and run again"
				}
				return errors.New(msg)
			})
		},
	}
}
