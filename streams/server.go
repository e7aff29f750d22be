package streams

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nuid"
)

// ErrServerNotReady is returned when the embedded server cannot start: its
// address is taken, JetStream cannot use its directory, or it does not
// accept connections in time. It wraps the server's own reason when there
// is one.
var ErrServerNotReady = errors.New("embedded NATS server not ready")

// ServerConfig says where the embedded server listens and stores.
type ServerConfig struct {
	// Listen is HOST:PORT for clients such as `nats pub`. Port 0 or -1
	// picks a free port. Defaults to 127.0.0.1:4222.
	Listen string
	// DataDir holds the JetStream files. Required.
	DataDir string
	// Logs turns on the server's own log lines on stderr.
	Logs bool
	// ServicePassword, when set, gives the server two users: every client
	// that connects without credentials is [DefaultUser], with every
	// permission, as on a server without users (`nats pub events.x` works
	// as before); [ServiceUser], with this password and only in-process,
	// may subscribe to [APISubjects] and [DiscoverySubjects] and publish to
	// [ReplySubjects] alone, the connection relay serves requests from.
	// Empty: no users, every client may do everything.
	ServicePassword string
}

// ServiceUser is the user of the connection relay serves requests from
// (`relay sub test`): it may publish to inboxes only, so that an answer
// cannot land in a stream or a bucket whatever reply subject a request
// names. docs/permissions.md gives the same user for a cluster.
const ServiceUser = "relay-service"

// DefaultUser is the embedded server's user of every client that gives no
// credentials.
const DefaultUser = "relay"

// StartServer starts an in-process nats-server with JetStream, as `relay run`
// does when no cluster is given, and waits until it accepts connections.
func StartServer(cfg ServerConfig) (*server.Server, error) {
	listen := cfg.Listen
	if listen == "" {
		listen = "127.0.0.1:4222"
	}
	host, portStr, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, fmt.Errorf("listen address %q: %w", listen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("listen port %q: %w", portStr, err)
	}
	if port == 0 {
		port = server.RANDOM_PORT
	}
	opts := &server.Options{
		ServerName: "relay-embedded",
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   cfg.DataDir,
		NoSigs:     true,
		NoLog:      !cfg.Logs,
	}
	if cfg.ServicePassword != "" {
		setServiceUser(opts, cfg.ServicePassword)
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded server: %w", err)
	}
	log := &startupLog{}
	if cfg.Logs {
		srv.ConfigureLogger()
		log.Logger = srv.Logger()
	}
	srv.SetLoggerV2(log, false, false, false)
	// Start sets up JetStream and the client listener before it returns,
	// and says why either failed only in a fatal log line.
	srv.Start()
	if err := log.failure(); err != nil {
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil, fmt.Errorf("%w: %w", ErrServerNotReady, err)
	}
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return nil, fmt.Errorf("%w: not accepting connections on %s", ErrServerNotReady, listen)
	}
	return srv, nil
}

// setServiceUser gives opts the users of [ServerConfig.ServicePassword].
// The default user's password is never told to anyone: it is only there
// because nats-server wants one, and no client needs it. The service user
// is not given allow_responses: the server lets a user with it publish to
// the reply subject of any message it received, retries.wait.… included,
// which is the very hole the user closes.
func setServiceUser(opts *server.Options, password string) {
	opts.Users = []*server.User{
		{Username: DefaultUser, Password: nuid.Next()},
		{
			Username: ServiceUser,
			Password: password,
			Permissions: &server.Permissions{
				Publish:   &server.SubjectPermission{Allow: []string{ReplySubjects}},
				Subscribe: &server.SubjectPermission{Allow: []string{APISubjects, DiscoverySubjects}},
			},
			AllowedConnectionTypes: map[string]struct{}{jwt.ConnectionTypeInProcess: {}},
		},
	}
	opts.NoAuthUser = DefaultUser
}

// startupLog is the embedded server's logger: it keeps the first fatal
// line (the server cannot listen, or cannot start JetStream in its
// directory), for StartServer to return at once instead of waiting for a
// server that will never be ready, and passes every line to Logger when the
// server's own logs are on. A fatal line goes there as an error: the
// server's own logger would end the process.
type startupLog struct {
	server.Logger

	mu    sync.Mutex
	fatal error
}

// failure is the first fatal line, as an error that wraps the error it
// names, if any.
func (l *startupLog) failure() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fatal
}

func (l *startupLog) Fatalf(format string, v ...any) {
	l.mu.Lock()
	if l.fatal == nil {
		l.fatal = errors.New(strings.TrimSpace(fmt.Sprintf(format, v...)))
		for _, arg := range v {
			// The listener's or JetStream's own error says it best.
			if err, ok := arg.(error); ok {
				l.fatal = err
				break
			}
		}
	}
	l.mu.Unlock()
	if l.Logger != nil {
		l.Logger.Errorf(format, v...)
	}
}

func (l *startupLog) Noticef(format string, v ...any) {
	if l.Logger != nil {
		l.Logger.Noticef(format, v...)
	}
}

func (l *startupLog) Warnf(format string, v ...any) {
	if l.Logger != nil {
		l.Logger.Warnf(format, v...)
	}
}

func (l *startupLog) Errorf(format string, v ...any) {
	if l.Logger != nil {
		l.Logger.Errorf(format, v...)
	}
}

func (l *startupLog) Debugf(format string, v ...any) {
	if l.Logger != nil {
		l.Logger.Debugf(format, v...)
	}
}

func (l *startupLog) Tracef(format string, v ...any) {
	if l.Logger != nil {
		l.Logger.Tracef(format, v...)
	}
}

// LocalURL is the URL on which a process reaches the server it embeds: its
// client listener, with an unspecified host (0.0.0.0, ::) replaced by the
// loopback address of the same family, which every system can dial.
//
// relay connects to its embedded server over this loopback socket rather
// than nats.InProcessServer: the in-process connection is a net.Pipe, which
// has no buffer, so each write waits until the other side has read it,
// while a socket lets the client and the server write ahead. On two cores
// relay delivered about 8 % more a second that way, for about a tenth less
// CPU per delivery (bench/engine's throughput scenario, 2026-12-02).
func LocalURL(srv *server.Server) (string, error) {
	addr, ok := srv.Addr().(*net.TCPAddr)
	if !ok {
		return "", fmt.Errorf("%w: no client listener", ErrServerNotReady)
	}
	ip := addr.IP
	if ip.IsUnspecified() {
		ip = net.IPv6loopback
		if ip4 := addr.IP.To4(); ip4 != nil {
			ip = net.IPv4(127, 0, 0, 1)
		}
	}
	return "nats://" + net.JoinHostPort(ip.String(), strconv.Itoa(addr.Port)), nil
}
