package main

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/relay-dev/relay/internal/receiver"
)

// The containerised deployment, from this package's directory. No test here
// needs Docker: they read the files as Compose and Docker would, and run
// relay's own command-line parsing and validation on what they would start.
var (
	repoRoot    = filepath.Join("..", "..")
	composePath = filepath.Join(repoRoot, "docker-compose.yml")
	dockerPath  = filepath.Join(repoRoot, "Dockerfile")
	goModPath   = filepath.Join(repoRoot, "go.mod")
)

// composeProject is the part of docker-compose.yml the tests read. Compose
// has many more fields; they are left to Compose.
type composeProject struct {
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
}

type composeService struct {
	Image       string       `yaml:"image"`
	Build       composeBuild `yaml:"build"`
	Command     yaml.Node    `yaml:"command"`
	Environment yaml.Node    `yaml:"environment"`
	Volumes     []string     `yaml:"volumes"`
	Ports       []string     `yaml:"ports"`
	// StopGracePeriod is how long Compose waits after SIGTERM before it
	// sends SIGKILL; empty is Compose's default, 10 s.
	StopGracePeriod string `yaml:"stop_grace_period"`
}

// composeBuild is a service's build:, either a context path or a mapping.
type composeBuild struct {
	Context    string `yaml:"context"`
	Dockerfile string `yaml:"dockerfile"`
}

func (b *composeBuild) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		b.Context = n.Value
		return nil
	}
	type plain composeBuild
	return n.Decode((*plain)(b))
}

// mount is one entry of a service's volumes:, in Compose's short syntax.
type mount struct {
	source, target string
	bind           bool // a host path, not a named volume
}

// compose is docker-compose.yml, loaded once per test; its strings are
// interpolated as they are read.
type compose struct {
	composeProject
	t *testing.T
}

func loadCompose(t *testing.T) *compose {
	t.Helper()
	b, err := os.ReadFile(composePath)
	if err != nil {
		t.Fatalf("reading the compose file: %v", err)
	}
	var p composeProject
	if err := yaml.Unmarshal(b, &p); err != nil {
		t.Fatalf("%s: %v", composePath, err)
	}
	if len(p.Services) == 0 {
		t.Fatalf("%s: no services", composePath)
	}
	return &compose{composeProject: p, t: t}
}

// composeVariable is Compose's interpolation: $$, $VAR, ${VAR} and
// ${VAR[:]-default}, ${VAR[:]?error}.
var composeVariable = regexp.MustCompile(`\$\$|\$\{([A-Za-z_]\w*)(?:(:?[-?])([^}]*))?\}|\$([A-Za-z_]\w*)`)

// interpolate replaces the variables of s as Compose does with none of
// them set, so that the tests check what `docker compose up` runs on a
// fresh machine: a variable without a default is an error, since the file
// would not work as it stands.
func interpolate(s string) (string, error) {
	var errs []error
	out := composeVariable.ReplaceAllStringFunc(s, func(m string) string {
		if m == "$$" {
			return "$"
		}
		sub := composeVariable.FindStringSubmatch(m)
		if sub[2] == "-" || sub[2] == ":-" {
			return sub[3]
		}
		errs = append(errs, fmt.Errorf("%s has no default: docker compose up would need it set", m))
		return ""
	})
	return out, errors.Join(errs...)
}

func (c *compose) interpolate(where, s string) string {
	c.t.Helper()
	v, err := interpolate(s)
	if err != nil {
		c.t.Errorf("%s: %v", where, err)
	}
	return v
}

// command returns a service's command: as a list, since a string would be
// split by Compose's shell-like rules, which the tests do not reproduce.
func (c *compose) command(name string) []string {
	c.t.Helper()
	n := c.Services[name].Command
	if n.Kind == 0 {
		return nil
	}
	var args []string
	if err := n.Decode(&args); err != nil {
		c.t.Errorf("service %s: command must be a list of strings (line %d): %v", name, n.Line, err)
		return nil
	}
	for i, a := range args {
		args[i] = c.interpolate("service "+name+" command", a)
	}
	return args
}

