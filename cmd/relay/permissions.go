package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"sync"

	"github.com/nats-io/nats.go"
)

// errPermission marks an error that is NATS refusing this user a subject.
var errPermission = errors.New("NATS refused permission")

// violation reads the subject and direction out of the error nats.go reports
// for a server's "Permissions Violation for Publish to "X"" (or
// "Subscription to "X"", with a queue group after it).
var violation = regexp.MustCompile(`Permissions Violation for (Publish|Subscription) to "([^"]+)"`)

// refusals records the subjects NATS refused a connection. NATS answers a
// refused publish with an asynchronous error and nothing else, so a refused
// JetStream request would otherwise only time out, and its error would not
// say why; the first refusal is what a command reports in its place.
//
// While armed, the first refusal also calls abort, so that the command stops
// at once instead of waiting out its timeouts. Once disarmed (relay run,
// after its start-up), refusals are only logged: a relay that is running
// keeps delivering what it still may.
type refusals struct {
	// log, when set, gets a line for every refusal once disarmed, and for
	// every other asynchronous error; without it the other errors go to
	// stderr, as nats.go's own handler writes them.
	log *slog.Logger

	mu    sync.Mutex
	first error
	armed bool
	abort func(*nats.Conn)
}

// newRefusals returns refusals armed with abort (nil: nothing to stop) and
// logging to log (nil: no log).
func newRefusals(abort func(*nats.Conn), log *slog.Logger) *refusals {
	return &refusals{log: log, armed: abort != nil, abort: abort}
}

// option installs the recorder as the connection's asynchronous error
// handler, in place of nats.go's, which writes every error to the process's
// stderr.
func (r *refusals) option() nats.Option {
	return nats.ErrorHandler(r.handle)
}

// handle is the connection's asynchronous error handler. A refusal reaches
// it, and nothing else of the refused request does.
func (r *refusals) handle(nc *nats.Conn, sub *nats.Subscription, err error) {
	if !errors.Is(err, nats.ErrPermissionViolation) {
		switch {
		case r.log == nil:
			fmt.Fprintf(os.Stderr, "relay: %s\n", oneLine(err.Error()))
		case sub != nil:
			r.log.Warn("NATS reported an error", "subject", sub.Subject, "err", err)
		default:
			r.log.Warn("NATS reported an error", "err", err)
		}
		return
	}
	refused := permissionError(err)
	r.mu.Lock()
	first := r.first == nil
	if first {
		r.first = refused
	}
	armed := r.armed
	r.mu.Unlock()
	switch {
	case armed && first:
		// The command fails with the refusal: it is not logged as well.
		r.abort(nc)
	case !armed && r.log != nil:
		// The subject is in the message, not an attribute: the logger
		// holds back a repeated line by its message, and each refused
		// subject must be seen.
		r.log.Error(refused.Error())
	}
}

// disarm ends the start-up: later refusals are recorded and logged, and
// stop nothing.
func (r *refusals) disarm() {
	r.mu.Lock()
	r.armed = false
	r.mu.Unlock()
}

// explain returns the first refusal, which is why a command failed (or was
// stopped) when there is one, and else err.
func (r *refusals) explain(err error) error {
	if r == nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.first != nil {
		return r.first
	}
	return err
}

// permissionError turns what nats.go reports for a refusal into the error
// relay prints: the direction and subject refused, and where to look.
func permissionError(err error) error {
	m := violation.FindStringSubmatch(err.Error())
	if m == nil {
		return fmt.Errorf("%w: %s; grant it (see docs/permissions.md)", errPermission, oneLine(err.Error()))
	}
	verb := "publish to"
	if m[1] == "Subscription" {
		verb = "subscribe to"
	}
	return fmt.Errorf("%w to %s %q for this user; grant it (see docs/permissions.md)", errPermission, verb, m[2])
}
