package streams_test

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/internal/testutil"
	"github.com/relay-dev/relay/streams"
)

// startServer starts a JetStream server with opts' limits on a random
// loopback port, storing in a temporary directory, and returns its URL; it
// goes when the test ends.
func startServer(t *testing.T, opts *server.Options) string {
	t.Helper()
	opts.Host, opts.Port, opts.JetStream, opts.NoLog, opts.NoSigs = "127.0.0.1", server.RANDOM_PORT, true, true, true
	if opts.StoreDir == "" {
		opts.StoreDir = t.TempDir()
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	return srv.ClientURL()
}

func connect(t *testing.T, url string, opts ...nats.Option) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// ensure runs Ensure with a logger whose lines it returns.
func ensure(t *testing.T, js jetstream.JetStream, opts streams.Options) string {
	t.Helper()
	var log testutil.Buffer
	opts.Logger = slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if err := streams.Ensure(testutil.Context(t), js, opts); err != nil {
		t.Fatalf("Ensure: %v\n%s", err, log.String())
	}
	return log.String()
}

func info(t *testing.T, js jetstream.JetStream, name string) *jetstream.StreamInfo {
	t.Helper()
	s, err := js.Stream(testutil.Context(t), name)
	if err != nil {
		t.Fatalf("stream %s: %v", name, err)
	}
	return s.CachedInfo()
}

func edit(t *testing.T, js jetstream.JetStream, name string, change func(*jetstream.StreamConfig)) {
	t.Helper()
	cfg := info(t, js, name).Config
	change(&cfg)
	if _, err := js.UpdateStream(testutil.Context(t), cfg); err != nil {
		t.Fatalf("nats stream edit %s: %v", name, err)
	}
}

// sizedLine is the "streams sized" line of a log, which must be there once.
func sizedLine(t *testing.T, log string) string {
	t.Helper()
	var found []string
	for line := range strings.Lines(log) {
		if strings.Contains(line, `msg="streams sized"`) {
			found = append(found, line)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d streams sized lines, want 1:\n%s", len(found), log)
	}
	return found[0]
}

// checkDeliveriesFits checks that DELIVERIES is bounded with discard-new,
// at most half of store and at least 1 MiB, that EVENTS is bounded with
// discard-new too and leaves at least its own size unreserved (room for
// the copies of what it holds), that every relay stream and bucket exists,
// and that the log's line says so; it returns DELIVERIES' size.
func checkDeliveriesFits(t *testing.T, js jetstream.JetStream, log string, store int64) int64 {
	t.Helper()
	d := info(t, js, streams.Deliveries).Config
	if d.Discard != jetstream.DiscardNew || d.MaxBytes < 1<<20 || d.MaxBytes > store/2 {
		t.Fatalf("DELIVERIES: discard %v, max_bytes %d; want discard new and 1 MiB to %d", d.Discard, d.MaxBytes, store/2)
	}
	e := info(t, js, streams.Events).Config
	a := info(t, js, streams.Attempts).Config
	if e.Discard != jetstream.DiscardNew || e.MaxBytes < 1<<20 || d.MaxBytes+a.MaxBytes+2*e.MaxBytes > store {
		t.Fatalf("EVENTS: discard %v, max_bytes %d beside DELIVERIES' %d and ATTEMPTS' %d; want discard new, at least 1 MiB, and as much again left of %d",
			e.Discard, e.MaxBytes, d.MaxBytes, a.MaxBytes, store)
	}
	if _, ok := e.Metadata["relay_probe_max_bytes"]; ok {
		t.Errorf("EVENTS keeps the probe's mark once sized: %v", e.Metadata)
	}
	if line := sizedLine(t, log); !strings.Contains(line, fmt.Sprintf("events_max_bytes=%d ", e.MaxBytes)) {
		t.Fatalf("the sizes line does not give EVENTS' %d: %s", e.MaxBytes, line)
	}
	for _, name := range []string{streams.DLQ, streams.Retries,
		"KV_" + streams.SubscribersBucket, "KV_" + streams.RateLimitBucket, "KV_" + streams.TimelinessBucket} {
		if got := info(t, js, name).Config.MaxBytes; got != -1 {
			t.Errorf("%s: max_bytes %d, want -1 (it reserves nothing)", name, got)
		}
	}
	if line := sizedLine(t, log); !strings.Contains(line, fmt.Sprintf("deliveries_max_bytes=%d ", d.MaxBytes)) {
		t.Fatalf("the sizes line does not give DELIVERIES' %d: %s", d.MaxBytes, line)
	}
	return d.MaxBytes
}

// TestEnsureSizesDeliveriesWithinTheServersStore: on a server whose
// max_file_store is small, the account reports no limit and the server
// refuses a DELIVERIES of 4 GiB (error 10047); Ensure finds the size the
// server takes, gives DELIVERIES half of it, and every stream and bucket is
// created. A second Ensure keeps it, and a copy can be stored.
func TestEnsureSizesDeliveriesWithinTheServersStore(t *testing.T) {
	t.Parallel()
	for _, store := range []int64{64 << 20, 256 << 20, 1 << 30, 2 << 30} {
		t.Run(streams.FormatBytes(store), func(t *testing.T) {
			t.Parallel()
			js := connect(t, startServer(t, &server.Options{JetStreamMaxStore: store}))
			log := ensure(t, js, streams.Options{})
			size := checkDeliveriesFits(t, js, log, store)
			if size != store/2 {
				t.Errorf("DELIVERIES has %s of a %s store, want half", streams.FormatBytes(size), streams.FormatBytes(store))
			}
			// The records' ring takes a quarter of DELIVERIES' size, so
			// that a quarter of the store stays for the streams that
			// reserve nothing.
			a, err := js.Stream(testutil.Context(t), streams.Attempts)
			if err != nil {
				t.Fatalf("no %s: %v\n%s", streams.Attempts, err, log)
			}
			if got := a.CachedInfo().Config.MaxBytes; got != size/4 {
				t.Errorf("%s has %s beside a DELIVERIES of %s, want a quarter", streams.Attempts, streams.FormatBytes(got), streams.FormatBytes(size))
			}
			if line := sizedLine(t, log); !strings.Contains(line, "account_max_store=-1") || !strings.Contains(line, "server_limited=true") {
				t.Errorf("the sizes line does not say the server limited them: %s", line)
			}
			again := ensure(t, js, streams.Options{})
			if got := checkDeliveriesFits(t, js, again, store); got != size {
				t.Fatalf("a second Ensure changed DELIVERIES from %d to %d", size, got)
			}
			if strings.Contains(again, "level=WARN") {
				t.Errorf("a second Ensure warned:\n%s", again)
			}
			if _, err := js.Publish(testutil.Context(t), "deliveries.s00.demo", []byte("{}")); err != nil {
				t.Fatalf("storing a copy: %v", err)
			}
		})
	}
}

// TestEnsureSizesDeliveriesWithinTheAccountsLimit: an account whose
// JetStream limits say 256 MiB of file storage, on a server with plenty,
// gets a DELIVERIES of half of it, found from the account info alone.
func TestEnsureSizesDeliveriesWithinTheAccountsLimit(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	conf := filepath.Join(dir, "nats-server.conf")
	if err := os.WriteFile(conf, []byte(`
accounts {
  APP {
    jetstream { max_file: 268435456, max_mem: 16777216 }
    users: [{ user: app, password: app }]
  }
}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	opts.StoreDir = filepath.Join(dir, "jetstream")
	js := connect(t, startServer(t, opts), nats.UserInfo("app", "app"))
	log := ensure(t, js, streams.Options{})
	if size := checkDeliveriesFits(t, js, log, 256<<20); size != 128<<20 {
		t.Errorf("DELIVERIES has %s of a 256 MiB account, want 128 MiB", streams.FormatBytes(size))
	}
	if line := sizedLine(t, log); !strings.Contains(line, fmt.Sprintf("account_max_store=%d", 256<<20)) || !strings.Contains(line, "server_limited=false") {
		t.Errorf("the sizes line does not give the account's limit: %s", line)
	}
}

// TestEnsureKeepsAnOperatorsLimits: limits an operator set with
// `nats stream edit` survive a restart (a second Ensure), and so does the
// DLQ's age unless --dlq-max-age is given; what relay's correctness
// depends on (discard, retention, the duplicate window, the per-subject
// limit) is put back.
func TestEnsureKeepsAnOperatorsLimits(t *testing.T) {
	t.Parallel()
	n := testutil.StartNATS(t)
	ensure(t, n.JS, streams.Options{})
	edit(t, n.JS, streams.Deliveries, func(c *jetstream.StreamConfig) {
		c.MaxBytes, c.MaxMsgs = 512<<20, 100_000
		c.Discard = jetstream.DiscardOld
		c.MaxMsgsPerSubject = 10
	})
	edit(t, n.JS, streams.Events, func(c *jetstream.StreamConfig) {
		c.MaxBytes, c.MaxAge = 1<<30, 14*24*time.Hour
		c.Retention = jetstream.InterestPolicy
		c.MaxMsgSize = 2 << 20
	})
	edit(t, n.JS, streams.DLQ, func(c *jetstream.StreamConfig) {
		c.MaxAge = 90 * 24 * time.Hour
		c.Duplicates = time.Minute
	})
	ensure(t, n.JS, streams.Options{})

	d := info(t, n.JS, streams.Deliveries).Config
	if d.MaxBytes != 512<<20 || d.MaxMsgs != 100_000 {
		t.Errorf("DELIVERIES: max_bytes %d, max_msgs %d; want the operator's 512 MiB and 100000", d.MaxBytes, d.MaxMsgs)
	}
	if d.Discard != jetstream.DiscardNew || d.MaxMsgsPerSubject != -1 {
		t.Errorf("DELIVERIES: discard %v, max_msgs_per_subject %d; want discard new and no limit back", d.Discard, d.MaxMsgsPerSubject)
	}
	e := info(t, n.JS, streams.Events).Config
	if e.MaxBytes != 1<<30 || e.MaxAge != 14*24*time.Hour || e.Discard != jetstream.DiscardNew {
		t.Errorf("EVENTS: max_bytes %d, max_age %s, discard %v; want the operator's 1 GiB and 14 days, and discard new back", e.MaxBytes, e.MaxAge, e.Discard)
	}
	if want, _ := streams.Config(streams.Events); e.Retention != jetstream.LimitsPolicy || e.MaxMsgSize != want.MaxMsgSize {
		t.Errorf("EVENTS: retention %v, max_msg_size %d; want limits and %d back", e.Retention, e.MaxMsgSize, want.MaxMsgSize)
	}
	q := info(t, n.JS, streams.DLQ).Config
	if q.MaxAge != 90*24*time.Hour || q.Duplicates != streams.DuplicateWindow {
		t.Errorf("DLQ: max_age %s, duplicate window %s; want the operator's 90 days and %s back", q.MaxAge, q.Duplicates, streams.DuplicateWindow)
	}

	// --dlq-max-age wins over the operator's age, and the limits stay.
	ensure(t, n.JS, streams.Options{DLQMaxAge: 48 * time.Hour})
	if got := info(t, n.JS, streams.DLQ).Config.MaxAge; got != 48*time.Hour {
		t.Errorf("--dlq-max-age 48h gave the DLQ %s", got)
	}
	if got := info(t, n.JS, streams.Deliveries).Config.MaxBytes; got != 512<<20 {
		t.Errorf("DELIVERIES' max_bytes became %d", got)
	}
}

// TestEnsureWarnsOfLimitsUnderItsAdvice: a kept limit tighter than relay
// advises is kept, and said at Warn with the stream, the limit and the
// advice; an unbounded DELIVERIES is bounded again.
func TestEnsureWarnsOfLimitsUnderItsAdvice(t *testing.T) {
	t.Parallel()
	n := testutil.StartNATS(t)
	if log := ensure(t, n.JS, streams.Options{}); strings.Contains(log, "level=WARN") {
		t.Fatalf("Ensure of the definitions warned:\n%s", log)
	}
	edit(t, n.JS, streams.Deliveries, func(c *jetstream.StreamConfig) { c.MaxBytes = 4 << 20 })
	edit(t, n.JS, streams.DLQ, func(c *jetstream.StreamConfig) { c.MaxMsgs = 1000 })
	log := ensure(t, n.JS, streams.Options{})
	for _, want := range []string{
		"streams: DELIVERIES has max_bytes 4 MiB, under the 16 MiB relay advises",
		"streams: DLQ has max_msgs 1000, under the unlimited relay advises: dead letters go sooner",
	} {
		if !strings.Contains(log, "level=WARN msg=\""+want) {
			t.Errorf("no warning %q:\n%s", want, log)
		}
	}
	if got := info(t, n.JS, streams.Deliveries).Config.MaxBytes; got != 4<<20 {
		t.Errorf("DELIVERIES' max_bytes is %d, want the operator's 4 MiB kept", got)
	}
	if got := info(t, n.JS, streams.DLQ).Config.MaxMsgs; got != 1000 {
		t.Errorf("the DLQ's max_msgs is %d, want the operator's 1000 kept", got)
	}

	edit(t, n.JS, streams.Deliveries, func(c *jetstream.StreamConfig) { c.MaxBytes = -1 })
	log = ensure(t, n.JS, streams.Options{})
	d := info(t, n.JS, streams.Deliveries).Config
	want, _ := streams.Config(streams.Deliveries)
	if d.MaxBytes != want.MaxBytes || d.Discard != jetstream.DiscardNew {
		t.Errorf("an unbounded DELIVERIES became max_bytes %d, discard %v; want %d, new", d.MaxBytes, d.Discard, want.MaxBytes)
	}
	if !strings.Contains(log, "streams: DELIVERIES had no max_bytes: bounded to 4 GiB") {
		t.Errorf("no warning of the bound:\n%s", log)
	}
}

// TestEnsureRefusesAServerWithoutRoom: a server whose store cannot hold
// even the smallest DELIVERIES makes Ensure fail with ErrNoStorage, saying
// what is missing, rather than run without a bound.
func TestEnsureRefusesAServerWithoutRoom(t *testing.T) {
	t.Parallel()
	js := connect(t, startServer(t, &server.Options{JetStreamMaxStore: 1 << 20}))
	err := streams.Ensure(testutil.Context(t), js, streams.Options{Logger: slog.New(slog.DiscardHandler)})
	if !errors.Is(err, streams.ErrNoStorage) {
		t.Fatalf("Ensure on a 1 MiB store: %v, want ErrNoStorage", err)
	}
}

func TestFormatBytes(t *testing.T) {
	t.Parallel()
	for n, want := range map[int64]string{
		-1: "unlimited", 0: "unlimited", 512: "512 B", 1536: "1.5 KiB",
		32 << 20: "32 MiB", 4 << 30: "4 GiB", 3 << 39: "1.5 TiB",
	} {
		if got := streams.FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestEnsureSizesAgainADeliveriesLeftAtItsProbe: DELIVERIES is created at
// the size that probes the account's storage and then lowered; one found
// still at that size (a relay stopped between the two, or the update
// failed) is sized again, while the same size set by an operator is kept.
func TestEnsureSizesAgainADeliveriesLeftAtItsProbe(t *testing.T) {
	t.Parallel()
	n := testutil.StartNATS(t)
	ensure(t, n.JS, streams.Options{})
	sized := info(t, n.JS, streams.Deliveries).Config
	if _, ok := sized.Metadata["relay_probe_max_bytes"]; ok {
		t.Fatalf("DELIVERIES keeps the probe's mark once sized: %v", sized.Metadata)
	}
	probe := 2 * sized.MaxBytes
	edit(t, n.JS, streams.Deliveries, func(c *jetstream.StreamConfig) {
		c.MaxBytes = probe
		c.Metadata = map[string]string{"relay_probe_max_bytes": strconv.FormatInt(probe, 10)}
	})
	ensure(t, n.JS, streams.Options{})
	again := info(t, n.JS, streams.Deliveries).Config
	if again.MaxBytes != sized.MaxBytes {
		t.Errorf("left at its probe of %d, DELIVERIES has %d, want %d again", probe, again.MaxBytes, sized.MaxBytes)
	}
	if _, ok := again.Metadata["relay_probe_max_bytes"]; ok {
		t.Errorf("the probe's mark stayed: %v", again.Metadata)
	}

	edit(t, n.JS, streams.Deliveries, func(c *jetstream.StreamConfig) { c.MaxBytes = probe })
	ensure(t, n.JS, streams.Options{})
	if got := info(t, n.JS, streams.Deliveries).Config.MaxBytes; got != probe {
		t.Errorf("an operator's %d became %d", probe, got)
	}
}
