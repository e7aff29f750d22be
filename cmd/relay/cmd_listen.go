package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/relay-dev/relay/internal/receiver"
)

type listenFlags struct {
	addr       string
	secretFile string
	cfg        receiver.Config
	// ready, when set (by tests), is called with the bound address.
	ready func(net.Addr)
}

func newListenCmd() *cobra.Command {
	f := &listenFlags{}
	cmd := &cobra.Command{
		Use:   "listen",
		Short: "Run a local webhook receiver that verifies signatures and prints each delivery",
		Long: `Runs a local webhook receiver for trying relay by hand. It verifies each
delivery's Standard Webhooks signature with --secret or --secret-file (v1) or
--public-key (v1a; either is enough when both are given), prints its id, attempt,
signature check, size and a preview of the body, and answers 2xx (401 for a bad
signature). --status, --fail-rate, --retry-after and --delay simulate trouble.`,
		Example: `  relay listen --addr 127.0.0.1:9000 --secret-file demo.secret
  relay listen --secret whsec_...
  relay listen --public-key whpk_...
  relay listen --status 429 --retry-after 120`,
		Args:        exactArgs(0, "no arguments"),
		Annotations: map[string]string{localOnly: "true"},
		RunE: func(cmd *cobra.Command, _ []string) error {
			f.cfg.Out = cmd.OutOrStdout()
			if f.secretFile != "" {
				secrets, err := readSecretFile(f.secretFile)
				if err != nil {
					return err
				}
				f.cfg.Secrets = append(f.cfg.Secrets, secrets...)
			}
			h, err := receiver.NewHandler(f.cfg)
			if err != nil {
				if errors.Is(err, receiver.ErrInvalidConfig) {
					return usageError{err}
				}
				return err
			}
			if _, _, err := net.SplitHostPort(f.addr); err != nil {
				return usagef("--addr: must be HOST:PORT, got %q", f.addr)
			}
			return receiver.Serve(cmd.Context(), f.addr, h, func(a net.Addr) {
				verify := "verifying signatures"
				if len(f.cfg.Secrets) == 0 && len(f.cfg.PublicKeys) == 0 {
					verify = "not verifying signatures (no --secret or --public-key)"
				}
				fmt.Fprintf(cmd.OutOrStdout(), "listening on http://%s/, %s\n", a, verify)
				if f.ready != nil {
					f.ready(a)
				}
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.addr, "addr", "127.0.0.1:9000", "HOST:PORT to listen on")
	fl.StringArrayVar(&f.cfg.Secrets, "secret", nil, "whsec_ secret to verify v1 signatures with; repeatable")
	fl.StringVar(&f.secretFile, "secret-file", "", "file of whsec_ secrets to verify v1 signatures with, one a line: unlike --secret, not shown in the process list")
	fl.StringArrayVar(&f.cfg.PublicKeys, "public-key", nil, "whpk_ public key to verify v1a (ed25519) signatures with; repeatable")
	fl.IntVar(&f.cfg.Status, "status", 0, "answer every delivery with this HTTP status")
	fl.Float64Var(&f.cfg.FailRate, "fail-rate", 0, "fraction of deliveries (0-1) to answer with 500")
	fl.StringVar(&f.cfg.RetryAfter, "retry-after", "", "Retry-After value sent with simulated 429/503/500 answers")
	fl.DurationVar(&f.cfg.Delay, "delay", 0*time.Second, "wait this long before answering")
	return cmd
}

// readSecretFile reads the secrets of --secret-file: one a line, blank lines
// and lines starting with # left out.
func readSecretFile(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, usagef("--secret-file: %v", err)
	}
	var secrets []string
	for line := range strings.Lines(string(b)) {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			secrets = append(secrets, line)
		}
	}
	if len(secrets) == 0 {
		return nil, usagef("--secret-file: %s holds no secret", path)
	}
	return secrets, nil
}
