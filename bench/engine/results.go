package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/nats-io/nats-server/v2/server"
)

// results is what one run measured: the machine it ran on and each
// scenario's result, in the order the scenarios ran. run creates it at its
// start, adds each scenario as it ends (add, also when the scenario failed,
// so that the receiver's CPU time is given to the right one), and at the
// end prints its machine line under the tables and writes it to the -json
// file. The file is for comparing runs with a script; the markdown tables
// stay the report of record.
type results struct {
	Machine   machineFacts     `json:"machine"`
	Scenarios []scenarioResult `json:"scenarios"`

	started time.Time
	where   string                        // the markdown machine line's word on the NATS server
	cpu     func() (time.Duration, error) // the receiver process's CPU time so far; nil until follow
	cpuMark time.Duration                 // its value when follow was called or the last scenario was added
	cpuOK   bool                          // every reading so far succeeded
}

// machineFacts are the facts that figures mean little without: where they
// were measured and what code they measured.
type machineFacts struct {
	CPUs        int      `json:"cpus"`
	CPUModel    string   `json:"cpu_model,omitempty"` // /proc/cpuinfo "model name", Linux only
	GOOS        string   `json:"goos"`
	GOARCH      string   `json:"goarch"`
	GoVersion   string   `json:"go_version"`
	NATSServer  string   `json:"nats_server_version"` // the in-process server's, and the embedded one's with -embedded
	NATS        string   `json:"nats"`                // where the relays' server runs
	Commit      string   `json:"relay_commit,omitempty"`
	Uncommitted bool     `json:"uncommitted_changes"` // *.go, go.mod or go.sum differ from the commit
	Date        string   `json:"date"`                // the start of the run, RFC 3339, UTC
	DurationS   float64  `json:"duration_s"`
	ReceiverCPU *float64 `json:"receiver_cpu_s,omitempty"` // the receiver process's CPU time, user + system, over the run
	Args        []string `json:"args"`                     // the command line's flags: the scenarios' sizes
}

// scenarioResult is one scenario's entry in the -json file: its result as
// the scenario returned it (see exported), the receiver process's CPU time
// while it ran, and its error if it failed.
type scenarioResult struct {
	Name        string   `json:"name"`
	ReceiverCPU *float64 `json:"receiver_cpu_s,omitempty"`
	Error       string   `json:"error,omitempty"`
	Result      any      `json:"result"`
}

// newResults reads the machine facts and the commit. It is called first
// thing in run: the tree may change while a run lasts.
func newResults(cfg config) *results {
	commit, dirty := revision()
	where, nats := "in-process, relay on --nats", "in-process"
	if cfg.embedded {
		where, nats = "embedded in each relay", "embedded"
	} else if cfg.scenarios["soak"] {
		where, nats = where+"; the soak's a nats-server process of its own", nats+"; soak: a nats-server process"
	}
	started := time.Now()
	return &results{
		Machine: machineFacts{
			CPUs: runtime.NumCPU(), CPUModel: cpuModel(), GOOS: runtime.GOOS, GOARCH: runtime.GOARCH,
			GoVersion: runtime.Version(), NATSServer: server.VERSION, NATS: nats,
			Commit: commit, Uncommitted: dirty, Date: started.UTC().Format(time.RFC3339), Args: os.Args[1:],
		},
		Scenarios: []scenarioResult{},
		started:   started, where: where,
	}
}

// follow starts counting the receiver process's CPU time, given to each
// scenario from the previous add (or from now) to its own.
func (rs *results) follow(cpu func() (time.Duration, error)) {
	rs.cpu = cpu
	var err error
	rs.cpuMark, err = cpu()
	rs.cpuOK = err == nil
}

// receiverCPU reads the receiver process's CPU time now, the time since the
// last mark and moves the mark; ok is false when it could not be read (off
// Linux), then and ever after.
func (rs *results) receiverCPU() (since time.Duration, ok bool) {
	if rs.cpu == nil || !rs.cpuOK {
		return 0, false
	}
	now, err := rs.cpu()
	if err != nil {
		rs.cpuOK = false
		return 0, false
	}
	since, rs.cpuMark = now-rs.cpuMark, now
	return since, true
}

// add records a scenario that has just ended: its result (any value; see
// exported for how it is written) and its error, nil if it succeeded. A
// scenario run adds itself once, right after it ends, whether it failed or
// not; a partial result is worth keeping beside its error.
func (rs *results) add(name string, result any, err error) {
	sr := scenarioResult{Name: name, Result: exported(result)}
	if cpu, ok := rs.receiverCPU(); ok {
		s := cpu.Seconds()
		sr.ReceiverCPU = &s
	}
	if err != nil {
		sr.Error = err.Error()
	}
	rs.Scenarios = append(rs.Scenarios, sr)
}

// end sets the run's duration and the receiver's CPU time over all the
// scenarios.
func (rs *results) end() {
	rs.Machine.DurationS = time.Since(rs.started).Round(time.Millisecond).Seconds()
	if !rs.cpuOK || rs.cpu == nil {
		return
	}
	total := 0.0
	for _, s := range rs.Scenarios {
		if s.ReceiverCPU != nil {
			total += *s.ReceiverCPU
		}
	}
	rs.Machine.ReceiverCPU = &total
}

