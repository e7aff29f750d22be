package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
)

// Exit codes of docs/cli.md "Exit codes".
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// usageError marks an error the user can fix by changing the command line;
// it exits 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// run is the whole program behind main, testable with its arguments and
// output streams.
//
// A command whose connection NATS refuses a subject is stopped at once and
// fails with the refusal, not with the timeout its request would end in.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	root, conn := newRootConn(stdout, stderr)
	conn.refused = newRefusals(func(*nats.Conn) { stop() }, nil)
	root.SetArgs(args)
	err := notFound(conn.refused.explain(root.ExecuteContext(ctx)), "")
	if err == nil {
		return exitOK
	}
	fmt.Fprintf(stderr, "relay: %s\n", oneLine(err.Error()))
	var ue usageError
	if errors.As(err, &ue) || isCobraUsage(err) {
		return exitUsage
	}
	return exitFailure
}

// isCobraUsage recognises the errors cobra itself returns for a command
// line it cannot parse.
func isCobraUsage(err error) bool {
	msg := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand", "accepts ", "requires ", "invalid argument", "flag needs an argument", "required flag"} {
		if strings.HasPrefix(msg, p) || strings.Contains(msg, " "+p) {
			return true
		}
	}
	return false
}

// group makes cmd, a command of commands, refuse an argument that names
// none of them: cobra prints the group's help and succeeds otherwise, so a
// mistyped `relay sub tset x` would do nothing and exit 0.
func group(cmd *cobra.Command) *cobra.Command {
	cmd.Args = cobra.ArbitraryArgs
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 || args[0] == "help" {
			return cmd.Help()
		}
		var names []string
		for _, c := range cmd.Commands() {
			if c.IsAvailableCommand() {
				names = append(names, c.Name())
			}
		}
		return usagef("unknown command %q for %q; its commands: %s", args[0], cmd.CommandPath(), strings.Join(names, ", "))
	}
	return cmd
}

func oneLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}

func newRoot(stdout, stderr io.Writer) *cobra.Command {
	root, _ := newRootConn(stdout, stderr)
	return root
}

// newRootConn is newRoot, with the connection flags its commands share.
func newRootConn(stdout, stderr io.Writer) (*cobra.Command, *connFlags) {
	root := &cobra.Command{
		Use:   "relay",
		Short: "Deliver NATS JetStream events to webhooks, within every subscriber's rate, losing none",
		Long: `relay delivers events published on the EVENTS stream (nats pub events.<type> ...)
to every matching subscriber's webhook, signed with Standard Webhooks headers.

Every command that talks to NATS takes --nats URL (or NATS_URL) and the usual
NATS credential flags; without them, relay run starts an embedded NATS server.`,
		SilenceErrors: true,
		SilenceUsage:  true,
		CompletionOptions: cobra.CompletionOptions{
			DisableDefaultCmd: true,
		},
	}
	root.Version = version
	root.SetVersionTemplate("relay {{.Version}}\n")
	root.SetUsageTemplate(usageTemplate)
	root.SetHelpTemplate(helpTemplate)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return usageError{err}
	})
	conn := addConnFlags(root)
	root.AddCommand(
		newRunCmd(conn),
		newSubCmd(conn),
		newDLQCmd(conn),
		newStatusCmd(conn),
		newTraceCmd(conn),
		newKeyCmd(conn),
		newSecretsCmd(conn),
		newListenCmd(),
		newVersionCmd(),
	)
	return root, conn
}

// helpWidth is the width every line of --help fits, as every table of
// relay's fits it unless --wide.
const helpWidth = 100

// localOnly is the annotation of a command that talks to no NATS server
// (relay listen, relay version): its help leaves out the connection flags
// it would not use.
const localOnly = "relay.local-only"

func init() {
	cobra.AddTemplateFunc("fitWidth", fitWidth)
}

// helpTemplate is cobra's, the text fitted to helpWidth.
const helpTemplate = `{{with (or .Long .Short)}}{{. | fitWidth | trimTrailingWhitespaces}}

{{end}}{{if or .Runnable .HasSubCommands}}{{.UsageString}}{{end}}`

// fitWidth breaks each line of s longer than helpWidth at spaces, the
// lines it makes indented as the line was.
func fitWidth(s string) string {
	var b strings.Builder
	for line := range strings.Lines(s) {
		line = strings.TrimRight(line, "\n")
		indent := line[:len(line)-len(strings.TrimLeft(line, " "))]
		for utf8.RuneCountInString(line) > helpWidth {
			cut := strings.LastIndexByte(string([]rune(line)[:helpWidth+1]), ' ')
			if cut <= len(indent) {
				break
			}
			b.WriteString(line[:cut] + "\n")
			line = indent + strings.TrimLeft(line[cut:], " ")
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}

// usageTemplate is cobra's, its flags' text wrapped to helpWidth and the
// global flags left out of a localOnly command's help.
var usageTemplate = `Usage:{{if .Runnable}}
{{.UseLine | printf "  %s" | fitWidth | trimTrailingWhitespaces}}{{end}}{{if .HasAvailableSubCommands}}
  {{.CommandPath}} [command]{{end}}{{if gt (len .Aliases) 0}}

Aliases:
  {{.NameAndAliases}}{{end}}{{if .HasExample}}

Examples:
{{.Example | fitWidth | trimTrailingWhitespaces}}{{end}}{{if .HasAvailableSubCommands}}

Available Commands:{{range .Commands}}{{if (or .IsAvailableCommand (eq .Name "help"))}}
  {{rpad .Name .NamePadding }} {{.Short}}{{end}}{{end}}{{end}}{{if .HasAvailableLocalFlags}}

Flags:
{{.LocalFlags.FlagUsagesWrapped ` + strconv.Itoa(helpWidth) + ` | trimTrailingWhitespaces}}{{end}}{{if and .HasAvailableInheritedFlags (not (index .Annotations "` + localOnly + `"))}}

Global Flags:
{{.InheritedFlags.FlagUsagesWrapped ` + strconv.Itoa(helpWidth) + ` | trimTrailingWhitespaces}}{{end}}{{if .HasAvailableSubCommands}}

Use "{{.CommandPath}} [command] --help" for more information about a command.{{end}}
`

// exactArgs is cobra.ExactArgs with an error that exits 2 and says what the
// command wants.
func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usagef("%s: expects %s, got %d arguments (see %[1]s --help)", cmd.CommandPath(), what, len(args))
		}
		return nil
	}
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:         "version",
		Short:       "Print relay's version (as relay --version)",
		Annotations: map[string]string{localOnly: "true"},
		Args:        exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintf(cmd.OutOrStdout(), "relay %s\n", version)
			return nil
		},
	}
}
