package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/relay-dev/relay/internal/secrets"
	"github.com/relay-dev/relay/internal/subscribers"
)

// connFlags are the NATS connection options every command that talks to
// NATS takes, named as the nats CLI names them.
type connFlags struct {
	url      string
	creds    string
	nkey     string
	user     string
	password string
	token    string
	tlsCert  string
	tlsKey   string
	tlsCA    string
	context  string
	// secretsKeyFile names the file of the keys that seal subscribers'
	// credentials (see keys).
	secretsKeyFile string
	// refused, when set, records what NATS refuses the connections of
	// connect, so that the command reports the refusal instead of the
	// timeout it causes.
	refused *refusals
}

func addConnFlags(cmd *cobra.Command) *connFlags {
	c := &connFlags{}
	f := cmd.PersistentFlags()
	f.StringVar(&c.url, "nats", "", "NATS server URLs, comma separated (env NATS_URL); relay run without it starts an embedded server")
	f.StringVar(&c.creds, "creds", "", "NATS user credentials file")
	f.StringVar(&c.nkey, "nkey", "", "NATS NKey seed file")
	f.StringVar(&c.user, "user", "", "NATS user name")
	f.StringVar(&c.password, "password", "", "NATS password")
	f.StringVar(&c.token, "token", "", "NATS authentication token")
	f.StringVar(&c.tlsCert, "tlscert", "", "TLS client certificate file")
	f.StringVar(&c.tlsKey, "tlskey", "", "TLS client private key file")
	f.StringVar(&c.tlsCA, "tlsca", "", "TLS certificate authority file")
	f.StringVar(&c.context, "context", "", "nats CLI context to take the URL and credentials from")
	f.StringVar(&c.secretsKeyFile, "secrets-key-file", "", "file of the keys that seal subscribers' secrets, one base64 key a line, the current first (env "+secretsKeyFileEnv+"); without it they are stored in the clear")
	return c
}

// secretsKeyFileEnv names the key file when --secrets-key-file is not given.
const secretsKeyFileEnv = "RELAY_SECRETS_KEY_FILE"

// keys is the keyring that seals and opens subscribers' credentials: the
// keys of --secrets-key-file, else of the file RELAY_SECRETS_KEY_FILE
// names; nil when neither names one. A file that cannot be read or holds
// something other than keys is a usage error.
func (c *connFlags) keys() (*secrets.Keyring, error) {
	path := cmp.Or(c.secretsKeyFile, os.Getenv(secretsKeyFileEnv))
	if path == "" {
		return nil, nil
	}
	k, err := secrets.LoadFile(path)
	if err != nil {
		return nil, usagef("--secrets-key-file: %v", err)
	}
	return k, nil
}

// openStore opens the subscribers bucket with the keyring of keys, so that
// every command reads and writes credentials by the same rule.
func (c *connFlags) openStore(ctx context.Context, js jetstream.JetStream) (*subscribers.Store, error) {
	keys, err := c.keys()
	if err != nil {
		return nil, err
	}
	return subscribers.Open(ctx, js, subscribers.WithKeys(keys))
}

// natsContext is the part of a nats CLI context file relay understands.
type natsContext struct {
	URL      string `json:"url"`
	User     string `json:"user"`
	Password string `json:"password"`
	Creds    string `json:"creds"`
	NKey     string `json:"nkey"`
	Token    string `json:"token"`
	Cert     string `json:"cert"`
	Key      string `json:"key"`
	CA       string `json:"ca"`
}

var contextName = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

// resolve applies, in order of precedence, the flags, NATS_URL, and the
// named nats CLI context. It reports whether any NATS server was named at
// all; relay run starts an embedded one when none was.
func (c *connFlags) resolve() (bool, error) {
	if c.url == "" {
		c.url = os.Getenv("NATS_URL")
	}
	if c.context != "" {
		if !contextName.MatchString(c.context) {
			return false, usagef("--context: %q is not a context name", c.context)
		}
		dir := os.Getenv("XDG_CONFIG_HOME")
		if dir == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				return false, fmt.Errorf("--context: %w", err)
			}
			dir = filepath.Join(home, ".config")
		}
		raw, err := os.ReadFile(filepath.Join(dir, "nats", "context", c.context+".json"))
		if err != nil {
			return false, usagef("--context: cannot read context %q: %v (list them with: nats context ls)", c.context, err)
		}
		var nc natsContext
		if err := json.Unmarshal(raw, &nc); err != nil {
			return false, usagef("--context: context %q is not valid JSON: %v", c.context, err)
		}
		fill := func(dst *string, v string) {
			if *dst == "" {
				*dst = v
			}
		}
		fill(&c.url, nc.URL)
		fill(&c.user, nc.User)
		fill(&c.password, nc.Password)
		fill(&c.creds, nc.Creds)
		fill(&c.nkey, nc.NKey)
		fill(&c.token, nc.Token)
		fill(&c.tlsCert, nc.Cert)
		fill(&c.tlsKey, nc.Key)
		fill(&c.tlsCA, nc.CA)
	}
	if (c.tlsCert == "") != (c.tlsKey == "") {
		return false, usagef("--tlscert and --tlskey: give both or neither")
	}
	if c.password != "" && c.user == "" {
		return false, usagef("--password: needs --user")
	}
	return c.url != "", nil
}

// options turns the flags into nats.go options.
func (c *connFlags) options(name string) ([]nats.Option, error) {
	opts := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
	}
	if c.creds != "" {
		opts = append(opts, nats.UserCredentials(c.creds))
	}
	if c.nkey != "" {
		o, err := nats.NkeyOptionFromSeed(c.nkey)
		if err != nil {
			return nil, usagef("--nkey: %v", err)
		}
		opts = append(opts, o)
	}
	if c.user != "" {
		opts = append(opts, nats.UserInfo(c.user, c.password))
	}
	if c.token != "" {
		opts = append(opts, nats.Token(c.token))
	}
	if c.tlsCert != "" {
		opts = append(opts, nats.ClientCert(c.tlsCert, c.tlsKey))
	}
	if c.tlsCA != "" {
		opts = append(opts, nats.RootCAs(c.tlsCA))
	}
	return opts, nil
}