// machineLine is the line under the markdown tables: the machine, the
// code, the date, how long the run took and the receiver process's CPU
// time, in all and per scenario.
func (rs *results) machineLine() string {
	m := rs.Machine
	cpus := fmt.Sprintf("%d CPUs", m.CPUs)
	if m.CPUModel != "" {
		cpus += " (" + m.CPUModel + ")"
	}
	rev := ""
	if m.Commit != "" {
		rev = "; code at " + m.Commit
		if m.Uncommitted {
			rev += " with uncommitted changes"
		}
	}
	line := fmt.Sprintf("machine: %s, %s/%s, %s, nats-server %s (%s); %s%s; this run took %v",
		cpus, m.GOOS, m.GOARCH, m.GoVersion, m.NATSServer, rs.where,
		rs.started.UTC().Format("2006-01-02 15:04 MST"), rev, time.Duration(m.DurationS*float64(time.Second)).Round(time.Second))
	if m.ReceiverCPU != nil {
		var each []string
		for _, s := range rs.Scenarios {
			if s.ReceiverCPU != nil {
				each = append(each, fmt.Sprintf("%s %.2f", s.Name, *s.ReceiverCPU))
			}
		}
		line += fmt.Sprintf("; the receiver process used %.2f s of CPU (%s)", *m.ReceiverCPU, strings.Join(each, ", "))
	}
	return line + "\n"
}

// writeJSON writes the results to path, indented, with a final newline.
func (rs *results) writeJSON(path string) error {
	b, err := json.MarshalIndent(rs, "", "  ")
	if err != nil {
		return fmt.Errorf("-json: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("-json: %w", err)
	}
	return nil
}

// revision names the commit the code was built from, when run inside a git
// checkout, and whether the Go files or the module files differ from it.
// Empty when git cannot tell. The commands take no optional locks: they
// never write to the repository.
func revision() (commit string, dirty bool) {
	git := func(args ...string) ([]byte, error) {
		cmd := exec.Command("git", append([]string{"--no-optional-locks"}, args...)...)
		cmd.Env = append(os.Environ(), "GIT_OPTIONAL_LOCKS=0")
		return cmd.Output()
	}
	out, err := git("rev-parse", "--short", "HEAD")
	if err != nil {
		return "", false
	}
	status, err := git("status", "--porcelain", "--untracked-files=no", "--", "*.go", "go.mod", "go.sum")
	return strings.TrimSpace(string(out)), err == nil && len(status) > 0
}

// derivedFigures is implemented by the result types whose figures of
// record are computed from their fields (a rate, a ratio): exported writes
// them beside the fields, so that a script reads the same figures as the
// tables show.
type derivedFigures interface {
	derived() map[string]any
}

// The types exported treats apart from their kind.
var (
	durationType = reflect.TypeFor[time.Duration]()
	timeType     = reflect.TypeFor[time.Time]()
	derivedType  = reflect.TypeFor[derivedFigures]()
)

// exported is x as encoding/json can write it, fields unexported included:
// every scenario's own result type (a struct, a slice of them, a pointer to
// one) goes into the -json file as it is, without an exported copy to keep
// in step with it. A struct becomes an object of its fields in order, named
// in snake case (gapAt → gap_at); a time.Duration becomes seconds, its
// name suffixed _s (publish → publish_s); a time.Time RFC 3339 (null when
// zero); NaN and infinities null; a map an object with its keys sorted; a
// type with derived figures gets them after its fields. Bytes, counts and
// rates stay as they are.
func exported(x any) any {
	if x == nil {
		return nil
	}
	v := reflect.New(reflect.TypeOf(x)).Elem() // addressable, so that readable works on its fields
	v.Set(reflect.ValueOf(x))
	return jsonValue(v)
}

// readable is v, reached through unexported fields, as a value whose
// Interface may be called (for a time.Time and derived figures). It needs v
// to be addressable, which every field of exported's copy is; a value that
// is not (a map's) is returned as it is, and read by its kind only.
func readable(v reflect.Value) reflect.Value {
	if v.CanInterface() || !v.CanAddr() {
		return v
	}
	return reflect.NewAt(v.Type(), v.Addr().UnsafePointer()).Elem()
}

// jsonValue is exported for one value.
func jsonValue(v reflect.Value) any {
	v = readable(v)
	switch v.Type() {
	case durationType:
		return time.Duration(v.Int()).Seconds()
	case timeType:
		if !v.CanInterface() {
			return nil
		}
		if t := v.Interface().(time.Time); !t.IsZero() {
			return t.UTC().Format(time.RFC3339Nano)
		}
		return nil
	}
	switch v.Kind() {
	case reflect.Bool:
		return v.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return v.Int()
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return v.Uint()
	case reflect.Float32, reflect.Float64:
		return finite(v.Float())
	case reflect.String:
		return v.String()
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return nil
		}
		return jsonValue(v.Elem())
	case reflect.Slice, reflect.Array:
		if v.Kind() == reflect.Slice && v.IsNil() {
			return []any{}
		}
		out := make([]any, v.Len())
		for i := range out {
			out[i] = jsonValue(v.Index(i))
		}
		return out
	case reflect.Map:
		var obj jsonObject
		for _, k := range v.MapKeys() {
			obj = append(obj, jsonField{fmt.Sprint(jsonValue(k)), jsonValue(v.MapIndex(k))})
		}
		slices.SortFunc(obj, func(a, b jsonField) int { return strings.Compare(a.key, b.key) })
		return obj
	case reflect.Struct:
		obj := jsonObject{}
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			name := snakeCase(f.Name)
			if f.Type == durationType {
				name += "_s"
			}
			obj = append(obj, jsonField{name, jsonValue(v.Field(i))})
		}
		if t.Implements(derivedType) && v.CanInterface() {
			d := v.Interface().(derivedFigures).derived()
			keys := make([]string, 0, len(d))
			for k := range d {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for _, k := range keys {
				obj = append(obj, jsonField{k, exported(d[k])})
			}
		}
		return obj
	default: // a channel, a function: nothing a result holds
		return nil
	}
}

