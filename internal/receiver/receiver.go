package receiver

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/relay-dev/relay/internal/deliver"
)

const (
	// rememberedIDs bounds the attempt counter's memory: a receiver left
	// running under a steady stream of events must not grow without end.
	// Ten thousand ids is far more than a person watching a terminal can
	// follow, and costs about a megabyte.
	rememberedIDs = 10_000

	// previewBytes is how much of a text body is printed; enough to
	// recognise an event, short enough to keep the terminal readable.
	previewBytes = 200

	// lineWidth is the width of a terminal the lines of a delivery fit:
	// a longer line of its body is cut.
	lineWidth = 100

	// hexBytes is how much of a binary body is printed, in hex.
	hexBytes = 32

	// maxBody bounds what one request may send. Relay's events are far
	// smaller (NATS caps a message at a few MiB); this only stops a runaway
	// client from filling memory.
	maxBody = 16 << 20

	// shutdownTimeout is how long Serve waits for requests in progress when
	// its context ends, before it closes their connections.
	shutdownTimeout = 5 * time.Second
)

// Config is how `relay listen` behaves. The zero value is valid: it prints
// every delivery to standard output, checks no signature and answers 200.
type Config struct {
	// Secrets are the subscriber's "whsec_" secrets; a delivery is accepted
	// if it is signed with any of them, as during a rotation. Empty means
	// signatures are not checked and are reported as "unchecked".
	Secrets []string
	// PublicKeys are "whpk_" ed25519 public keys (--public-key): a delivery
	// is also accepted if a v1a signature in it is valid under any of them.
	// With Secrets and PublicKeys both empty signatures are not checked.
	PublicKeys []string
	// Status, when not 0, is the answer to every correctly signed delivery
	// (--status), to show how relay treats it: 429 pauses, 410 disables,
	// other 4xx dead-letter, 5xx retry.
	Status int
	// FailRate is the chance, from 0 to 1, that a delivery is answered 500
	// (--fail-rate), to show retries and their back-off.
	FailRate float64
	// RetryAfter is the Retry-After value sent with simulated failures
	// (--retry-after): with a forced 429 or 503, and with every FailRate
	// 500. Seconds or an HTTP date. Empty sends none.
	RetryAfter string
	// Delay is how long to wait before answering (--delay), to show
	// timeouts and the in-flight cap. The wait ends early if the request is
	// cancelled or the server shuts down.
	Delay time.Duration
	// Out receives one block per delivery. Defaults to os.Stdout.
	Out io.Writer
	// Clock is the time signatures are checked against. Defaults to
	// time.Now.
	Clock func() time.Time
	// Rand returns a number in [0, 1) to decide simulated failures.
	// Defaults to math/rand/v2's Float64.
	Rand func() float64
}

// Validate says whether cfg can run, naming the flag at fault: the CLI prints
// the error as is and exits 2. Errors are [ErrInvalidConfig].
func (cfg Config) Validate() error {
	if _, err := parseKeys(cfg.Secrets); err != nil {
		return err
	}
	if _, err := parsePublicKeys(cfg.PublicKeys); err != nil {
		return err
	}
	if cfg.Status != 0 && (cfg.Status < 100 || cfg.Status > 599) {
		return invalid("--status must be 100-599, got %d", cfg.Status)
	}
	// Written so that NaN fails too.
	if !(cfg.FailRate >= 0 && cfg.FailRate <= 1) {
		return invalid("--fail-rate must be between 0 and 1, got %v", cfg.FailRate)
	}
	if cfg.RetryAfter != "" {
		if _, ok := deliver.ParseRetryAfter(cfg.RetryAfter, time.Time{}); !ok {
			return invalid("--retry-after must be seconds or an HTTP date, got %q", cfg.RetryAfter)
		}
	}
	if cfg.Delay < 0 {
		return invalid("--delay must not be negative, got %s", cfg.Delay)
	}
	return nil
}

// parseKeys returns the signing keys of secrets, naming the flag on error.
func parseKeys(secrets []string) ([][]byte, error) {
	keys := make([][]byte, 0, len(secrets))
	for _, s := range secrets {
		key, err := deliver.ParseSecret(s)
		if err != nil {
			return nil, invalidKey("--secret", err)
		}
		keys = append(keys, key)
	}
	return keys, nil
}

// parsePublicKeys returns the ed25519 keys of public keys, naming the flag
// on error.
func parsePublicKeys(keys []string) ([]ed25519.PublicKey, error) {
	out := make([]ed25519.PublicKey, 0, len(keys))
	for _, k := range keys {
		key, err := deliver.ParsePublicKey(k)
		if err != nil {
			return nil, invalidKey("--public-key", err)
		}
		out = append(out, key)
	}
	return out, nil
}

