package main

import (
	"bytes"
	"cmp"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/sourcegraph/conc/pool"

	"github.com/relay-dev/relay/internal/metrics"
	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/internal/testutil"
)

// maxScrapeBytes is the bound on /metrics at 10,000 subscribers.
const maxScrapeBytes = 10 << 20

// TestMetricsScrapeAtTenThousandSubscribers measures what /metrics costs
// with 10,000 subscribers, every one of them busy: each gets an event, 9,600
// a request (most a 204, some a 500 and a retry, some a 400 and a dead
// letter) while the 400 paused ones keep theirs queued, and every one is
// rate-limited (so each has a rate in force and a relay_ratelimit entry),
// the most series a subscriber can have at once. It logs the size of a scrape
// and the time it takes, with and without the refresh of the gauges read
// from NATS, and the series of each family; it asserts the size bound and
// the histogram cap, not the times.
func TestMetricsScrapeAtTenThousandSubscribers(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 subscribers: not with -short")
	}
	// Not beside the package's parallel tests: 10,000 subscribers in a
	// server of this process, beside the other scale test's and the
	// rest, left the server no time to answer the lanes' pulls for
	// 30 s on a host running a second suite.
	const (
		total     = 10_000
		groups    = 10
		published = 10 // every group load.g0 … load.g9 gets an event
	)
	id := func(i int) string { return fmt.Sprintf("tenant-%05d-hooks", i) }
	index := func(id string) int {
		i, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(id, "tenant-"), "-hooks"))
		return i
	}
	rejects := func(i int) bool { return i%97 == 0 }
	fails := func(i int) bool { return !rejects(i) && i%50 == 0 }
	paused := func(i int) bool { return i%25 == 1 }

	n := testutil.StartRelayNATS(t)
	var mu sync.Mutex
	requested := map[string]bool{}
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		_, _ = io.Copy(io.Discard, req.Body)
		sub := strings.Trim(req.URL.Path, "/")
		mu.Lock()
		requested[sub] = true
		mu.Unlock()
		switch i := index(sub); {
		case rejects(i):
			w.WriteHeader(http.StatusBadRequest)
		case fails(i):
			w.WriteHeader(http.StatusInternalServerError)
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	}))
	t.Cleanup(rcv.Close)

	ctx := testutil.Context(t)
	store, err := subscribers.Open(ctx, n.JS)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	puts := pool.New().WithContext(ctx).WithMaxGoroutines(16).WithFirstError()
	want, held := 0, 0 // subscribers that get a request; paused ones with a queue
	for i := range total {
		switch {
		case i%groups >= published:
		case paused(i):
			held++
		default:
			want++
		}
		puts.Go(func(ctx context.Context) error {
			sub := subscribers.Subscriber{
				ID: id(i), URL: rcv.URL + "/" + id(i), Secrets: []string{testSecret},
				Events: []string{fmt.Sprintf("load.g%d", i%groups)}, Rate: 100, Paused: paused(i),
			}
			if fails(i) {
				sub.RetryBase = subscribers.Duration(time.Hour) // one attempt during the test
			}
			return store.Put(ctx, sub)
		})
	}
	if err := puts.Wait(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d subscribers stored in %v", total, time.Since(start).Round(time.Millisecond))

	base := startRelayWithMetrics(t, n.URL, "--lanes", "16")
	start = time.Now()
	for g := range published {
		publish(t, n.JS, fmt.Sprintf("load.g%d", g), fmt.Sprintf("evt_g%d", g), []byte(`{"load":true}`))
	}
	// As long as requests keep coming: on a loaded host they came at a
	// third of a quiet one's pace, and a fixed two minutes took that for a
	// stall. A timeout on the way (a KV write, a DLQ publish, a PubAck)
	// is retried within seconds, far less than the pause taken for one.
	served := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(requested)
	}
	testutil.Progress(t, served, want, 30*time.Second, "subscribers that got their request")
	// Every outcome recorded, and the paused subscribers' deliveries
	// queued, as the scrape shows them. A failing subscriber's retry may
	// wait in DELIVERIES too: when RETRIES does not take it in time (a
	// server this busy), the delivery is handed back, delayed until its
	// retry is due.
	var strays []string // queued, neither paused nor a failing one's retry: what a failure names
	outcomes := func() (settled, queued int) {
		fams := testutil.Scrape(t, base)
		for _, m := range fams["relay_deliveries_total"].GetMetric() {
			settled += int(m.GetCounter().GetValue())
		}
		strays = strays[:0]
		for _, m := range fams["relay_queue_pending"].GetMetric() {
			if m.GetGauge().GetValue() <= 0 { // one emptied a moment ago
				continue
			}
			for _, l := range m.GetLabel() {
				if l.GetName() != "subscriber" {
					continue
				}
				switch i := index(l.GetValue()); {
				case paused(i):
					queued++
				case fails(i) && m.GetGauge().GetValue() == 1: // its one retry
				default:
					strays = append(strays, fmt.Sprintf("%s (%v pending)", l.GetValue(), m.GetGauge().GetValue()))
				}
			}
		}
		return settled, queued
	}
	var settled, queued int
	if !testutil.Within(time.Minute, func() bool {
		settled, queued = outcomes()
		return settled == want && queued == held && len(strays) == 0
	}) {
		t.Fatalf("%d outcomes of %d, %d of %d paused queues shown; queued but neither paused nor a failing one's retry: %v", settled, want, queued, held, strays[:min(len(strays), 10)])
	}
	t.Logf("%d deliveries to %d subscribers settled in %v", want, want, time.Since(start).Round(time.Millisecond))

	// A context of its own: the one above bounds the set-up and the
	// deliveries, which on a loaded host took most of its two minutes.
	scrapeCtx := testutil.Context(t)
	scrape := func(encoding string) (body []byte, wire int, took time.Duration) {
		req, err := http.NewRequestWithContext(scrapeCtx, http.MethodGet, base+"/metrics", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Accept-Encoding", encoding)
		began := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		took = time.Since(began)
		if err != nil {
			t.Fatal(err)
		}
		body = raw
		if resp.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(bytes.NewReader(raw))
			if err != nil {
				t.Fatal(err)
			}
			if body, err = io.ReadAll(zr); err != nil {
				t.Fatal(err)
			}
		}
		return body, len(raw), took
	}
	// Not for correctness: so that the next scrape refreshes the gauges
	// read from NATS, and its time includes those reads.
	<-time.After(metrics.DefaultMinRefresh)
	body, _, refreshing := scrape("identity")
	_, _, cached := scrape("identity")
	_, zipped, zippedTook := scrape("gzip")
	t.Logf("/metrics at %d subscribers: %d bytes (%.1f MB), gzip %d bytes; scrape %v with the refresh from NATS, %v without, %v gzipped",
		total, len(body), float64(len(body))/1e6, zipped, refreshing.Round(time.Millisecond), cached.Round(time.Millisecond), zippedTook.Round(time.Millisecond))
	if len(body) > maxScrapeBytes {
		t.Errorf("/metrics is %d bytes at %d subscribers, over %d", len(body), total, maxScrapeBytes)
	}

	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	type family struct {
		name   string
		series int
	}
	var all []family
	lines := 0
	for name, f := range fams {
		s := len(f.GetMetric())
		all = append(all, family{name, s})
		for _, m := range f.GetMetric() {
			if h := m.GetHistogram(); h != nil {
				lines += len(h.GetBucket()) + 3
			} else {
				lines++
			}
		}
	}
	slices.SortFunc(all, func(a, b family) int { return cmp.Or(cmp.Compare(b.series, a.series), cmp.Compare(a.name, b.name)) })
	var top []string
	for _, f := range all[:min(len(all), 12)] {
		top = append(top, fmt.Sprintf("%s %d", f.name, f.series))
	}
	t.Logf("%d samples; series by family: %s", lines, strings.Join(top, ", "))

	for _, name := range []string{"relay_delivery_attempt_duration_seconds", "relay_event_delivery_latency_seconds"} {
		own, other := 0, false
		for _, m := range fams[name].GetMetric() {
			if testutil.HasLabels(m, "subscriber", metrics.OtherSubscriber) {
				other = true
			} else {
				own++
			}
		}
		if own > metrics.DefaultTopSubscribers || !other {
			t.Errorf("%s: %d subscribers with their own series (at most %d), _other present %v", name, own, metrics.DefaultTopSubscribers, other)
		}
	}
}
