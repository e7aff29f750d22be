package main

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"

	"github.com/relay-dev/relay/internal/testutil"
)

// The files of deploy/, from this package's directory.
var (
	deployDashboard  = filepath.Join("..", "..", "deploy", "grafana", "relay.json")
	deployAlerts     = filepath.Join("..", "..", "deploy", "prometheus", "alerts.yml")
	deployPrometheus = filepath.Join("..", "..", "deploy", "prometheus", "prometheus.yml")
)

// sharedGauges are the gauges every relay reports alike, about a subscriber
// and not about itself: a query must combine them with max, never sum them.
var sharedGauges = []string{
	"relay_queue_pending",
	"relay_queue_oldest_age_seconds",
	"relay_subscriber_paused",
	"relay_circuit_open",
	"relay_ratelimit_effective_rate",
}

// notExported are the names a query may use that no relay exports:
// Prometheus's own series about a scrape.
var notExported = []string{"up"}

// targetLabels are the labels Prometheus adds to every series it scrapes.
var targetLabels = []string{"job", "instance"}

// grafanaBuiltins are Grafana's global variables a dashboard query may use,
// with a value that makes the query valid PromQL.
var grafanaBuiltins = map[string]string{
	"__rate_interval": "5m",
	"__interval":      "1m",
	"__interval_ms":   "60000",
	"__range":         "1h",
	"__range_s":       "3600",
	"__range_ms":      "3600000",
}

// query is one PromQL expression of deploy/, and where it is.
type query struct {
	where string
	expr  string
}

// use is one metric a query selects, and the labels it needs of it.
type use struct {
	where  string
	labels []string
}

// TestDeployQueriesUseWhatRelayExports: every PromQL expression of the
// Grafana dashboard and of the alert rules parses, and every metric and
// label it selects is one a running relay exports once it has delivered,
// retried and dead-lettered (else a panel stays empty, or an alert can
// never fire, without anyone noticing). The rules load as promtool check
// rules loads them, and prometheus.yml scrapes the relays and loads them.
func TestDeployQueriesUseWhatRelayExports(t *testing.T) {
	t.Parallel()
	jobs := checkScrapeConfig(t)
	queries := append(dashboardQueries(t), alertQueries(t)...)

	uses := map[string][]use{}
	p := parser.NewParser(parser.Options{})
	for _, q := range queries {
		expr, err := p.ParseExpr(q.expr)
		if err != nil {
			t.Errorf("%s: %q does not parse: %v", q.where, q.expr, err)
			continue
		}
		for name, u := range inspect(t, q, expr, jobs) {
			uses[name] = append(uses[name], u...)
		}
	}
	if t.Failed() {
		return
	}

	families := scrapeDeliveringRelay(t, slices.Collect(maps.Keys(uses)))
	var missing []string
	for _, name := range slices.Sorted(maps.Keys(uses)) {
		if slices.Contains(notExported, name) {
			continue
		}
		have, ok := families[name]
		if !ok {
			missing = append(missing, name)
			t.Errorf("%s is not exported by a running relay; used by %s", name, wheres(uses[name]))
			continue
		}
		for _, u := range uses[name] {
			for _, l := range u.labels {
				if !have[l] {
					t.Errorf("%s: %s has no label %q (it has %v)", u.where, name, l, slices.Sorted(maps.Keys(have)))
				}
			}
		}
	}
	if len(missing) > 0 {
		t.Logf("missing metric names: %s", strings.Join(missing, " "))
	}
}

func wheres(us []use) string {
	var out []string
	for _, u := range us {
		if !slices.Contains(out, u.where) {
			out = append(out, u.where)
		}
	}
	return strings.Join(out, "; ")
}