// handler is the http.Handler NewHandler returns.
type handler struct {
	cfg  Config
	keys [][]byte
	pubs []ed25519.PublicKey

	// mu serialises writes to cfg.Out, so that blocks from concurrent
	// deliveries never interleave, and guards seen. Counting and printing
	// under one lock keeps the printed attempt numbers in order.
	mu   sync.Mutex
	seen *attempts
}

// NewHandler returns the receiver as an http.Handler, after validating cfg
// and filling in its defaults. Mount it anywhere; Serve runs it on its own.
func NewHandler(cfg Config) (http.Handler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	keys, err := parseKeys(cfg.Secrets)
	if err != nil {
		return nil, err
	}
	pubs, err := parsePublicKeys(cfg.PublicKeys)
	if err != nil {
		return nil, err
	}
	if cfg.Out == nil {
		cfg.Out = os.Stdout
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.Float64
	}
	return &handler{cfg: cfg, keys: keys, pubs: pubs, seen: newAttempts(rememberedIDs)}, nil
}

// ServeHTTP prints a delivery and answers it as the config says.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "relay listen: webhooks are POSTed here", http.StatusMethodNotAllowed)
		return
	}
	id := r.Header.Get("Webhook-Id")
	body, readErr := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))

	status, retryAfter, message := http.StatusOK, "", ""
	signature := "unchecked"
	switch {
	case readErr != nil:
		status, message = http.StatusBadRequest, "relay listen: cannot read the body: "+readErr.Error()
		if _, ok := errors.AsType[*http.MaxBytesError](readErr); ok {
			status = http.StatusRequestEntityTooLarge
		}
	case len(h.keys) > 0 || len(h.pubs) > 0:
		if err := h.verify(id, r.Header, body); err != nil {
			signature = "bad (" + verifyReason(err) + ")"
			status, message = http.StatusUnauthorized, "relay listen: "+err.Error()
			break
		}
		signature = "ok"
	}
	if status == http.StatusOK {
		switch {
		case h.cfg.Status != 0:
			status = h.cfg.Status
			if status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable {
				retryAfter = h.cfg.RetryAfter
			}
		case h.cfg.FailRate > 0 && h.cfg.Rand() < h.cfg.FailRate:
			status, retryAfter, message = http.StatusInternalServerError, h.cfg.RetryAfter, "relay listen: simulated failure"
		}
	}

	h.print(r, id, body, readErr, signature, status)

	if h.cfg.Delay > 0 {
		timer := time.NewTimer(h.cfg.Delay)
		select {
		case <-timer.C:
		case <-r.Context().Done():
			timer.Stop()
			// The client has gone or the receiver is shutting down. An
			// answer, if anyone still reads it, must not claim success.
			http.Error(w, "relay listen: shutting down", http.StatusServiceUnavailable)
			return
		}
	}
	if retryAfter != "" {
		w.Header().Set("Retry-After", retryAfter)
	}
	if message != "" {
		http.Error(w, message, status)
		return
	}
	w.WriteHeader(status)
}

// print writes one block for a delivery, each line within [lineWidth]
// columns for a webhook-id of ordinary length: a summary line (the time of
// day, the request, its id, signature check and answer), a line of its
// attempt, size, content type and the event id as published when relay sent
// one (relay-event-id, where the webhook-id had to escape it; on a line of
// its own when the line would not fit), then the body preview indented
// under them.
func (h *handler) print(r *http.Request, id string, body []byte, readErr error, signature string, status int) {
	var b bytes.Buffer
	h.mu.Lock()
	defer h.mu.Unlock()

	attempt := "-"
	shownID := "(none)"
	if id != "" {
		attempt = strconv.Itoa(h.seen.add(id))
		shownID = printable(id)
	}
	contentType := r.Header.Get("Content-Type")
	if contentType == "" {
		contentType = "(none)"
	}
	fmt.Fprintf(&b, "%s %s %s  webhook-id: %s  signature: %s  reply: %d",
		h.cfg.Clock().Format(time.TimeOnly), r.Method, printable(r.URL.RequestURI()), shownID, signature, status)
	if h.cfg.Delay > 0 {
		fmt.Fprintf(&b, " after %s", h.cfg.Delay)
	}
	second := fmt.Sprintf("  attempt: %s  size: %d B  content-type: %s", attempt, len(body), printable(contentType))
	if eventID := r.Header.Get("Relay-Event-Id"); eventID != "" {
		more := "  relay-event-id: " + printable(eventID)
		if utf8.RuneCountInString(second+more) > lineWidth {
			more = "\n" + more
		}
		second += more
	}
	b.WriteString("\n" + second + "\n")
	if readErr != nil {
		fmt.Fprintf(&b, "  (body unreadable: %s)\n", printable(readErr.Error()))
	} else {
		writePreview(&b, body)
	}
	_, _ = h.cfg.Out.Write(b.Bytes())
}

