package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/internal/testutil"
)

// uniqueIDs counts the distinct webhook-ids a receiver got and the requests
// beyond the first for each (duplicates).
func uniqueIDs(r *webhookSink) (distinct, duplicates int) {
	seen := map[string]bool{}
	for _, d := range r.deliveries() {
		id := d.header.Get("webhook-id")
		if seen[id] {
			duplicates++
		}
		seen[id] = true
	}
	return len(seen), duplicates
}

// TestStopMidBurstThenRestartLosesNothing stops relay as SIGTERM does while
// it delivers a burst: it must exit 0, and a restart delivers every event.
func TestStopMidBurstThenRestartLosesNothing(t *testing.T) {
	t.Parallel()
	const events = 300
	n := testutil.StartRelayNATS(t)
	rcv := newReceiver(t)
	mustRelay(t, "sub", "add", "demo", "--nats", n.URL, "--url", rcv.URL, "--secret", testSecret)
	for i := range events {
		publish(t, n.JS, "burst", fmt.Sprintf("e%03d", i), []byte(`{}`))
	}
	r := startRelay(t, n.URL, "--allow-private-targets")
	testutil.Eventually(t, func() bool { return rcv.count() >= events/5 }, "first relay delivered nothing")
	if code := r.stop(); code != 0 {
		t.Fatalf("relay run exited %d on stop: %s", code, r.stderr.String())
	}
	stoppedAt := rcv.count()
	startRelay(t, n.URL, "--allow-private-targets")
	testutil.Eventually(t, func() bool { d, _ := uniqueIDs(rcv); return d == events }, "events lost across a stop")
	waitIdle(t, n.JS)
	_, dups := uniqueIDs(rcv)
	t.Logf("stopped after %d of %d deliveries; %d duplicates after the restart", stoppedAt, events, dups)
	if dups != 0 {
		t.Fatalf("a clean stop caused %d duplicate deliveries", dups)
	}
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// buildRelay builds the real relay binary once for the tests that kill it.
func buildRelay(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "relay-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "relay")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

// TestKillDashNineMidBurstThenRestartLosesNothing runs the real binary,
// kills it with SIGKILL in the middle of a burst, and starts it again:
// every event published before the kill is delivered.
//
// Against a NATS server that survives (production: relay beside a cluster),
// the duplicates are bounded by what the relay had in flight: one
// subscriber's --max-in-flight, plus acks still in the dead process's
// buffer. On the embedded server the kill takes the server down too, and it
// also forgets the consumer acks it had not yet written (nats-server writes
// consumer state at most every 100 ms): those deliveries come again, so the
// bound there is about 100 ms of deliveries, measured and logged.
func TestKillDashNineMidBurstThenRestartLosesNothing(t *testing.T) {
	t.Parallel()
	t.Run("relay beside a server", func(t *testing.T) {
		t.Parallel()
		n := testutil.StartRelayNATS(t)
		dups := killMidBurst(t, []string{"--nats", n.URL}, n.URL)
		if dups > 2*16 {
			t.Fatalf("%d duplicates after kill -9, more than twice --max-in-flight", dups)
		}
	})
	t.Run("embedded server", func(t *testing.T) {
		t.Parallel()
		listen := "127.0.0.1:" + freePort(t)
		killMidBurst(t, []string{"--data", t.TempDir(), "--listen", listen}, "nats://"+listen)
	})
}

// killMidBurst publishes a burst, kills relay -9 once deliveries flow,
// restarts it, and waits for every event; it returns the duplicates.
func killMidBurst(t *testing.T, natsArgs []string, url string) int {
	t.Helper()
	const events = 400
	bin := buildRelay(t)
	rcv := newReceiver(t)
	logs := &testutil.Buffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("relay's log:\n%s", logs)
		}
	})
	start := func() *exec.Cmd {
		args := append([]string{"run", "--metrics", "", "--lanes", "4", "--allow-private-targets",
			"--ack-wait", "2s"}, natsArgs...)
		cmd := exec.Command(bin, args...)
		cmd.Stderr = logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	relay := start()
	t.Cleanup(func() {
		if relay.ProcessState == nil {
			_ = relay.Process.Kill()
			_ = relay.Wait()
		}
	})
	var nc *nats.Conn
	testutil.Eventually(t, func() bool {
		var err error
		nc, err = nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
		return err == nil
	}, "NATS not up")
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, func() bool {
		_, err := js.Consumer(context.Background(), "EVENTS", "fanout")
		return err == nil
	}, "relay did not start")
	mustRelay(t, "sub", "add", "demo", "--nats", url, "--url", rcv.URL, "--secret", testSecret)
	// Wait until deliveries flow before the burst, so that the kill lands
	// in the middle of it.
	probes := 0
	testutil.Eventually(t, func() bool {
		probes++
		publish(t, js, "warmup", fmt.Sprintf("warm%d", probes), []byte(`{}`))
		return rcv.count() > 0
	}, "nothing delivered before the burst")
	warm, _ := uniqueIDs(rcv)

	published := 0
	for ; published < events/2; published++ {
		publish(t, js, "burst", fmt.Sprintf("k%03d", published), []byte(`{}`))
	}
	testutil.Eventually(t, func() bool { return rcv.count() > 0 }, "nothing delivered before the kill")
	_ = relay.Process.Kill()
	_ = relay.Wait()
	killedAt := rcv.count()

	relay = start()
	for ; published < events; published++ {
		publish(t, js, "burst", fmt.Sprintf("k%03d", published), []byte(`{}`))
	}
	deadline := time.Now().Add(30 * time.Second)
	for d, _ := uniqueIDs(rcv); d < events+warm; d, _ = uniqueIDs(rcv) {
		if time.Now().After(deadline) {
			t.Fatalf("events lost across kill -9: %d of %d delivered\n%s", d-warm, events, jetStreamState(js))
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = relay.Process.Signal(os.Interrupt)
	if err := relay.Wait(); err != nil {
		t.Fatalf("relay run after the restart did not stop cleanly: %v", err)
	}
	_, dups := uniqueIDs(rcv)
	t.Logf("killed after %d deliveries; %d of %d events delivered twice", killedAt, dups, events)
	return dups
}

// jetStreamState describes the relay's streams and consumers, for the
// message of a failing test.
func jetStreamState(js jetstream.JetStream) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var b strings.Builder
	for name := range js.StreamNames(ctx).Name() {
		s, err := js.Stream(ctx, name)
		if err != nil {
			continue
		}
		info, _ := s.Info(ctx)
		if info != nil {
			fmt.Fprintf(&b, "stream %s: msgs %d, first %d, last %d\n", name, info.State.Msgs, info.State.FirstSeq, info.State.LastSeq)
		}
		for ci := range s.ListConsumers(ctx).Info() {
			fmt.Fprintf(&b, "  consumer %s: pending %d, ack pending %d, redelivered %d, delivered %d, ack floor %d\n",
				ci.Name, ci.NumPending, ci.NumAckPending, ci.NumRedelivered, ci.Delivered.Stream, ci.AckFloor.Stream)
		}
	}
	return b.String()
}