// environment returns a service's environment:, a mapping or a list of
// NAME=value.
func (c *compose) environment(name string) map[string]string {
	c.t.Helper()
	n := c.Services[name].Environment
	env := map[string]string{}
	switch n.Kind {
	case 0:
	case yaml.MappingNode:
		if err := n.Decode(&env); err != nil {
			c.t.Errorf("service %s: environment: %v", name, err)
		}
	default:
		var list []string
		if err := n.Decode(&list); err != nil {
			c.t.Errorf("service %s: environment: %v", name, err)
		}
		for _, kv := range list {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
	}
	for k, v := range env {
		env[k] = c.interpolate("service "+name+" environment "+k, v)
	}
	return env
}

func (c *compose) mounts(name string) []mount {
	c.t.Helper()
	var out []mount
	for _, v := range c.Services[name].Volumes {
		v = c.interpolate("service "+name+" volumes", v)
		parts := strings.Split(v, ":")
		if len(parts) < 2 || len(parts) > 3 {
			c.t.Errorf("service %s: volume %q is not SOURCE:TARGET[:MODE]", name, v)
			continue
		}
		src := parts[0]
		out = append(out, mount{
			source: src,
			target: parts[1],
			bind:   strings.HasPrefix(src, ".") || strings.HasPrefix(src, "/") || strings.HasPrefix(src, "~"),
		})
	}
	return out
}

// bindSource returns the repository file mounted at target in a service,
// relative to the repository, or "" when nothing is.
func (c *compose) bindSource(name, target string) string {
	for _, m := range c.mounts(name) {
		if m.bind && path.Clean(m.target) == path.Clean(target) {
			return filepath.Join(repoRoot, filepath.FromSlash(m.source))
		}
	}
	return ""
}

// buildsRelay says whether a service builds the Dockerfile at the
// repository's root.
func (s composeService) buildsRelay() bool {
	return s.Build.Context != "" && path.Clean(s.Build.Context) == "." && cmp.Or(s.Build.Dockerfile, "Dockerfile") == "Dockerfile"
}

// relayServices are the services running the image built from the
// Dockerfile at the repository's root, or an image such a service builds.
func (c *compose) relayServices() []string {
	built := map[string]bool{}
	for _, s := range c.Services {
		if s.buildsRelay() && s.Image != "" {
			built[s.Image] = true
		}
	}
	var out []string
	for name, s := range c.Services {
		if s.buildsRelay() || built[s.Image] {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// servicesOf returns the services whose image is from repository repo (as
// "nats" or "prom/prometheus"), in name order.
func (c *compose) servicesOf(repo string) []string {
	var out []string
	for name, s := range c.Services {
		image, _, _ := strings.Cut(s.Image, ":")
		if image == repo || image == "docker.io/"+repo || image == "docker.io/library/"+repo {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// relayRuns returns the relay services that run `relay run`, each with its
// parsed flags. It stops the test when one does not parse: what its flags
// say is then unknown (TestComposeRelayCommandLinesParse says why).
func (c *compose) relayRuns() map[string]*pflag.FlagSet {
	c.t.Helper()
	out := map[string]*pflag.FlagSet{}
	for _, name := range c.relayServices() {
		args := c.command(name)
		if len(args) == 0 || args[0] != "run" {
			continue
		}
		cmd, err := parseRelayCommandLine(args)
		if err != nil {
			c.t.Fatalf("service %s: relay %s does not parse: %v", name, strings.Join(args, " "), err)
		}
		out[name] = cmd.Flags()
	}
	if len(out) == 0 {
		c.t.Fatalf("%s: no service runs relay run (relay services: %v)", composePath, c.relayServices())
	}
	return out
}

// parseRelayCommandLine finds the command args names in relay's command
// tree and parses its flags and arguments as relay would, running nothing.
func parseRelayCommandLine(args []string) (*cobra.Command, error) {
	root := newRoot(io.Discard, io.Discard)
	cmd, rest, err := root.Find(args)
	if err != nil {
		return nil, err
	}
	if cmd == root || (cmd.RunE == nil && cmd.Run == nil) {
		return nil, fmt.Errorf("%q is not a command relay runs", cmd.CommandPath())
	}
	if err := cmd.ParseFlags(rest); err != nil {
		return nil, err
	}
	if err := cmd.ValidateArgs(cmd.Flags().Args()); err != nil {
		return nil, err
	}
	if err := cmd.ValidateRequiredFlags(); err != nil {
		return nil, err
	}
	if err := cmd.ValidateFlagGroups(); err != nil {
		return nil, err
	}
	return cmd, nil
}

// flagReader reads parsed flags into the structs relay validates, and
// records the flags it read, so that a flag added to a command later
// without being checked here fails the test instead of passing unseen.
type flagReader struct {
	fs   *pflag.FlagSet
	read map[string]bool
	errs []error
}

func (r *flagReader) note(name string, err error) {
	r.read[name] = true
	if err != nil {
		r.errs = append(r.errs, fmt.Errorf("--%s: %w", name, err))
	}
}

func (r *flagReader) str(name string) string {
	v, err := r.fs.GetString(name)
	r.note(name, err)
	return v
}

func (r *flagReader) strs(name string) []string {
	v, err := r.fs.GetStringArray(name)
	r.note(name, err)
	return v
}

func (r *flagReader) int(name string) int {
	v, err := r.fs.GetInt(name)
	r.note(name, err)
	return v
}

func (r *flagReader) bool(name string) bool {
	v, err := r.fs.GetBool(name)
	r.note(name, err)
	return v
}

func (r *flagReader) float(name string) float64 {
	v, err := r.fs.GetFloat64(name)
	r.note(name, err)
	return v
}

func (r *flagReader) duration(name string) time.Duration {
	v, err := r.fs.GetDuration(name)
	r.note(name, err)
	return v
}

// unread returns the command's own flags the reader did not read.
func (r *flagReader) unread(cmd *cobra.Command) []string {
	var out []string
	cmd.LocalNonPersistentFlags().VisitAll(func(f *pflag.Flag) {
		if f.Name != "help" && !r.read[f.Name] {
			out = append(out, "--"+f.Name)
		}
	})
	return out
}

// validateRelayCommand runs the checks the command's RunE makes before it
// starts anything: runFlags.validate and the NATS rules for relay run, the
// receiver's configuration for relay listen. env is the service's
// environment (NATS_URL).
func validateRelayCommand(cmd *cobra.Command, env map[string]string) error {
	r := &flagReader{fs: cmd.Flags(), read: map[string]bool{}}
	var check func() error
	switch cmd.CommandPath() {
	case "relay run":
		f := &runFlags{
			data: r.str("data"), listen: r.str("listen"), metricsAddr: r.str("metrics"), lanes: r.int("lanes"),
			allowPrivate: r.bool("allow-private-targets"), logLevel: r.str("log-level"), maxPause: r.duration("max-pause"),
			replicas: r.int("replicas"), ackWait: r.duration("ack-wait"), maxRequests: r.int("max-requests"),
			logFormat: r.str("log-format"), dlqMaxAge: r.duration("dlq-max-age"), shutdownTimeout: r.duration("shutdown-timeout"),
			eventsMaxAge: r.duration("events-max-age"), proxy: r.str("proxy"), noProxy: r.str("no-proxy"),
			proxyGiven: cmd.Flags().Changed("proxy"), recordAttempts: r.bool("record-attempts"),
			attemptsMaxAge: r.duration("attempts-max-age"), metricsSubscribers: r.str("metrics-subscribers"),
			service: &serviceFlags{creds: r.str("service-creds"), nkey: r.str("service-nkey"), user: r.str("service-user"),
				password: r.str("service-password")},
			apiAddr: r.str("api"), apiTLSCert: r.str("api-tls-cert"), apiTLSKey: r.str("api-tls-key"),
		}
		if !cmd.Flags().Changed("attempts-max-age") {
			f.attemptsMaxAge = 0 // as relay run's RunE: keep the stream's
		}
		natsURL := cmp.Or(r.str("nats"), env["NATS_URL"])
		check = func() error {
			if _, err := f.validate(); err != nil {
				return err
			}
			if cmd.Flags().Changed("dlq-max-age") && f.dlqMaxAge < minDLQMaxAge {
				return fmt.Errorf("--dlq-max-age: must be at least %s, got %s", minDLQMaxAge, f.dlqMaxAge)
			}
			if natsURL == "" && f.replicas > 1 {
				return fmt.Errorf("--replicas %d without --nats: the embedded server holds 1 replica", f.replicas)
			}
			if err := f.checkAPI(); err != nil {
				return err
			}
			return f.service.check(natsURL != "")
		}
	case "relay listen":
		cfg := receiver.Config{
			Secrets: r.strs("secret"), PublicKeys: r.strs("public-key"), Status: r.int("status"), FailRate: r.float("fail-rate"),
			RetryAfter: r.str("retry-after"), Delay: r.duration("delay"),
		}
		addr, secretFile := r.str("addr"), r.str("secret-file")
		check = func() error {
			if secretFile != "" {
				secrets, err := readSecretFile(secretFile)
				if err != nil {
					return err
				}
				cfg.Secrets = append(cfg.Secrets, secrets...)
			}
			if err := cfg.Validate(); err != nil {
				return err
			}
			if _, _, err := net.SplitHostPort(addr); err != nil {
				return fmt.Errorf("--addr: must be HOST:PORT, got %q", addr)
			}
			return nil
		}
	default:
		return nil
	}
	if err := errors.Join(r.errs...); err != nil {
		return err
	}
	if unread := r.unread(cmd); len(unread) > 0 {
		return fmt.Errorf("compose_test.go does not validate %s of %s: read it in validateRelayCommand", strings.Join(unread, ", "), cmd.CommandPath())
	}
	return check()
}

// TestComposeRelayCommandLinesParse: every relay the compose file starts,
// and the image's default command, is a command line relay accepts, with
// flags that exist and values that pass the checks relay makes at start.
// A typo in a flag would otherwise show only as a container restarting in
// a loop after `docker compose up`.
func TestComposeRelayCommandLinesParse(t *testing.T) {
	t.Parallel()
	c := loadCompose(t)
	type line struct {
		where string
		args  []string
		env   map[string]string
	}
	var lines []line
	for _, name := range c.relayServices() {
		args := c.command(name)
		if len(args) == 0 {
			args = dockerfileCmd(t)
		}
		lines = append(lines, line{"service " + name, args, c.environment(name)})
	}
	if len(lines) == 0 {
		t.Fatalf("%s: no service builds or uses the relay image", composePath)
	}
	lines = append(lines, line{"Dockerfile CMD", dockerfileCmd(t), nil})

	for _, l := range lines {
		t.Run(l.where, func(t *testing.T) {
			t.Parallel()
			cmd, err := parseRelayCommandLine(l.args)
			if err != nil {
				t.Fatalf("relay %s: %v", strings.Join(l.args, " "), err)
			}
			if err := validateRelayCommand(cmd, l.env); err != nil {
				t.Errorf("relay %s: %v", strings.Join(l.args, " "), err)
			}
		})
	}
}

// TestComposeRelaysUseTheNATSCluster: the NATS configurations, loaded by
// nats-server's own parser, make one JetStream cluster of every NATS
// service, and every relay run reaches all of its nodes, keeps three
// replicas of each stream (so that losing one node loses nothing), uses
// the same lanes as the others, and is given the time to stop cleanly.
func TestComposeRelaysUseTheNATSCluster(t *testing.T) {
	t.Parallel()
	c := loadCompose(t)
	nodes := c.servicesOf("nats")
	if len(nodes) != 3 {
		t.Fatalf("%s: NATS services %v, want three", composePath, nodes)
	}

	opts := map[string]*server.Options{}
	for _, name := range nodes {
		src := c.bindSource(name, natsConfigTarget(c, name))
		if src == "" {
			t.Errorf("service %s: no configuration file mounted at %s", name, natsConfigTarget(c, name))
			continue
		}
		o, err := server.ProcessConfigFile(src)
		if err != nil {
			t.Errorf("service %s: %s: %v", name, src, err)
			continue
		}
		opts[name] = o
	}
	if t.Failed() {
		return
	}

	clusters := map[string]bool{}
	serverNames := map[string]bool{}
	for _, name := range nodes {
		o := opts[name]
		clusters[o.Cluster.Name] = true
		serverNames[o.ServerName] = true
		if !o.JetStream {
			t.Errorf("service %s: JetStream is not enabled", name)
		}
		if !slices.ContainsFunc(c.mounts(name), func(m mount) bool {
			return !m.bind && (o.StoreDir == m.target || strings.HasPrefix(o.StoreDir, strings.TrimSuffix(m.target, "/")+"/"))
		}) {
			t.Errorf("service %s: JetStream store_dir %q is not on a named volume: the streams would go with the container", name, o.StoreDir)
		}
		if o.HTTPPort != 8222 {
			t.Errorf("service %s: monitoring port %d, want 8222 (the healthcheck's /healthz)", name, o.HTTPPort)
		}
		var routes []string
		for _, u := range o.Routes {
			routes = append(routes, u.Host)
		}
		var want []string
		for _, peer := range nodes {
			want = append(want, net.JoinHostPort(peer, strconv.Itoa(opts[peer].Cluster.Port)))
		}
		if !slices.Equal(slices.Sorted(slices.Values(routes)), want) {
			t.Errorf("service %s: cluster routes %v, want one to each node %v", name, routes, want)
		}
	}
	if len(clusters) != 1 || clusters[""] {
		t.Errorf("NATS cluster names %v: want one name, the same on every node", slices.Collect(maps.Keys(clusters)))
	}
	if len(serverNames) != len(nodes) || serverNames[""] {
		t.Errorf("NATS server names %v: want one per node", slices.Collect(maps.Keys(serverNames)))
	}

	var wantURLs []string
	for _, name := range nodes {
		wantURLs = append(wantURLs, "nats://"+net.JoinHostPort(name, strconv.Itoa(opts[name].Port)))
	}
	lanes := map[int][]string{}
	for name, fs := range c.relayRuns() {
		natsFlag, _ := fs.GetString("nats")
		if got := slices.Sorted(slices.Values(strings.Split(natsFlag, ","))); !slices.Equal(got, wantURLs) {
			t.Errorf("service %s: --nats %q, want every node: %s", name, natsFlag, strings.Join(wantURLs, ","))
		}
		if env, ok := c.environment(name)["NATS_URL"]; ok && env != natsFlag {
			t.Errorf("service %s: NATS_URL %q differs from --nats %q: docker compose exec would reach another cluster", name, env, natsFlag)
		}
		if r, _ := fs.GetInt("replicas"); r != 3 {
			t.Errorf("service %s: --replicas %d, want 3", name, r)
		}
		n, _ := fs.GetInt("lanes")
		lanes[n] = append(lanes[n], name)
		grace, err := time.ParseDuration(cmp.Or(c.Services[name].StopGracePeriod, "10s"))
		if err != nil {
			t.Errorf("service %s: stop_grace_period: %v", name, err)
		}
		if d, _ := fs.GetDuration("shutdown-timeout"); grace < d+5*time.Second {
			t.Errorf("service %s: stop_grace_period %s, want at least --shutdown-timeout (%s) and 5 s to hand back what is left: SIGKILL would leave it to --ack-wait",
				name, grace, d)
		}
	}
	if len(lanes) > 1 {
		t.Errorf("relays with different --lanes %v: every relay of a cluster must use the same", lanes)
	}
}

// natsConfigTarget is where a NATS service reads its configuration: the
// --config (or -c) of its command.
func natsConfigTarget(c *compose, name string) string {
	args := c.command(name)
	for i, a := range args {
		if (a == "--config" || a == "-c") && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, "--config="); ok {
			return v
		}
	}
	return "/etc/nats/nats-server.conf"
}

// TestComposeMountsAndPorts: every file the compose file mounts is a file
// of deploy/ that exists (a missing one makes Docker mount an empty
// directory in its place), every named volume is declared, the image is
// built from the Dockerfile at the root, and no two services publish the
// same host port.
func TestComposeMountsAndPorts(t *testing.T) {
	t.Parallel()
	c := loadCompose(t)
	hostPorts := map[string]string{}
	for _, name := range slices.Sorted(maps.Keys(c.Services)) {
		s := c.Services[name]
		if s.Build.Context != "" {
			df := filepath.Join(repoRoot, filepath.FromSlash(s.Build.Context), cmp.Or(s.Build.Dockerfile, "Dockerfile"))
			if _, err := os.Stat(df); err != nil {
				t.Errorf("service %s: build: %v", name, err)
			}
		}
		for _, m := range c.mounts(name) {
			if !m.bind {
				if _, ok := c.Volumes[m.source]; !ok {
					t.Errorf("service %s: volume %q is not declared under volumes:", name, m.source)
				}
				continue
			}
			rel := path.Clean(m.source)
			if !strings.HasPrefix(rel, "deploy/") {
				t.Errorf("service %s: mounts %q: mount files of deploy/ only", name, m.source)
				continue
			}
			if fi, err := os.Stat(filepath.Join(repoRoot, filepath.FromSlash(rel))); err != nil {
				t.Errorf("service %s: mounts %s: %v", name, m.source, err)
			} else if fi.IsDir() {
				t.Errorf("service %s: mounts the directory %s: mount its files one by one", name, m.source)
			}
		}
		for _, p := range s.Ports {
			parts := strings.Split(strings.Split(p, "/")[0], ":")
			if len(parts) < 2 {
				continue // a container port alone: Docker picks the host's
			}
			host := strings.Join(parts[:len(parts)-1], ":")
			if other, ok := hostPorts[host]; ok {
				t.Errorf("services %s and %s both publish host port %s", other, name, host)
			}
			hostPorts[host] = name
		}
	}
}

// TestComposePrometheusScrapesBothRelays: the Prometheus of the compose
// file loads a configuration whose relay job scrapes every relay run
// service at its --metrics port, each listening on all interfaces, and
// finds its rule files next to it, so that the dashboard and the alerts see
// the whole deployment.
func TestComposePrometheusScrapesBothRelays(t *testing.T) {
	t.Parallel()
	c := loadCompose(t)
	proms := c.servicesOf("prom/prometheus")
	if len(proms) != 1 {
		t.Fatalf("%s: Prometheus services %v, want one", composePath, proms)
	}
	prom := proms[0]
	target := "/etc/prometheus/prometheus.yml"
	for _, a := range c.command(prom) {
		if v, ok := strings.CutPrefix(a, "--config.file="); ok {
			target = v
		}
	}
	src := c.bindSource(prom, target)
	if src == "" {
		t.Fatalf("service %s: nothing mounted at %s", prom, target)
	}
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	var cfg scrapeConfig
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatalf("%s: %v", src, err)
	}
	for _, rf := range cfg.RuleFiles {
		in := path.Join(path.Dir(target), rf)
		if c.bindSource(prom, in) == "" {
			t.Errorf("service %s: %s loads rule file %s, not mounted at %s", prom, src, rf, in)
		}
	}

	var scraped []string
	for _, sc := range cfg.ScrapeConfigs {
		if sc.JobName != "relay" {
			continue
		}
		for _, st := range sc.StaticConfigs {
			scraped = append(scraped, st.Targets...)
		}
	}
	var want []string
	for name, fs := range c.relayRuns() {
		addr, _ := fs.GetString("metrics")
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			t.Errorf("service %s: --metrics %q: %v", name, addr, err)
			continue
		}
		if host != "0.0.0.0" && host != "" && host != "::" {
			t.Errorf("service %s: --metrics %s: Prometheus reaches it only on all interfaces (0.0.0.0:%s)", name, addr, port)
		}
		want = append(want, net.JoinHostPort(name, port))
	}
	slices.Sort(want)
	if len(want) < 2 {
		t.Errorf("relay run services %v: want two, sharing the work", want)
	}
	if got := slices.Sorted(slices.Values(scraped)); !slices.Equal(got, want) {
		t.Errorf("%s: job relay scrapes %v, want every relay of %s: %v", src, got, composePath, want)
	}
}

// grafanaProvisioning is what the test reads of Grafana's provisioning
// files, data sources and dashboard providers alike.
type grafanaProvisioning struct {
	Datasources []struct {
		Type string `yaml:"type"`
		URL  string `yaml:"url"`
	} `yaml:"datasources"`
	Providers []struct {
		Type    string `yaml:"type"`
		Options struct {
			Path string `yaml:"path"`
		} `yaml:"options"`
	} `yaml:"providers"`
}

// TestComposeGrafanaIsProvisioned: Grafana starts with a Prometheus data
// source pointing at the Prometheus service, and a dashboard provider
// reading the directory relay's dashboard is mounted in, so the dashboard
// works on the first visit with nothing to click.
func TestComposeGrafanaIsProvisioned(t *testing.T) {
	t.Parallel()
	c := loadCompose(t)
	grafanas := c.servicesOf("grafana/grafana")
	proms := c.servicesOf("prom/prometheus")
	if len(grafanas) != 1 || len(proms) != 1 {
		t.Fatalf("%s: Grafana services %v and Prometheus services %v, want one of each", composePath, grafanas, proms)
	}
	g := grafanas[0]
	var datasources, dashboards []string
	dashboardAt := ""
	for _, m := range c.mounts(g) {
		if !m.bind {
			continue
		}
		switch {
		case path.Dir(m.target) == "/etc/grafana/provisioning/datasources":
			datasources = append(datasources, m.source)
		case path.Dir(m.target) == "/etc/grafana/provisioning/dashboards":
			dashboards = append(dashboards, m.source)
		case path.Clean(m.source) == path.Join("deploy", "grafana", "relay.json"):
			dashboardAt = path.Dir(m.target)
		}
	}
	if dashboardAt == "" {
		t.Errorf("service %s: deploy/grafana/relay.json is not mounted", g)
	}
	read := func(src string) grafanaProvisioning {
		var p grafanaProvisioning
		b, err := os.ReadFile(filepath.Join(repoRoot, filepath.FromSlash(src)))
		if err == nil {
			err = yaml.Unmarshal(b, &p)
		}
		if err != nil {
			t.Errorf("service %s: %s: %v", g, src, err)
		}
		return p
	}

	wantURL := "http://" + net.JoinHostPort(proms[0], "9090")
	found := false
	for _, src := range datasources {
		for _, ds := range read(src).Datasources {
			if ds.Type == "prometheus" {
				found = true
				if strings.TrimSuffix(ds.URL, "/") != wantURL {
					t.Errorf("%s: Prometheus data source at %q, want %s", src, ds.URL, wantURL)
				}
			}
		}
	}
	if !found {
		t.Errorf("service %s: no Prometheus data source provisioned (from %v)", g, datasources)
	}
	var paths []string
	for _, src := range dashboards {
		for _, p := range read(src).Providers {
			if p.Type == "file" {
				paths = append(paths, path.Clean(p.Options.Path))
			}
		}
	}
	if dashboardAt != "" && !slices.Contains(paths, dashboardAt) {
		t.Errorf("service %s: relay.json is mounted in %s, but the dashboard providers read %v", g, dashboardAt, paths)
	}
}

// goMod is what the tests read of go.mod: the go line and the required
// modules' versions.
type goMod struct {
	goVersion string
	require   map[string]string
}

func readGoMod(t *testing.T) goMod {
	t.Helper()
	b, err := os.ReadFile(goModPath)
	if err != nil {
		t.Fatalf("reading go.mod: %v", err)
	}
	m := goMod{require: map[string]string{}}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(sc.Text()), "require "))
		switch {
		case len(f) == 2 && f[0] == "go":
			m.goVersion = f[1]
		case len(f) >= 2 && strings.HasPrefix(f[1], "v"):
			m.require[f[0]] = f[1]
		}
	}
	if m.goVersion == "" {
		t.Fatalf("%s: no go line", goModPath)
	}
	return m
}

// majorMinor is "1.26" of "1.26.7" or "1.26".
func majorMinor(v string) string {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return v
	}
	return parts[0] + "." + parts[1]
}

