package testrequest

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nuid"

	"github.com/relay-dev/relay/internal/deliver"
	"github.com/relay-dev/relay/internal/subscribers"
)

// Subject is where `relay sub test` asks a running relay for a test
// request: a core NATS subject, not a stream, since a test that finds no
// relay must say so at once rather than wait in a stream for one. Under
// relay.api., apart from the subjects of relay's streams, so that one
// permission names what the command may ask and the relay may answer
// (docs/permissions.md).
const Subject = "relay.api.sub.test"

// Queue is the queue group every relay answers [Subject] in, so that one
// relay, not every relay, makes the request.
const Queue = "relay"

// DefaultType is the event type of a test request that names none: a type
// of relay's own (relay.*), which no subscriber's events match by chance.
const DefaultType = "relay.test"

// WebhookIDPrefix starts the webhook-id of every test request, so that a
// receiver (and its logs) can tell a test from a delivery.
const WebhookIDPrefix = "test_"

// MaxBodyCut is how much of the reply's body an [Answer] carries: the
// 1 KiB a dead letter keeps of it too.
const MaxBodyCut = 1 << 10

var (
	// ErrNoRelay means no relay answers on [Subject]: none runs against
	// this NATS (or none may subscribe to it). A test request needs one,
	// as a delivery does.
	ErrNoRelay = errors.New("no relay answers")

	// ErrInvalid means a [Request] cannot be made: a subscriber id that
	// cannot be one, a body that is not JSON, a type that is not an event
	// type.
	ErrInvalid = errors.New("invalid test request")

	// ErrAnswer means what came back on [Subject] is not an [Answer].
	ErrAnswer = errors.New("the relay's answer does not parse")

	// ErrConfig means a [Responder] was started without what it answers
	// with: a relay's wiring is wrong, not a request.
	ErrConfig = errors.New("incomplete config")
)

// Request is what `relay sub test` asks a relay to send, as JSON on
// [Subject].
type Request struct {
	// Subscriber is the id of the subscriber to send to.
	Subscriber string `json:"subscriber"`
	// Type is the event type the default body names; "" is [DefaultType].
	Type string `json:"type,omitempty"`
	// Body is sent byte for byte (JSON carries it in base64, so that no
	// byte of it changes on the way); empty: [DefaultBody] of the type.
	Body []byte `json:"body,omitempty"`
}

// Check says why r cannot be made, in an error wrapping [ErrInvalid];
// nil when it can. The command checks before it asks, and the relay again,
// since anything may publish on [Subject].
func (r Request) Check() error {
	if err := subscribers.ValidateID(r.Subscriber); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if r.Type != "" {
		if err := CheckType(r.Type); err != nil {
			return err
		}
	}
	if len(r.Body) > 0 && !json.Valid(r.Body) {
		return fmt.Errorf("%w: the body is not JSON", ErrInvalid)
	}
	return nil
}

// CheckType says whether t can be an event type: the subject of an event
// after "events.", dot-separated tokens without a wildcard or a space.
func CheckType(t string) error {
	if len(t) > subscribers.MaxFilterLen {
		return fmt.Errorf("%w: an event type is at most %d bytes, got %d", ErrInvalid, subscribers.MaxFilterLen, len(t))
	}
	if subscribers.ValidateFilter(t) != nil || strings.ContainsAny(t, "*>") {
		return fmt.Errorf("%w: %q is not an event type: dot-separated tokens such as %s or order.paid, no wildcard, no space", ErrInvalid, t, DefaultType)
	}
	return nil
}

// body is what r sends: its own body, else the default one of its type.
func (r Request) body() []byte {
	if len(r.Body) > 0 {
		return r.Body
	}
	return DefaultBody(r.Type)
}

// DefaultBody is the body of a test request given none: a small JSON
// object naming the event type (t, or [DefaultType] when empty) and
// saying where it comes from, which a receiver that parses its events
// can take.
func DefaultBody(t string) []byte {
	if t == "" {
		t = DefaultType
	}
	b, err := json.Marshal(struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	}{t, "a test request from relay sub test"})
	if err != nil {
		// Two strings always encode.
		return []byte(`{}`)
	}
	return b
}

// NewWebhookID returns the webhook-id of a new test request:
// [WebhookIDPrefix] and a NUID, letters and digits, so that it is its own
// webhook-id under [deliver.WebhookID] (no dot, as Standard Webhooks
// requires) and never that of an event a receiver saw before.
func NewWebhookID() string {
	return WebhookIDPrefix + nuid.Next()
}

// Answer is a relay's reply to a [Request], as JSON on the request's inbox.
type Answer struct {
	// Subscriber is the id the request named.
	Subscriber string `json:"subscriber"`
	// Relay names the relay that answered: host/pid.
	Relay string `json:"relay"`
	// NotFound says the relay knows no subscriber of that id: nothing was
	// sent.
	NotFound bool `json:"not_found,omitempty"`
	// WebhookID is the test request's webhook-id; empty when none was
	// sent.
	WebhookID string `json:"webhook_id,omitempty"`
	// Outcome is what the reply would mean for a delivery (delivered,
	// retryable, rejected, gone, refused, local); empty when nothing was
	// sent.
	Outcome string `json:"outcome,omitempty"`
	// Status is the reply's HTTP status, 0 when there was none.
	Status int `json:"status,omitempty"`
	// Duration is how long the request took, from sending it to reading
	// the reply (an OAuth2 token fetched for it included).
	Duration time.Duration `json:"duration_ns,omitempty"`
	// Header is the reply's headers.
	Header http.Header `json:"header,omitempty"`
	// Body is the start of the reply's body, at most [MaxBodyCut] bytes;
	// BodyCut says the body went on past it.
	Body    []byte `json:"body,omitempty"`
	BodyCut bool   `json:"body_cut,omitempty"`
	// Error says why there was no 2xx: the status, or why no reply came
	// (a refused private target names the flag that allows it, as a
	// dead letter's error does). Empty on a 2xx.
	Error string `json:"error,omitempty"`
}

// Accepted reports a 2xx, which a delivery would have counted delivered.
func (a Answer) Accepted() bool {
	return a.Outcome == deliver.Delivered.String()
}

// answerOf is the answer for the outcome of the test request sent to
// subscriber under webhookID.
func answerOf(subscriber, webhookID string, out deliver.Outcome) Answer {
	a := Answer{
		Subscriber: subscriber,
		WebhookID:  webhookID,
		Outcome:    out.Class.String(),
		Status:     out.Status,
		Duration:   out.Duration,
		Header:     out.Header,
		BodyCut:    out.BodyCut,
	}
	if out.Body != "" {
		a.Body = []byte(out.Body)
	}
	if out.Err != nil {
		a.Error = out.Err.Error()
	}
	return a
}

// Name is how a relay names itself in its answers: host/pid, which says
// which of several relays made the request.
func Name() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	return host + "/" + strconv.Itoa(os.Getpid())
}