// finite is f, or nil (JSON null) for NaN and the infinities, which JSON
// cannot hold: a ratio over nothing, say.
func finite(f float64) any {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil
	}
	return f
}

// snakeCase turns a Go field name into the -json file's key: gapAt →
// gap_at, idleRSS → idle_rss, p50 → p50.
func snakeCase(name string) string {
	rs := []rune(name)
	var sb strings.Builder
	for i, r := range rs {
		if unicode.IsUpper(r) {
			if i > 0 && (!unicode.IsUpper(rs[i-1]) || (i+1 < len(rs) && unicode.IsLower(rs[i+1]))) {
				sb.WriteByte('_')
			}
			r = unicode.ToLower(r)
		}
		sb.WriteRune(r)
	}
	return sb.String()
}

// jsonObject is a JSON object that keeps its keys in the order given
// (encoding/json sorts a map's), so that a result reads as its struct does.
type jsonObject []jsonField

// jsonField is one key of a jsonObject.
type jsonField struct {
	key   string
	value any
}

// MarshalJSON writes the object's keys in order.
func (o jsonObject) MarshalJSON() ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte('{')
	for i, f := range o {
		if i > 0 {
			buf.WriteByte(',')
		}
		k, err := json.Marshal(f.key)
		if err != nil {
			return nil, err
		}
		v, err := json.Marshal(f.value)
		if err != nil {
			return nil, err
		}
		buf.Write(k)
		buf.WriteByte(':')
		buf.Write(v)
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// The derived figures of the engine's own result types: the ones the
// tables print, computed by the same methods.

// derived is a burst run's delivered/s, extra writes per delivered message
// and, when the relay's CPU was read, its CPU seconds per 1,000 deliveries.
func (r burstRun) derived() map[string]any {
	d := map[string]any{"deliveries_per_s": r.rate(), "extra_writes_per_delivered": r.extraPer()}
	if per, ok := r.cpuPer1000(); ok {
		d["relay_cpu_s_per_1000"] = per
	}
	return d
}

// derived is a throughput run's three ratios: relay / baseline, two-hop /
// baseline and relay / two-hop.
func (r throughputRun) derived() map[string]any {
	return map[string]any{
		"relay_per_baseline": r.ratio(), "two_hop_per_baseline": r.twoHopRatio(), "relay_per_two_hop": r.relayPerTwoHop(),
	}
}

// derived is a tracing pair's on / off ratio and the spans the endpoint
// received per delivery of the on run.
func (r tracingRun) derived() map[string]any {
	return map[string]any{"on_per_off": r.ratio(), "spans_per_delivery": r.spansPerDelivery()}
}

// derived is a records pair's on / off ratio and ATTEMPTS' bytes per
// record.
func (r recordsRun) derived() map[string]any {
	return map[string]any{"on_per_off": r.ratio(), "bytes_per_record": r.bytesPerRecord()}
}

// derived is a filters pair's with / without ratio, and the evaluations
// the run with filters had to match and the ones that did not.
func (r filtersRun) derived() map[string]any {
	return map[string]any{
		"with_per_without": r.ratio(), "want_matched": r.wantMatched(), "with_other_results": r.with.evaluations.others(),
	}
}

// derived is the writes scenario's extra writes per message in each phase
// and their sum.
func (r writesResult) derived() map[string]any {
	return map[string]any{
		"extra_writes_per_backlog_message": r.perBacklogMsg(), "extra_writes_per_delivered_in_window": r.perDelivered(),
		"writes_per_message": r.perBacklogMsg() + r.perDelivered(),
	}
}

// derived is the scale scenario's spread / one subscriber.
func (r scaleResult) derived() map[string]any {
	if h := r.hot.rate(); h > 0 {
		return map[string]any{"spread_per_one_subscriber": r.spread.rate() / h}
	}
	return nil
}

// derived is the scheduled scenario's missing events and duplicate
// requests, which the table prints beside its fields.
func (r scheduledResult) derived() map[string]any {
	return map[string]any{"missing": r.missing(), "duplicates": r.duplicates()}
}
