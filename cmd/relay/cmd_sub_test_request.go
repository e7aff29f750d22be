package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/internal/testrequest"
)

// subTestMargin is how long relay sub test waits for a relay's answer
// beyond the subscriber's --timeout: the relay catching up with the bucket
// (up to 2 s) and the round trips over NATS.
const subTestMargin = 5 * time.Second

func newSubTestCmd(conn *connFlags) *cobra.Command {
	var (
		eventType, data string
		asJSON          bool
		wait            time.Duration
	)
	cmd := &cobra.Command{
		Use:   "test ID [--type T] [--data JSON]",
		Short: "Send one signed request to a subscriber now, through a running relay; show the reply",
		Long: `Sends one request now, to that subscriber only, signed and authenticated
exactly as a delivery is: its signatures, its --header list, its OAuth2 bearer,
its client certificate and CA, its --timeout. Its webhook-id is one of its own,
test_ and a unique suffix, so that a receiver tells it from an event.

A running relay makes the request: the command asks one over NATS
(relay.api.sub.test) and waits for its answer, so that the relay's own
--allow-private-targets, --proxy and SSRF guard apply to it exactly as to a
delivery, from where deliveries leave. With no relay running it says so and
exits 1.

It prints the status, the time the request took, the relay that made it, the
reply's headers and the first 1 KiB of its body. Exits 0 on a 2xx, 1 otherwise.

The body is --data, sent byte for byte (it must be JSON), else a small JSON
object naming --type (default relay.test). A disabled or paused subscriber can
be tested: the test ignores its state, its rate and its circuit. It writes no
delivery, no dead letter and no rate-limit token, and no delivery metric
counts it.`,
		Example: `  relay sub test demo
  relay sub test demo --type order.paid
  relay sub test demo --data '{"id":"evt_test","status":"paid"}' --json`,
		Args: exactArgs(1, "a subscriber ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			req, err := subTestRequest(cmd, args[0], eventType, data)
			if err != nil {
				return err
			}
			if wait < 0 {
				return usagef("--wait: must be 0 (the subscriber's --timeout plus %s) or more, got %s", subTestMargin, wait)
			}
			ans, err := askSubTest(cmd.Context(), conn, req, wait)
			if err != nil {
				return err
			}
			if asJSON {
				err = writeJSON(cmd.OutOrStdout(), shownTestOf(ans))
			} else {
				err = printSubTest(cmd.OutOrStdout(), ans)
			}
			if err != nil {
				return err
			}
			return subTestFailure(req.Subscriber, ans)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&eventType, "type", "", "event type the default body names (default "+testrequest.DefaultType+"); not with --data")
	fl.StringVar(&data, "data", "", "JSON body to send, byte for byte, instead of the default one")
	fl.DurationVar(&wait, "wait", 0, "how long to wait for the relay's answer (0: the subscriber's --timeout plus "+subTestMargin.String()+")")
	fl.BoolVar(&asJSON, "json", false, "print one JSON object")
	return cmd
}

// subTestRequest is the test request the command line asks for, checked
// before anything connects: each fault is a usage error naming its flag.
func subTestRequest(cmd *cobra.Command, id, eventType, data string) (testrequest.Request, error) {
	req := testrequest.Request{Subscriber: id}
	if err := subscribers.ValidateID(id); err != nil {
		return req, validationErr(err)
	}
	fl := cmd.Flags()
	if fl.Changed("type") && fl.Changed("data") {
		return req, usagef("--type and --data cannot be combined: --type names the type in the default body; with --data the body is yours (put the type in it)")
	}
	if fl.Changed("type") {
		if err := testrequest.CheckType(eventType); err != nil {
			return req, usagef("--type: must be an event type such as %s or order.paid (dot-separated tokens, no wildcard, no space), got %q",
				testrequest.DefaultType, eventType)
		}
		req.Type = eventType
	}
	if fl.Changed("data") {
		if !json.Valid([]byte(data)) {
			return req, usagef("--data: must be JSON, such as '{\"id\":\"evt_test\"}'; a webhook body is sent as application/json")
		}
		req.Body = []byte(data)
	}
	return req, nil
}

// askSubTest reads the subscriber (a missing one exits 1 without asking,
// as relay sub get does), then asks a running relay to make req and waits
// for its answer up to wait, or the subscriber's timeout and a margin.
func askSubTest(ctx context.Context, conn *connFlags, req testrequest.Request, wait time.Duration) (testrequest.Answer, error) {
	nc, err := conn.connect("relay sub test")
	if err != nil {
		return testrequest.Answer{}, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return testrequest.Answer{}, err
	}
	readCtx, cancel := context.WithTimeout(ctx, cmdTimeout)
	defer cancel()
	store, err := conn.openStore(readCtx, js)
	if err != nil {
		return testrequest.Answer{}, err
	}
	sub, err := store.Get(readCtx, req.Subscriber)
	if err != nil {
		return testrequest.Answer{}, notFound(err, req.Subscriber)
	}
	if wait == 0 {
		wait = sub.Timeout.Std() + subTestMargin
	}
	askCtx, cancelAsk := context.WithTimeout(ctx, wait)
	defer cancelAsk()
	ans, err := testrequest.Ask(askCtx, nc, req)
	switch {
	case errors.Is(err, testrequest.ErrNoRelay):
		return ans, fmt.Errorf("no relay is running against %s: relay sub test needs one, as a delivery would (start relay run)", maskNATS(conn.url))
	case errors.Is(err, subscribers.ErrNotFound):
		return ans, fmt.Errorf("relay %s knows no subscriber %s: it was removed just now, or that relay's view of the bucket is behind (%w)",
			ans.Relay, req.Subscriber, err)
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
		return ans, fmt.Errorf("no answer from a relay within %s: the request may still be under way (--wait waits longer)", wait)
	}
	return ans, err
}

// subTestFailure is the error a test of subscriber id that got no 2xx
// exits 1 with, nil on a 2xx.
func subTestFailure(id string, a testrequest.Answer) error {
	switch {
	case a.Accepted():
		return nil
	case a.Status != 0:
		return fmt.Errorf("subscriber %s answered %s, not 2xx", id, statusText(a.Status))
	case a.Error != "":
		return fmt.Errorf("the test request to %s failed: %s", id, oneLine(a.Error))
	}
	return fmt.Errorf("the test request to %s failed", id)
}

// statusText is "503 Service Unavailable", or the bare number for a status
// without a standard name.
func statusText(code int) string {
	if text := http.StatusText(code); text != "" {
		return fmt.Sprintf("%d %s", code, text)
	}
	return fmt.Sprint(code)
}

// printSubTest prints an answer for a person: status, time, relay,
// webhook-id, error, the reply's headers sorted, then its body.
func printSubTest(out io.Writer, a testrequest.Answer) error {
	status := "none"
	if a.Status != 0 {
		status = fmt.Sprint(a.Status)
	}
	fmt.Fprintf(out, "status: %s\n", status)
	fmt.Fprintf(out, "time: %s\n", roundTook(a.Duration))
	fmt.Fprintf(out, "relay: %s\n", cell(a.Relay, 0))
	if a.WebhookID != "" {
		fmt.Fprintf(out, "webhook-id: %s\n", a.WebhookID)
	}
	if a.Error != "" {
		fmt.Fprintf(out, "error: %s\n", cell(a.Error, 0))
	}
	if a.Status == 0 {
		return nil
	}
	fmt.Fprintln(out, "headers:")
	for _, k := range slices.Sorted(maps.Keys(a.Header)) {
		for _, v := range a.Header[k] {
			fmt.Fprintf(out, "  %s: %s\n", cell(k, 0), cell(v, 0))
		}
	}
	body, cut := wholeRunes(a.Body, a.BodyCut), ""
	if a.BodyCut {
		cut = ", cut short: the body is longer"
	}
	var err error
	switch {
	case len(body) == 0 && !a.BodyCut:
		_, err = fmt.Fprintln(out, "body: empty")
	case utf8.Valid(body) && printableText(body):
		_, err = fmt.Fprintf(out, "body (first %d bytes%s):\n%s\n", len(body), cut, body)
	default:
		_, err = fmt.Fprintf(out, "body (first %d bytes%s, not printable text, in base64):\n%s\n", len(body), cut, base64.StdEncoding.EncodeToString(body))
	}
	return err
}

// wholeRunes drops the partial UTF-8 character a cut may leave at the end
// of body, so that a text body cut inside a character still reads as text.
func wholeRunes(body []byte, cut bool) []byte {
	if !cut || utf8.Valid(body) {
		return body
	}
	for i := 1; i < utf8.UTFMax && i <= len(body); i++ {
		if utf8.Valid(body[:len(body)-i]) {
			return body[:len(body)-i]
		}
	}
	return body
}

// roundTook is a request's time as a person reads it: milliseconds, or
// finer below 10 ms.
func roundTook(d time.Duration) time.Duration {
	switch {
	case d >= 10*time.Millisecond:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(100 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}

// shownTest is relay sub test --json: the answer, its time in
// milliseconds, and the body as text when it is UTF-8, else in base64.
type shownTest struct {
	Subscriber string              `json:"subscriber"`
	Relay      string              `json:"relay"`
	WebhookID  string              `json:"webhook_id"`
	Status     int                 `json:"status"`
	Outcome    string              `json:"outcome"`
	DurationMS float64             `json:"duration_ms"`
	Error      string              `json:"error,omitempty"`
	Headers    map[string][]string `json:"headers"`
	Body       *string             `json:"body,omitempty"`
	BodyBase64 *string             `json:"body_base64,omitempty"`
	BodyCut    bool                `json:"body_cut"`
}

func shownTestOf(a testrequest.Answer) shownTest {
	s := shownTest{
		Subscriber: a.Subscriber, Relay: a.Relay, WebhookID: a.WebhookID, Status: a.Status, Outcome: a.Outcome,
		DurationMS: float64(a.Duration.Microseconds()) / 1000, Error: a.Error, Headers: a.Header, BodyCut: a.BodyCut,
	}
	if s.Headers == nil {
		s.Headers = map[string][]string{}
	}
	body := wholeRunes(a.Body, a.BodyCut)
	if utf8.Valid(body) {
		text := string(body)
		s.Body = &text
	} else {
		enc := base64.StdEncoding.EncodeToString(a.Body)
		s.BodyBase64 = &enc
	}
	return s
}