// prometheusRelease is the Prometheus release of a version of the Go module
// github.com/prometheus/prometheus, which numbers release 3.16.0 v0.316.0.
func prometheusRelease(module string) string {
	parts := strings.SplitN(strings.TrimPrefix(module, "v"), ".", 3)
	if len(parts) != 3 || parts[0] != "0" {
		return ""
	}
	minor, err := strconv.Atoi(parts[1])
	if err != nil {
		return ""
	}
	return fmt.Sprintf("v%d.%d.%s", minor/100, minor%100, parts[2])
}

// TestComposeImagesMatchGoMod: the NATS and Prometheus images are the
// releases the tests run against (nats-server in-process, the alert rules
// and PromQL loaded with Prometheus's packages), so that what passes here
// is what runs in the compose file.
func TestComposeImagesMatchGoMod(t *testing.T) {
	t.Parallel()
	c := loadCompose(t)
	mod := readGoMod(t)
	for _, tc := range []struct {
		repo, module string
		release      func(string) string
	}{
		{"nats", "github.com/nats-io/nats-server/v2", func(v string) string { return strings.TrimPrefix(v, "v") }},
		{"prom/prometheus", "github.com/prometheus/prometheus", prometheusRelease},
	} {
		want := tc.release(mod.require[tc.module])
		if want == "" {
			t.Errorf("go.mod: no usable version of %s (%q)", tc.module, mod.require[tc.module])
			continue
		}
		for _, name := range c.servicesOf(tc.repo) {
			_, tag, _ := strings.Cut(c.Services[name].Image, ":")
			if release, _, _ := strings.Cut(tag, "-"); release != want {
				t.Errorf("service %s: image %s, want release %s (go.mod has %s %s)", name, c.Services[name].Image, want, tc.module, mod.require[tc.module])
			}
		}
	}
}