// inspect returns the metrics q selects, each with the labels q needs of
// it: those its matchers and its by-groupings name, but for the ones
// Prometheus adds. It fails the test for a selector without a metric name,
// for a shared gauge not combined with max, and for a job no scrape
// config has.
func inspect(t *testing.T, q query, expr parser.Expr, jobs []string) map[string][]use {
	t.Helper()
	out := map[string][]use{}
	parser.Inspect(expr, func(n parser.Node, path []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		var need []string
		for _, m := range vs.LabelMatchers {
			switch {
			case m.Name == labels.MetricName && name == "" && m.Type == labels.MatchEqual:
				name = m.Value
			case m.Name == labels.MetricName:
			case m.Name == "job":
				if !slices.Contains(jobs, m.Value) {
					t.Errorf("%s: %q selects job %q, but prometheus.yml scrapes %v", q.where, q.expr, m.Value, jobs)
				}
			case !slices.Contains(targetLabels, m.Name):
				need = append(need, m.Name)
			}
		}
		if name == "" {
			t.Errorf("%s: %q selects %s, with no metric name to check", q.where, q.expr, vs)
			return nil
		}
		var nearest *parser.AggregateExpr
		for i := len(path) - 1; i >= 0; i-- {
			agg, ok := path[i].(*parser.AggregateExpr)
			if !ok {
				continue
			}
			child := n
			if i+1 < len(path) {
				child = path[i+1]
			}
			if agg.Param != nil && child == agg.Param {
				continue // topk's k, quantile's φ: not what is aggregated
			}
			if nearest == nil {
				nearest = agg
			}
			if agg.Without {
				continue
			}
			for _, l := range agg.Grouping {
				if !slices.Contains(targetLabels, l) && !slices.Contains(need, l) {
					need = append(need, l)
				}
			}
		}
		if slices.Contains(sharedGauges, name) && (nearest == nil || nearest.Op != parser.MAX) {
			t.Errorf("%s: %q: every relay reports %s; combine it with max by (subscriber), never sum it or leave it per relay",
				q.where, q.expr, name)
		}
		out[name] = append(out[name], use{where: q.where, labels: need})
		return nil
	})
	return out
}

// dashboard is what the test reads of the Grafana JSON model.
type dashboard struct {
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []variable `json:"list"`
	} `json:"templating"`
}

