package docs

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/relay-dev/relay/internal/testutil"
)

// root is the repository, relative to this package.
var root = filepath.Join("..", "..")

// setup are the lines of the README's set-up the test does itself, or
// checks, rather than run: it builds relay and runs it as make run does,
// and make test is the whole suite this test is part of.
var setup = map[string]string{
	"make run":               "the test runs relay run --allow-private-targets, as make run does (checked against the Makefile)",
	"make test":              "the suite this test is part of (its target is checked in the Makefile)",
	"go install ./cmd/relay": "the test puts the relay it built from ./cmd/relay on PATH",
	"go install github.com/nats-io/natscli/nats@v0.5.0": "the test takes the nats CLI from PATH",
}

// pending are lines of the docs whose behaviour is not built yet: the line
// is left out, and the test says so. None today.
var pending = map[string]string{}

// exitsComment is a line's "# exits N": the exit status the reader is told
// to expect.
var exitsComment = regexp.MustCompile(`#\s*exits (\d+)`)

// receiverAddr is a loopback address the docs give a receiver.
var receiverAddr = regexp.MustCompile(`127\.0\.0\.1:9\d\d\d`)

// commands returns the commands of doc's ```sh blocks, in order, a line
// ending in \ joined with the next.
func commands(doc string) []string {
	var cmds []string
	in := false
	cur := ""
	for line := range strings.Lines(doc) {
		line = strings.TrimRight(line, "\n")
		switch {
		case strings.HasPrefix(line, "```sh"):
			in = true
			continue
		case strings.HasPrefix(line, "```"):
			in = false
			continue
		case !in:
			continue
		}
		if strings.HasSuffix(line, "\\") {
			cur += strings.TrimSuffix(line, "\\")
			continue
		}
		cur += line
		if strings.TrimSpace(cur) != "" {
			cmds = append(cmds, strings.TrimSpace(cur))
		}
		cur = ""
	}
	return cmds
}

// script is the bash script that runs cmds one after another in one shell,
// as a reader pastes them: each must exit as the docs say (0, or its
// "# exits N"), and one that does not is run again for up to 20 s, as a
// reader would a moment later (a trace before the event's first attempt).
func script(t *testing.T, cmds []string, addrs map[string]string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString(`set -u
trap 'kill $(jobs -p) 2>/dev/null' EXIT
try() {
  local want=$1 cmd=$2 end=$((SECONDS+20)) got
  while :; do
    echo "\$ $cmd" >&2
    eval "$cmd"
    got=$?
    if [ "$got" = "$want" ]; then return 0; fi
    if [ $SECONDS -ge $end ]; then echo "docs: exit $got, want $want: $cmd" >&2; exit 1; fi
    sleep 0.5
  done
}
`)
	for _, c := range cmds {
		bare := strings.TrimSpace(strings.SplitN(c, " #", 2)[0])
		if why, ok := setup[bare]; ok {
			t.Logf("not run: %s (%s)", c, why)
			continue
		}
		if why, ok := pending[bare]; ok {
			t.Logf("SKIPPED: %s: %s", c, why)
			continue
		}
		want := "0"
		if m := exitsComment.FindStringSubmatch(c); m != nil {
			want = m[1]
		}
		c = receiverAddr.ReplaceAllStringFunc(c, func(a string) string {
			if addrs[a] == "" {
				addrs[a] = testutil.FreeAddr(t)
			}
			return addrs[a]
		})
		fmt.Fprintf(&b, "try %s '%s'\n", want, strings.ReplaceAll(c, "'", `'\''`))
	}
	return b.String()
}

// TestDocsCommandBlocksRunAsWritten runs every command of README.md's and
// docs/recipes.md's ```sh blocks, in order, in one shell per file with the
// built relay and the nats CLI on PATH, against relay run on its embedded
// NATS server as make run starts it, and fails on a command that does not
// exit as the docs say.
func TestDocsCommandBlocksRunAsWritten(t *testing.T) {
	t.Parallel()
	natsCLI, err := exec.LookPath("nats")
	if err != nil {
		t.Skip("the nats CLI is not on PATH: go install github.com/nats-io/natscli/nats@v0.5.0")
	}
	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"\nrun: ", "\t$(GO) run ./cmd/relay run --allow-private-targets\n", "\ntest: ", "\t$(GO) test -race"} {
		if !strings.Contains(string(makefile), want) {
			t.Fatalf("the Makefile lacks %q, which the README's set-up says", strings.TrimSpace(want))
		}
	}
	bin := testutil.Build(t, "github.com/relay-dev/relay/cmd/relay")
	natsURL := startEmbedded(t, bin)
	path := filepath.Dir(bin) + string(os.PathListSeparator) + filepath.Dir(natsCLI) + string(os.PathListSeparator) + os.Getenv("PATH")
	if out, err := exec.Command(natsCLI, "--version").CombinedOutput(); err == nil {
		t.Logf("nats CLI %s", strings.TrimSpace(string(out)))
	}

	for _, doc := range []string{"README.md", filepath.Join("docs", "recipes.md")} {
		raw, err := os.ReadFile(filepath.Join(root, doc))
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		cmds := commands(string(raw))
		if len(cmds) < 5 {
			t.Fatalf("%s: %d commands in its ```sh blocks", doc, len(cmds))
		}
		s := script(t, cmds, map[string]string{})
		if doc == "README.md" {
			// The first delivery has reached relay listen, which printed it.
			s += "try 0 'relay trace evt_01 | grep -q delivered'\n"
		}
		if os.Getenv("DOCS_SHOW") != "" {
			defer func() { t.Logf("%s:\n%s", doc, out.String()) }()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		cmd := exec.CommandContext(ctx, "bash", "-c", s)
		cmd.Dir = t.TempDir()
		cmd.Env = append(os.Environ(), "PATH="+path, "NATS_URL="+natsURL)
		cmd.Stdout, cmd.Stderr = &out, &out
		err = cmd.Run()
		cancel()
		if err != nil {
			t.Errorf("%s, as written: %v\n%s", doc, err, testutil.Tail(out.String(), 6000))
			continue
		}
		t.Logf("%s: %d commands ran as written", doc, len(cmds))
		if doc == "README.md" && !strings.Contains(out.String(), "webhook-id: evt_01  signature: ok  reply: 200") {
			t.Errorf("README.md: relay listen printed no verified delivery of evt_01:\n%s", testutil.Tail(out.String(), 4000))
		}
	}
}

// startEmbedded starts the built relay as make run does, on an embedded
// NATS server, on free ports and its own data directory, and returns the
// server's URL once relay is ready.
func startEmbedded(t *testing.T, bin string) string {
	t.Helper()
	listen, metrics := testutil.FreeAddr(t), testutil.FreeAddr(t)
	testutil.StartBuiltRelay(t, bin, metrics, "run", "--allow-private-targets", "--data", t.TempDir(), "--listen", listen, "--metrics", metrics)
	return "nats://" + listen
}

// readFile is the text of a file of the repository.
func readFile(name string) (string, error) {
	b, err := os.ReadFile(filepath.Join(root, name))
	return string(b), err
}