// commandConnectTimeout bounds a one-shot command's connection handshake.
const commandConnectTimeout = 10 * time.Second

// connect dials the named NATS servers; commands other than run need one.
func (c *connFlags) connect(name string) (*nats.Conn, error) {
	named, err := c.resolve()
	if err != nil {
		return nil, err
	}
	if !named {
		c.url = nats.DefaultURL
	}
	opts, err := c.options(name)
	if err != nil {
		return nil, err
	}
	// One try, but a patient one: a server busy with a burst can take
	// longer than nats.go's 2 s to finish the handshake, and a command that
	// gives up on a server that is up only sends its user to look for a
	// fault that is not there. A server that is down still refuses at once.
	opts = append(opts, nats.MaxReconnects(0), nats.RetryOnFailedConnect(false), nats.Timeout(commandConnectTimeout))
	if c.refused != nil {
		opts = append(opts, c.refused.option())
	}
	nc, err := nats.Connect(c.url, opts...)
	if err != nil {
		return nil, cannotConnect(c.url, err, "is relay run or a NATS server up? set --nats or NATS_URL")
	}
	return nc, nil
}

// cannotConnect is the one message of every command that could not reach
// NATS at url, with what to check.
func cannotConnect(url string, err error, check string) error {
	return fmt.Errorf("cannot connect to NATS at %s: %w (%s)", maskNATS(url), err, check)
}

// maskNATS is a NATS URL list as it may be printed: the user and password,
// or the token, of each URL replaced by ***. A list that does not parse is
// printed as *** whole: it may hold a secret where a URL holds none.
func maskNATS(urls string) string {
	return eachNATSURL(urls, "***", func(u *url.URL) string {
		masked := u.User != nil
		u.User = nil
		out := u.String()
		if masked {
			scheme, rest, _ := strings.Cut(out, "://")
			out = scheme + "://***@" + rest
		}
		return out
	})
}

// withoutUserinfo is urls without the user and password any of them
// carries: nats.go prefers a URL's credentials to the options given with
// it, so the service user's connection must not be handed relay's own.
func withoutUserinfo(urls string) string {
	return eachNATSURL(urls, "", func(u *url.URL) string {
		u.User = nil
		return u.String()
	})
}

// eachNATSURL rewrites each URL of a --nats list (host:port forms taken as
// nats://) with f, keeping the form it was given in; one that does not
// parse becomes bad, or stays as it is when bad is "".
func eachNATSURL(urls, bad string, f func(u *url.URL) string) string {
	parts := strings.Split(urls, ",")
	for i, part := range parts {
		part = strings.TrimSpace(part)
		raw := part
		if !strings.Contains(raw, "://") {
			raw = "nats://" + raw // host:port, or user:pass@host:port
		}
		u, err := url.Parse(raw)
		if err != nil {
			parts[i] = cmp.Or(bad, part)
			continue
		}
		out := f(u)
		if !strings.Contains(part, "://") {
			out = strings.TrimPrefix(out, "nats://")
		}
		parts[i] = out
	}
	return strings.Join(parts, ",")
}

// serviceFlags are relay run's credentials of its service connection, the
// one it answers requests on core NATS from (relay sub test): a user of the
// cluster given by --nats that may subscribe to relay.api.> and publish to
// _INBOX.> alone (docs/permissions.md), named as the NATS credential flags
// with service- before them. The URL and the TLS settings are the relay's.
type serviceFlags struct {
	creds    string
	nkey     string
	user     string
	password string
}

func addServiceFlags(fl *pflag.FlagSet) *serviceFlags {
	s := &serviceFlags{}
	fl.StringVar(&s.creds, "service-creds", "", "with --nats, credentials file of the user relay sub test is answered as (see docs/permissions.md)")
	fl.StringVar(&s.nkey, "service-nkey", "", "with --nats, NKey seed file of the user relay sub test is answered as")
	fl.StringVar(&s.user, "service-user", "", "with --nats, name of the user relay sub test is answered as")
	fl.StringVar(&s.password, "service-password", "", "with --nats, password of --service-user")
	return s
}

// given reports whether any service credential was given.
func (s *serviceFlags) given() bool {
	return s.creds != "" || s.nkey != "" || s.user != "" || s.password != ""
}

// check says why the service flags cannot be used with a cluster (named)
// or the embedded server (not named).
func (s *serviceFlags) check(named bool) error {
	switch {
	case !s.given():
		return nil
	case !named:
		return usagef("--service-creds, --service-nkey, --service-user, --service-password: go with --nats; the embedded server has its own service user")
	case s.password != "" && s.user == "":
		return usagef("--service-password: needs --service-user")
	}
	return nil
}

// options are the nats.go options of the service connection to the
// cluster conn names: its credentials, conn's TLS settings.
func (s *serviceFlags) options(conn *connFlags) ([]nats.Option, error) {
	svc := connFlags{creds: s.creds, nkey: s.nkey, user: s.user, password: s.password,
		tlsCert: conn.tlsCert, tlsKey: conn.tlsKey, tlsCA: conn.tlsCA}
	opts, err := svc.options(serviceConnName)
	if err != nil {
		return nil, usagef("--service-%s", strings.TrimPrefix(err.Error(), "--"))
	}
	return opts, nil
}

// serviceConnName names the service connection to the NATS server.
const serviceConnName = "relay run service"