// writePreview writes the start of body, indented: text if it is valid
// UTF-8, each line cut to fit [lineWidth], else its size and the hex of its
// first bytes.
func writePreview(b *bytes.Buffer, body []byte) {
	switch {
	case len(body) == 0:
		b.WriteString("  (empty)\n")
	case utf8.Valid(body):
		text, cut := body, false
		if len(text) > previewBytes {
			// Cut at a rune boundary at or before previewBytes.
			end := previewBytes
			for end > 0 && !utf8.RuneStart(text[end]) {
				end--
			}
			text, cut = text[:end], true
		}
		lines := strings.Split(strings.TrimRight(string(text), "\n"), "\n")
		for i, line := range lines {
			line = printable(line)
			lineCut := cut && i == len(lines)-1
			if r := []rune(line); len(r) > lineWidth-2 {
				line, lineCut = string(r[:lineWidth-3]), true
			}
			b.WriteString("  ")
			b.WriteString(line)
			if lineCut {
				b.WriteString("…")
			}
			b.WriteByte('\n')
		}
	default:
		fmt.Fprintf(b, "  (binary, %d bytes) %s\n", len(body), hex.EncodeToString(body[:min(len(body), hexBytes)]))
	}
}

// printable escapes control and other non-printing characters, so that a
// delivery cannot move the cursor, change colours or fake lines in the
// terminal it is printed to. Tabs are kept.
func printable(s string) string {
	clean := true
	for _, r := range s {
		if r != '\t' && !unicode.IsPrint(r) && r != ' ' {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if r == '\t' || r == ' ' || unicode.IsPrint(r) {
			b.WriteRune(r)
			continue
		}
		q := strconv.QuoteRuneToASCII(r)
		b.WriteString(q[1 : len(q)-1])
	}
	return b.String()
}

// verify checks a delivery's signature with the secrets (v1) and the public
// keys (v1a) configured: one valid signature of either kind is enough. The
// error is the v1a one when only public keys are configured, else the v1 one.
func (h *handler) verify(id string, header http.Header, body []byte) error {
	ts, sig, now := header.Get("Webhook-Timestamp"), header.Get("Webhook-Signature"), h.cfg.Clock()
	var err error
	if len(h.keys) > 0 {
		if err = deliver.Verify(h.keys, id, ts, sig, body, now, 0); err == nil {
			return nil
		}
	}
	if len(h.pubs) > 0 {
		errV1a := deliver.VerifyV1a(h.pubs, id, ts, sig, body, now, 0)
		if errV1a == nil || err == nil {
			return errV1a
		}
	}
	return err
}

// verifyReason is a short reason for a failed verification, for the summary
// line; the full error goes in the 401's body.
func verifyReason(err error) string {
	switch {
	case errors.Is(err, deliver.ErrMissingHeaders):
		return "missing headers"
	case errors.Is(err, deliver.ErrStaleTimestamp):
		return "stale timestamp"
	}
	return "no match"
}

// attempts counts how often each webhook-id has been seen, remembering at
// most limit ids; the oldest is forgotten first.
type attempts struct {
	counts map[string]int
	order  []string // ring of remembered ids, oldest at next once full
	next   int
	limit  int
}

func newAttempts(limit int) *attempts {
	return &attempts{counts: make(map[string]int), limit: max(1, limit)}
}

// add records one more arrival of id and returns how many there have been.
func (a *attempts) add(id string) int {
	if n, ok := a.counts[id]; ok {
		a.counts[id] = n + 1
		return n + 1
	}
	if len(a.order) < a.limit {
		a.order = append(a.order, id)
	} else {
		delete(a.counts, a.order[a.next])
		a.order[a.next] = id
		a.next = (a.next + 1) % a.limit
	}
	a.counts[id] = 1
	return 1
}

// Serve runs h on addr until ctx ends, then shuts down gracefully and returns
// nil. ready, if not nil, is called with the bound address once the listener
// is open, so that a caller can listen on port 0 and learn the port, and so
// that "listening on …" is printed only when it is true. Requests still in
// progress at shutdown see their context cancelled, so a --delay does not
// hold the shutdown up.
func Serve(ctx context.Context, addr string, h http.Handler, ready func(net.Addr)) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	if ready != nil {
		ready(ln.Addr())
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	select {
	case err := <-served:
		return fmt.Errorf("serve on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	err = srv.Shutdown(shutdownCtx)
	if err != nil {
		_ = srv.Close()
	}
	<-served
	if err != nil {
		return fmt.Errorf("shut down: %w", err)
	}
	return nil
}
