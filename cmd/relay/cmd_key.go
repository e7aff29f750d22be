package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/relay-dev/relay/internal/apikeys"
	"github.com/relay-dev/relay/streams"
)

func newKeyCmd(conn *connFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "key",
		Short: "Manage the keys of the HTTP API (relay run --api)",
		Long: `Manages the keys of the HTTP API. relay keeps only each key's SHA-256, its
scopes, when it was made and when it was last used, in the KV bucket
relay_keys: a key is shown once, by relay key add, and never again. A key
removed is refused by every relay within a second.

Scopes: ` + apikeys.ScopeNames() + ` (admin grants every other).`,
		Args: exactArgs(0, "a subcommand: add, ls or rm"),
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newKeyAddCmd(conn), newKeyLsCmd(conn), newKeyRmCmd(conn))
	return cmd
}

// withKeys is withJetStream with the key bucket opened; create makes it
// when it does not exist (relay key add).
func withKeys(ctx context.Context, conn *connFlags, create bool, fn func(ctx context.Context, s *apikeys.Store) error) error {
	return withJetStream(ctx, conn, "relay key", func(ctx context.Context, js jetstream.JetStream) error {
		if create {
			if err := streams.EnsureKeys(ctx, js, 0); err != nil {
				return err
			}
		}
		s, err := apikeys.Open(ctx, js)
		if err != nil {
			return err
		}
		return fn(ctx, s)
	})
}

// keyErr turns a rule a name or a scope list breaks into a usage error.
func keyErr(err error) error {
	if errors.Is(err, apikeys.ErrInvalidName) || errors.Is(err, apikeys.ErrInvalidScope) || errors.Is(err, apikeys.ErrExists) {
		return usageError{err}
	}
	return err
}

func newKeyAddCmd(conn *connFlags) *cobra.Command {
	var scopes string
	cmd := &cobra.Command{
		Use:   "add NAME --scopes SCOPE[,SCOPE…]",
		Short: "Make a key: printed alone on stdout, once",
		Example: `  relay key add backend --scopes publish,subscribers:read
  KEY=$(relay key add ops --scopes admin)`,
		Args: exactArgs(1, "a key name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := apikeys.ValidateName(args[0]); err != nil {
				return keyErr(err)
			}
			list, err := apikeys.ParseScopes(scopes)
			if err != nil {
				return usagef("--scopes: %v", err)
			}
			return withKeys(cmd.Context(), conn, true, func(ctx context.Context, s *apikeys.Store) error {
				key, err := s.Add(ctx, args[0], list)
				if err != nil {
					return keyErr(err)
				}
				_, err = fmt.Fprintln(cmd.OutOrStdout(), key)
				return err
			})
		},
	}
	cmd.Flags().StringVar(&scopes, "scopes", "", "what the key may do, comma-separated: "+apikeys.ScopeNames())
	return cmd
}

func newKeyLsCmd(conn *connFlags) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List the keys: names, scopes, times (never a key)",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			err := withKeys(cmd.Context(), conn, false, func(ctx context.Context, s *apikeys.Store) error {
				keys, err := s.List(ctx)
				if err != nil {
					return err
				}
				shown := make([]apikeys.Shown, 0, len(keys))
				for _, k := range keys {
					shown = append(shown, k.Shown())
				}
				return printList(cmd.OutOrStdout(), shown, asJSON, false, noKeys,
					"NAME\tSCOPES\tCREATED\tLAST_USED", func(k apikeys.Shown) string {
						names := make([]string, len(k.Scopes))
						for i, sc := range k.Scopes {
							names[i] = string(sc)
						}
						used := "never"
						if k.LastUsedAt != nil {
							used = k.LastUsedAt.UTC().Format(time.RFC3339)
						}
						return strings.Join([]string{k.Name, strings.Join(names, ","), k.CreatedAt.UTC().Format(time.RFC3339), used}, "\t")
					})
			})
			if errors.Is(err, jetstream.ErrBucketNotFound) {
				// No key was ever made on this cluster.
				return printList(cmd.OutOrStdout(), []apikeys.Shown{}, asJSON, false, noKeys, "", nil)
			}
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array")
	return cmd
}

// noKeys is what relay key ls prints when there are none.
const noKeys = "no keys; make one with: relay key add NAME --scopes SCOPE"

func newKeyRmCmd(conn *connFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "rm NAME",
		Short: "Remove a key: every relay refuses it within a second",
		Args:  exactArgs(1, "a key name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := apikeys.ValidateName(args[0]); err != nil {
				return keyErr(err)
			}
			return withKeys(cmd.Context(), conn, false, func(ctx context.Context, s *apikeys.Store) error {
				if err := s.Remove(ctx, args[0]); err != nil {
					return err
				}
				_, err := fmt.Fprintf(cmd.OutOrStdout(), "key %s removed\n", args[0])
				return err
			})
		},
	}
}