type panel struct {
	Title      string          `json:"title"`
	Type       string          `json:"type"`
	Datasource json.RawMessage `json:"datasource"`
	Targets    []struct {
		RefID      string          `json:"refId"`
		Expr       string          `json:"expr"`
		Datasource json.RawMessage `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

type variable struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Query      json.RawMessage `json:"query"`
	Datasource json.RawMessage `json:"datasource"`
	IncludeAll bool            `json:"includeAll"`
	AllValue   string          `json:"allValue"`
}

// The Prometheus data source every panel uses: the dashboard's own variable.
const dashboardDatasource = `{"type":"prometheus","uid":"${datasource}"}`

var (
	grafanaVariable = regexp.MustCompile(`\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]`)
	labelValues     = regexp.MustCompile(`^\s*label_values\(\s*(?:(.*\S)\s*,\s*)?(\w+)\s*\)\s*$`)
	queryResult     = regexp.MustCompile(`^\s*query_result\((.*)\)\s*$`)
	grafanaOnly     = regexp.MustCompile(`^\s*(label_names|metrics)\(.*\)\s*$`)
)

// dashboardQueries returns the PromQL of every panel target and query
// variable of the dashboard, Grafana's variables replaced by values that
// make PromQL of them. label_values(selector, label) is Grafana's: its
// selector is returned, to check that it names a metric with that label.
func dashboardQueries(t *testing.T) []query {
	t.Helper()
	b, err := os.ReadFile(deployDashboard)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", deployDashboard, err)
	}
	if d.SchemaVersion < 36 {
		t.Errorf("%s: schemaVersion %d, want 36 or later", deployDashboard, d.SchemaVersion)
	}

	values := maps.Clone(grafanaBuiltins)
	var queries []query
	var promVars []variable
	for _, v := range d.Templating.List {
		switch v.Type {
		case "datasource":
			values[v.Name] = "prometheus"
		case "query":
			values[v.Name] = "x"
			if v.IncludeAll && v.AllValue != "" {
				values[v.Name] = v.AllValue
			}
			promVars = append(promVars, v)
		default:
			values[v.Name] = "x"
		}
	}
	if values["datasource"] != "prometheus" {
		t.Errorf("%s: no datasource variable named datasource", deployDashboard)
	}
	if _, ok := values["subscriber"]; !ok {
		t.Errorf("%s: no subscriber variable", deployDashboard)
	}
	expand := func(where, s string) string {
		return grafanaVariable.ReplaceAllStringFunc(s, func(m string) string {
			sub := grafanaVariable.FindStringSubmatch(m)
			name := sub[1] + sub[2] + sub[3]
			v, ok := values[name]
			if !ok {
				t.Errorf("%s: %q uses $%s, which the dashboard does not define", where, s, name)
			}
			return v
		})
	}
	sameDatasource := func(where string, ds json.RawMessage) {
		var got, want any
		if err := json.Unmarshal(ds, &got); err != nil {
			t.Errorf("%s: datasource %s: %v", where, ds, err)
			return
		}
		_ = json.Unmarshal([]byte(dashboardDatasource), &want)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: datasource %s, want %s", where, ds, dashboardDatasource)
		}
	}

	for _, v := range promVars {
		where := fmt.Sprintf("dashboard variable %s", v.Name)
		sameDatasource(where, v.Datasource)
		var text string
		if err := json.Unmarshal(v.Query, &text); err != nil {
			var obj struct {
				Query string `json:"query"`
			}
			if err := json.Unmarshal(v.Query, &obj); err != nil {
				t.Errorf("%s: query %s: %v", where, v.Query, err)
				continue
			}
			text = obj.Query
		}
		switch {
		case labelValues.MatchString(text):
			m := labelValues.FindStringSubmatch(text)
			if m[1] == "" {
				continue // label_values(label): every metric
			}
			// The label must be on the metric: by (label) asks that.
			queries = append(queries, query{where, fmt.Sprintf("count by (%s) (%s)", m[2], expand(where, m[1]))})
		case queryResult.MatchString(text):
			queries = append(queries, query{where, expand(where, queryResult.FindStringSubmatch(text)[1])})
		case grafanaOnly.MatchString(text):
		default:
			queries = append(queries, query{where, expand(where, text)})
		}
	}

	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			where := fmt.Sprintf("dashboard panel %q", p.Title)
			sameDatasource(where, p.Datasource)
			if len(p.Targets) == 0 {
				t.Errorf("%s: no query", where)
			}
			for _, tg := range p.Targets {
				w := fmt.Sprintf("%s, query %s", where, tg.RefID)
				sameDatasource(w, tg.Datasource)
				if strings.TrimSpace(tg.Expr) == "" {
					t.Errorf("%s: no expr", w)
					continue
				}
				queries = append(queries, query{w, expand(w, tg.Expr)})
			}
		}
	}
	walk(d.Panels)
	return queries
}

// alertQueries loads the alert rules as promtool check rules does, checks
// that each alert says how bad it is and what to do, and returns their
// expressions.
func alertQueries(t *testing.T) []query {
	t.Helper()
	groups, errs := rulefmt.ParseFile(deployAlerts, false, model.UTF8Validation,
		parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
	for _, err := range errs {
		t.Errorf("%s: %v", deployAlerts, err)
	}
	if groups == nil {
		t.FailNow()
	}
	// rulefmt cannot tell an absent for: from for: 0s.
	b, err := os.ReadFile(deployAlerts)
	if err != nil {
		t.Fatal(err)
	}
	var raw struct {
		Groups []struct {
			Rules []map[string]any `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &raw); err != nil {
		t.Fatalf("%s: %v", deployAlerts, err)
	}

	var queries []query
	for gi, g := range groups.Groups {
		for ri, r := range g.Rules {
			where := fmt.Sprintf("alert %s (group %s)", r.Alert, g.Name)
			if r.Alert == "" {
				t.Errorf("group %s, rule %d: not an alert (record %q)", g.Name, ri, r.Record)
				continue
			}
			if _, ok := raw.Groups[gi].Rules[ri]["for"]; !ok {
				t.Errorf("%s: no for", where)
			}
			if s := r.Labels["severity"]; s != "warning" && s != "critical" {
				t.Errorf("%s: severity %q, want warning or critical", where, s)
			}
			for _, a := range []string{"summary", "description"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					t.Errorf("%s: no %s annotation", where, a)
				}
			}
			// Retries are relay at work; what they fail to fix is a dead
			// letter, an old queue or an open circuit.
			for _, retries := range []string{"relay_deliveries_total", "relay_delivery_attempts_total"} {
				if strings.Contains(r.Expr, retries) {
					t.Errorf("%s alerts on %s: alert on what retries fail to fix, not on retries", where, retries)
				}
			}
			queries = append(queries, query{where, r.Expr})
		}
	}
	if len(queries) == 0 {
		t.Errorf("%s: no alert", deployAlerts)
	}
	return queries
}

