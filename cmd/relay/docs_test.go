package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// cliDoc is the command-line reference, relative to this package.
var cliDoc = filepath.Join("..", "..", "docs", "cli.md")

// docSections splits a markdown document into its sections: the text under
// each heading, up to the next heading of any level, keyed by the heading's
// text without its #s and backticks ("## `relay dlq replay`" is
// "relay dlq replay").
func docSections(doc string) map[string]string {
	sections := map[string]string{}
	var name string
	var body strings.Builder
	flush := func() {
		if name != "" {
			sections[name] += body.String()
		}
		body.Reset()
	}
	inFence := false
	for line := range strings.Lines(doc) {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "```") {
			inFence = !inFence
		}
		if !inFence && strings.HasPrefix(trimmed, "#") {
			flush()
			name = strings.TrimSpace(strings.ReplaceAll(strings.TrimLeft(trimmed, "#"), "`", ""))
			continue
		}
		body.WriteString(line)
	}
	flush()
	return sections
}

// visitCommands calls fn for cmd and every command below it, leaving out
// cobra's own help and completion commands.
func visitCommands(cmd *cobra.Command, fn func(*cobra.Command)) {
	if cmd.Name() == "help" || cmd.Name() == "completion" {
		return
	}
	fn(cmd)
	for _, sub := range cmd.Commands() {
		visitCommands(sub, fn)
	}
}

// TestDocsCLIReferenceCoversEveryCommandAndFlag walks the command tree of
// relay --help and checks that docs/cli.md has a section for every command
// and names, in it, every flag the command defines (its local flags and the
// persistent ones defined on it; inherited persistent flags are documented
// under the command that defines them).
func TestDocsCLIReferenceCoversEveryCommandAndFlag(t *testing.T) {
	raw, err := os.ReadFile(cliDoc)
	if err != nil {
		t.Fatalf("reading the command-line reference: %v", err)
	}
	sections := docSections(string(raw))
	root := newRoot(io.Discard, io.Discard)
	commands, flags := 0, 0
	visitCommands(root, func(cmd *cobra.Command) {
		commands++
		path := cmd.CommandPath()
		body, ok := sections[path]
		if !ok {
			t.Errorf("docs/cli.md has no section for %q: add a heading \"## %s\" (\"### %s\" for a subcommand) describing it and its flags",
				path, path, path)
		}
		seen := map[string]bool{}
		check := func(f *pflag.Flag) {
			if f.Name == "help" || seen[f.Name] {
				return
			}
			seen[f.Name] = true
			flags++
			if ok && !strings.Contains(body, "`--"+f.Name+"`") {
				t.Errorf("docs/cli.md, section %q: flag --%s is not documented: add a row \"| `--%s` | %s | %s |\" to its table",
					path, f.Name, f.Name, defaultText(f), f.Usage)
			}
		}
		cmd.LocalNonPersistentFlags().VisitAll(check)
		cmd.PersistentFlags().VisitAll(check)
	})
	if commands < 2 || flags == 0 {
		t.Fatalf("walked %d commands and %d flags: the command tree was not built", commands, flags)
	}
	t.Logf("checked %d commands and %d flags against docs/cli.md", commands, flags)
}

// defaultText is a flag's default as the reference writes it.
func defaultText(f *pflag.Flag) string {
	switch f.DefValue {
	case "", "[]":
		return "none"
	}
	return "`" + f.DefValue + "`"
}

// TestDocsSectionsParse checks the section splitter the reference test
// relies on: headings of any level, backticks dropped, fenced code left
// alone.
func TestDocsSectionsParse(t *testing.T) {
	doc := "# Title\nintro\n## relay run\n`--lanes`\n```\n# not a heading\n```\n### `relay sub add`\n`--url`\n"
	s := docSections(doc)
	if !strings.Contains(s["relay run"], "`--lanes`") || !strings.Contains(s["relay run"], "# not a heading") {
		t.Errorf("relay run section: %q", s["relay run"])
	}
	if !strings.Contains(s["relay sub add"], "`--url`") || strings.Contains(s["relay run"], "`--url`") {
		t.Errorf("sections leak into each other: %q", s)
	}
}
