package cli

import (
	"bufio"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/relay-dev/relay/internal/testutil"
)

// packagePrefix is a package's name before a colon, as Go code writes it
// into an error ("deliver: connection failed"): a user reads none.
var packagePrefix = regexp.MustCompile(`\b(attempts|backlog|consumer|deadletter|deliver|fanout|lanes|overflow|receiver|requests|retention|retry|secrets|status|subscribers|testrequest|timeliness): `)

// TestMessagesSayOneThingOneWay: a missing subscriber is "no such
// subscriber: ID" for every command that names one, a missing dead letter
// "no such dead letter"; no message carries a package's name; relay
// --version is relay version; relay run that cannot reach NATS says what to
// check as the other commands do; sub test --type with --data says the two
// cannot be combined.
func TestMessagesSayOneThingOneWay(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	const missing = "relay: no such subscriber: nope (relay sub ls lists them)\n"
	for _, args := range [][]string{
		{"sub", "get", "nope"}, {"sub", "rm", "nope"}, {"sub", "update", "nope", "--rate", "3"},
		{"sub", "pause", "nope"}, {"sub", "resume", "nope"}, {"sub", "enable", "nope"}, {"sub", "disable", "nope"},
		{"sub", "rotate-secret", "nope"}, {"sub", "test", "nope"}, {"status", "--subscriber", "nope"},
	} {
		if r := e.run(args...); r.code != 1 || r.stderr != missing {
			t.Errorf("relay %s: exit %d, printed %q; want exit 1 and %q", strings.Join(args, " "), r.code, r.stderr, missing)
		}
	}
	if r := e.run("dlq", "show", "999"); r.code != 1 || r.stderr != "relay: no such dead letter: DLQ sequence 999\n" {
		t.Errorf("relay dlq show 999: exit %d, printed %q", r.code, r.stderr)
	}
	e.must("sub", "add", "demo", "--url", "http://127.0.0.1:1/", "--secret", testSecret, "--events", "video.*", "--max-attempts", "1")
	if r := e.run("sub", "test", "demo", "--type", "x", "--data", "{}"); r.code != 2 || !strings.Contains(r.stderr, "--type and --data cannot be combined") {
		t.Errorf("relay sub test --type --data: exit %d, printed %q", r.code, r.stderr)
	}

	local := []string{"NATS_URL="}
	version := runBin(t, e.bin, local, "version")
	if r := runBin(t, e.bin, local, "--version"); r.code != 0 || r.stdout != version.stdout || !strings.HasPrefix(r.stdout, "relay ") {
		t.Errorf("relay --version printed %q (exit %d); relay version printed %q", r.stdout, r.code, version.stdout)
	}
	for _, cmd := range []string{"listen", "version"} {
		if r := runBin(t, e.bin, local, cmd, "--help"); strings.Contains(r.stdout, "--nats") || strings.Contains(r.stdout, "--creds") {
			t.Errorf("relay %s --help shows the NATS flags it does not use:\n%s", cmd, r.stdout)
		}
	}
	down := "nats://" + closedAddr(t)
	for _, args := range [][]string{
		{"run", "--nats", down, "--metrics", ""},
		{"status", "--nats", down},
	} {
		r := runBin(t, e.bin, local, args...)
		if r.code != 1 || !strings.Contains(r.stderr, "cannot connect to NATS at "+down) || !strings.Contains(r.stderr, "a NATS server up?") {
			t.Errorf("relay %s: exit %d, printed %q; want the hint of an unreachable NATS", strings.Join(args, " "), r.code, r.stderr)
		}
	}

	for _, args := range [][]string{
		{"listen", "--secret", "bad"},
		{"listen", "--public-key", "bad"},
		{"listen", "--status", "700"},
	} {
		r := runBin(t, e.bin, local, args...)
		flag := args[1]
		if r.code != 2 || !strings.HasPrefix(r.stderr, "relay: "+flag+":") && !strings.HasPrefix(r.stderr, "relay: "+flag+" ") {
			t.Errorf("relay %s: exit %d, printed %q; want exit 2 and a line that starts with the flag", strings.Join(args, " "), r.code, r.stderr)
		}
		if m := packagePrefix.FindString(r.stderr); m != "" || strings.Contains(r.stderr, "invalid config") {
			t.Errorf("relay %s: %q names a package or a config", strings.Join(args, " "), r.stderr)
		}
	}

	// A dead letter's error is a user's to read too.
	e.publish("video.trending", "evt_down", `{}`)
	testutil.Eventually(t, func() bool {
		return strings.Contains(e.run("dlq", "ls", "--json").stdout, "evt_down")
	}, "the dead letter of evt_down")
	for _, args := range [][]string{{"dlq", "ls"}, {"dlq", "ls", "--json"}, {"trace", "evt_down"}} {
		r := e.must(args...)
		if !strings.Contains(r.stdout, "connection refused") {
			t.Errorf("relay %s does not show the error:\n%s", strings.Join(args, " "), r.stdout)
		}
		if m := packagePrefix.FindString(r.stdout + r.stderr); m != "" {
			t.Errorf("relay %s names a package (%q):\n%s%s", strings.Join(args, " "), m, r.stdout, r.stderr)
		}
	}
}