// scrapeConfig is the part of Prometheus's configuration file that
// prometheus.yml uses, with Prometheus's field names: decoded strictly, a
// field Prometheus does not have (a typo) is an error, as it is for
// Prometheus. (Loading it with prometheus/config itself would bring every
// cloud provider's SDK into the test build.)
type scrapeConfig struct {
	Global struct {
		ScrapeInterval     model.Duration `yaml:"scrape_interval"`
		EvaluationInterval model.Duration `yaml:"evaluation_interval"`
	} `yaml:"global"`
	RuleFiles     []string `yaml:"rule_files"`
	ScrapeConfigs []struct {
		JobName        string         `yaml:"job_name"`
		ScrapeInterval model.Duration `yaml:"scrape_interval"`
		MetricsPath    string         `yaml:"metrics_path"`
		StaticConfigs  []struct {
			Targets []string          `yaml:"targets"`
			Labels  map[string]string `yaml:"labels"`
		} `yaml:"static_configs"`
	} `yaml:"scrape_configs"`
}

// checkScrapeConfig checks that prometheus.yml scrapes the two relays every
// 15 s and loads alerts.yml (rule_files are relative to the file), and
// returns its job names.
func checkScrapeConfig(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(deployPrometheus)
	if err != nil {
		t.Fatal(err)
	}
	var cfg scrapeConfig
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil {
		t.Fatalf("%s: %v", deployPrometheus, err)
	}
	if cfg.Global.ScrapeInterval == 0 || cfg.Global.EvaluationInterval == 0 {
		t.Errorf("%s: no global scrape_interval or evaluation_interval", deployPrometheus)
	}

	var rules []string
	for _, pattern := range cfg.RuleFiles {
		files, err := filepath.Glob(filepath.Join(filepath.Dir(deployPrometheus), pattern))
		if err != nil {
			t.Errorf("%s: rule_files %q: %v", deployPrometheus, pattern, err)
		}
		rules = append(rules, files...)
	}
	if !slices.Contains(rules, deployAlerts) {
		t.Errorf("%s: rule_files %v do not load alerts.yml", deployPrometheus, cfg.RuleFiles)
	}

	var jobs []string
	for _, sc := range cfg.ScrapeConfigs {
		if sc.JobName == "" || slices.Contains(jobs, sc.JobName) {
			t.Errorf("%s: job_name %q empty or repeated", deployPrometheus, sc.JobName)
		}
		jobs = append(jobs, sc.JobName)
		if sc.JobName != "relay" {
			continue
		}
		interval := cmp.Or(sc.ScrapeInterval, cfg.Global.ScrapeInterval)
		if got := time.Duration(interval); got != 15*time.Second {
			t.Errorf("%s: job relay scraped every %s, want 15s", deployPrometheus, got)
		}
		if path := cmp.Or(sc.MetricsPath, "/metrics"); path != "/metrics" {
			t.Errorf("%s: job relay scrapes %s, want /metrics", deployPrometheus, path)
		}
		var targets []string
		for _, sc := range sc.StaticConfigs {
			for _, target := range sc.Targets {
				if _, _, err := net.SplitHostPort(target); err != nil {
					t.Errorf("%s: target %q: %v", deployPrometheus, target, err)
				}
				targets = append(targets, target)
			}
		}
		if want := []string{"relay1:9469", "relay2:9469"}; !slices.Equal(slices.Sorted(slices.Values(targets)), want) {
			t.Errorf("%s: job relay scrapes %v, want %v", deployPrometheus, targets, want)
		}
	}
	if !slices.Contains(jobs, "relay") {
		t.Errorf("%s: no job relay (jobs %v)", deployPrometheus, jobs)
	}
	return jobs
}