// dockerInstruction is one instruction of a Dockerfile, continuation lines
// joined.
type dockerInstruction struct {
	cmd  string // upper case: FROM, RUN, ...
	args string
	line int
}

// dockerStage is one FROM and the instructions under it.
type dockerStage struct {
	image, name  string
	instructions []dockerInstruction
}

func (s dockerStage) all(cmd string) []dockerInstruction {
	var out []dockerInstruction
	for _, in := range s.instructions {
		if in.cmd == cmd {
			out = append(out, in)
		}
	}
	return out
}

// readDockerfile splits the Dockerfile into its stages, as Docker reads it
// (comments dropped, lines ending in \ joined).
func readDockerfile(t *testing.T) []dockerStage {
	t.Helper()
	b, err := os.ReadFile(dockerPath)
	if err != nil {
		t.Fatalf("reading the Dockerfile: %v", err)
	}
	var stages []dockerStage
	var cur strings.Builder
	start := 0
	flush := func() {
		text := strings.TrimSpace(cur.String())
		cur.Reset()
		if text == "" {
			return
		}
		cmd, args, _ := strings.Cut(text, " ")
		in := dockerInstruction{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args), line: start}
		if in.cmd == "FROM" {
			f := strings.Fields(in.args)
			f = slices.DeleteFunc(f, func(s string) bool { return strings.HasPrefix(s, "--") })
			st := dockerStage{}
			if len(f) > 0 {
				st.image = f[0]
			}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				st.name = f[2]
			}
			stages = append(stages, st)
			return
		}
		if len(stages) == 0 {
			if in.cmd != "ARG" {
				t.Errorf("%s:%d: %s before the first FROM", dockerPath, in.line, in.cmd)
			}
			return
		}
		last := &stages[len(stages)-1]
		last.instructions = append(last.instructions, in)
	}
	for i, line := range strings.Split(string(b), "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") {
			continue
		}
		if cur.Len() == 0 {
			start = i + 1
		}
		if s, ok := strings.CutSuffix(trimmed, `\`); ok {
			cur.WriteString(s + " ")
			continue
		}
		cur.WriteString(trimmed)
		flush()
	}
	flush()
	if len(stages) == 0 {
		t.Fatalf("%s: no FROM", dockerPath)
	}
	return stages
}

// execForm decodes an instruction in exec (JSON) form.
func execForm(t *testing.T, in dockerInstruction) []string {
	t.Helper()
	var out []string
	if err := json.Unmarshal([]byte(in.args), &out); err != nil {
		t.Errorf("%s:%d: %s must be in exec form, a JSON list: %v", dockerPath, in.line, in.cmd, err)
	}
	return out
}

// dockerfileCmd is the final stage's CMD: the relay command line a
// container runs when it is given none.
func dockerfileCmd(t *testing.T) []string {
	t.Helper()
	stages := readDockerfile(t)
	cmds := stages[len(stages)-1].all("CMD")
	if len(cmds) == 0 {
		t.Fatalf("%s: the final stage has no CMD", dockerPath)
	}
	return execForm(t, cmds[len(cmds)-1])
}

// TestDockerfileBuildsAStaticNonRootRelay: the image is built as `make
// build` builds (static, trimmed, versioned) with the Go of go.mod, checks
// the binary it built runs, and ships it alone on a small base, as a user
// that is not root, with the entry point the compose file's commands are
// written for.
func TestDockerfileBuildsAStaticNonRootRelay(t *testing.T) {
	t.Parallel()
	stages := readDockerfile(t)
	mod := readGoMod(t)
	final := stages[len(stages)-1]
	if len(stages) < 2 {
		t.Fatalf("%s: %d stage: want a build stage and a final one", dockerPath, len(stages))
	}
	build := stages[0]
	for _, in := range final.all("COPY") {
		if from, ok := strings.CutPrefix(strings.Fields(in.args)[0], "--from="); ok && strings.HasSuffix(in.args, " /relay") {
			for _, s := range stages {
				if s.name == from {
					build = s
				}
			}
		}
	}
	runs := func() string {
		var b strings.Builder
		for _, in := range build.all("RUN") {
			b.WriteString(in.args + "\n")
		}
		return b.String()
	}()

	image, tag, _ := strings.Cut(build.image, ":")
	goTag, _, _ := strings.Cut(tag, "-")
	var user string
	for _, in := range final.all("USER") {
		user, _, _ = strings.Cut(in.args, ":")
	}
	entry := final.all("ENTRYPOINT")
	for _, tc := range []struct {
		what string
		ok   bool
		got  string
	}{
		{"the build stage is golang:" + majorMinor(mod.goVersion) + ", go.mod's go " + mod.goVersion,
			(image == "golang" || image == "docker.io/library/golang") && majorMinor(goTag) == majorMinor(mod.goVersion), build.image},
		{"the build stage takes VERSION as an ARG defaulting to dev",
			slices.ContainsFunc(build.all("ARG"), func(in dockerInstruction) bool { return in.args == "VERSION=dev" }), fmt.Sprint(build.all("ARG"))},
		{"go build runs with CGO_ENABLED=0, for a static binary", strings.Contains(runs, "CGO_ENABLED=0 go build"), runs},
		{"go build has -trimpath and -X main.version=${VERSION}",
			strings.Contains(runs, "-trimpath") && strings.Contains(runs, "-X main.version=${VERSION}") && strings.Contains(runs, "./cmd/relay"), runs},
		{"the build stage runs relay version on what it built", regexp.MustCompile(`relay version\b`).MatchString(runs), runs},
		{"the final stage runs as a user other than root",
			(user != "" && user != "root" && user != "0") || (user == "" && strings.HasSuffix(final.image, ":nonroot")), final.image + " USER " + user},
		{"the final stage is distroless/static, or scratch with CA certificates copied for HTTPS webhooks",
			strings.HasPrefix(final.image, "gcr.io/distroless/static") ||
				final.image == "scratch" && slices.ContainsFunc(final.all("COPY"), func(in dockerInstruction) bool {
					return strings.Contains(in.args, "ca-certificates")
				}),
			final.image},
		{`ENTRYPOINT is ["/relay"], which the compose commands are arguments to`,
			len(entry) > 0 && slices.Equal(execForm(t, entry[len(entry)-1]), []string{"/relay"}), fmt.Sprint(entry)},
		{"the final stage exposes 9469 (metrics)",
			slices.ContainsFunc(final.all("EXPOSE"), func(in dockerInstruction) bool { return slices.Contains(strings.Fields(in.args), "9469") }),
			fmt.Sprint(final.all("EXPOSE"))},
	} {
		if !tc.ok {
			t.Errorf("%s: want %s; got %s", dockerPath, tc.what, tc.got)
		}
	}
}