// closedAddr is a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestListenPrintsTheTimeAndTheEventID: relay listen, its secret read from
// --secret-file, prints each delivery with the time of day and, for an
// event whose webhook-id had to escape its id, the relay-event-id relay
// sent with it.
func TestListenPrintsTheTimeAndTheEventID(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	secretFile := filepath.Join(e.dir, "demo.secret")
	addr := testutil.FreeAddr(t)
	out := &testutil.Buffer{}
	// sub add without --secret prints the secret it generated, and only it.
	add := e.must("sub", "add", "demo", "--url", "http://"+addr+"/", "--events", "order.*")
	if err := os.WriteFile(secretFile, []byte(add.stdout), 0o600); err != nil {
		t.Fatal(err)
	}
	listen := exec.Command(e.bin, "listen", "--addr", addr, "--secret-file", secretFile)
	listen.Stdout, listen.Stderr = out, out
	p := testutil.StartProcess(t, listen)
	t.Cleanup(func() { _ = p.Stop(syscall.SIGTERM, 10*time.Second) })
	testutil.Eventually(t, func() bool { return strings.Contains(out.String(), "listening on") }, "relay listen did not start: %s", out)
	before := time.Now()
	e.publish("order.created", "order.42.created", `{"order":42}`)
	testutil.Eventually(t, func() bool { return strings.Contains(out.String(), "signature: ok") }, "relay listen verified no delivery: %s", out)
	after := time.Now()

	var first, second string
	sc := bufio.NewScanner(strings.NewReader(out.String()))
	for sc.Scan() {
		if strings.Contains(sc.Text(), "webhook-id: ") {
			first = sc.Text()
			sc.Scan()
			second = sc.Text()
			break
		}
	}
	stamp, _, _ := strings.Cut(first, " ")
	at, err := time.ParseInLocation(time.TimeOnly, stamp, time.Local)
	if err != nil {
		t.Fatalf("relay listen's line starts with no time of day: %q", first)
	}
	clock := func(t time.Time) int { h, m, s := t.Clock(); return h*3600 + m*60 + s }
	// Seconds from before to the time printed, across a midnight too.
	if since := (clock(at) - clock(before) + 86400) % 86400; since > int(after.Sub(before).Seconds())+1 {
		t.Errorf("relay listen printed %s, outside %s..%s", stamp, before.Format(time.TimeOnly), after.Format(time.TimeOnly))
	}
	if !strings.Contains(first, "webhook-id: order~2E42~2Ecreated") || !strings.Contains(second, "relay-event-id: order.42.created") {
		t.Errorf("relay listen printed\n%s\n%s\nwant the webhook-id and the relay-event-id", first, second)
	}
}