// scrapeDeliveringRelay runs a relay that delivers to three subscribers a
// success, a retry after a 500, a 400 dead letter, an event past its
// Relay-Deadline, two events through a limit of one a second, and an event
// to a paused subscriber, then scrapes its /metrics until every name of
// want is there or ten seconds pass. It returns each exported series name
// with its labels (target labels included).
func scrapeDeliveringRelay(t *testing.T, want []string) map[string]map[string]bool {
	t.Helper()
	n := testutil.StartRelayNATS(t)
	var mu sync.Mutex
	got := map[string]int{}
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		_, _ = io.Copy(io.Discard, req.Body)
		id := req.Header.Get("webhook-id")
		mu.Lock()
		got[id]++
		tries := got[id]
		mu.Unlock()
		switch {
		case id == "evt_retry" && tries == 1:
			w.WriteHeader(http.StatusInternalServerError)
		case id == "evt_dead":
			w.WriteHeader(http.StatusBadRequest)
		default:
			w.WriteHeader(http.StatusOK)
		}
	}))
	t.Cleanup(rcv.Close)
	requests := func(id string) int {
		mu.Lock()
		defer mu.Unlock()
		return got[id]
	}

	sub := func(id string, extra ...string) {
		mustRelay(t, append([]string{"sub", "add", id, "--nats", n.URL, "--url", rcv.URL, "--secret", testSecret,
			"--events", id + ".*"}, extra...)...)
	}
	sub("mixed", "--retry-base", "100ms")
	sub("throttled", "--rate", "1", "--burst", "1")
	sub("paused")
	mustRelay(t, "sub", "pause", "paused", "--nats", n.URL)

	base := startRelayWithMetrics(t, n.URL)

	publish(t, n.JS, "mixed.ok", "evt_ok", []byte(`{}`),
		"Relay-Deadline", time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
	publish(t, n.JS, "mixed.retry", "evt_retry", []byte(`{}`))
	publish(t, n.JS, "mixed.dead", "evt_dead", []byte(`{}`))
	publish(t, n.JS, "mixed.late", "evt_late", []byte(`{}`),
		"Relay-Deadline", time.Now().Add(-time.Minute).UTC().Format(time.RFC3339))
	publish(t, n.JS, "throttled.a", "evt_t1", []byte(`{}`))
	publish(t, n.JS, "throttled.b", "evt_t2", []byte(`{}`))
	publish(t, n.JS, "paused.a", "evt_paused", []byte(`{}`))
	testutil.Eventually(t, func() bool {
		return requests("evt_ok") == 1 && requests("evt_retry") == 2 && requests("evt_dead") == 1 &&
			requests("evt_t1") == 1 && requests("evt_t2") == 1
	}, "deliveries did not arrive")
	if n := requests("evt_late"); n != 0 {
		t.Errorf("an event past its Relay-Deadline was sent %d times", n)
	}
	if n := requests("evt_paused"); n != 0 {
		t.Errorf("a paused subscriber was sent %d requests", n)
	}

	var families map[string]map[string]bool
	testutil.Within(10*time.Second, func() bool {
		families = scrape(t, base+"/metrics")
		for _, name := range want {
			if _, ok := families[name]; !ok && !slices.Contains(notExported, name) {
				time.Sleep(200 * time.Millisecond)
				return false
			}
		}
		return true
	})
	return families
}

// scrape reads /metrics as Prometheus does and returns each series name
// (a histogram's _bucket, _sum and _count) with the labels it has, the
// labels Prometheus adds included.
func scrape(t *testing.T, url string) map[string]map[string]bool {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	out := map[string]map[string]bool{}
	add := func(name string, mf *dto.MetricFamily, extra ...string) {
		have := out[name]
		if have == nil {
			have = map[string]bool{}
			out[name] = have
		}
		for _, l := range append(slices.Clone(targetLabels), extra...) {
			have[l] = true
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = true
			}
		}
	}
	dec := expfmt.NewDecoder(resp.Body, expfmt.ResponseFormat(resp.Header))
	for {
		mf := &dto.MetricFamily{}
		if err := dec.Decode(mf); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		name := mf.GetName()
		switch mf.GetType() {
		case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
			add(name+"_bucket", mf, "le")
			add(name+"_sum", mf)
			add(name+"_count", mf)
		case dto.MetricType_SUMMARY:
			add(name, mf, "quantile")
			add(name+"_sum", mf)
			add(name+"_count", mf)
		default:
			add(name, mf)
		}
	}
	return out
}
