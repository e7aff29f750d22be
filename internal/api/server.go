package api

import (
	"context"
	_ "embed"
	"errors"
	"log/slog"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/relay-dev/relay/internal/apikeys"
)

// OpenAPI is the OpenAPI 3.1 document of the HTTP API, served at
// GET /v1/openapi.json.
//
//go:embed openapi.json
var OpenAPI []byte

// Config is what [New] needs.
type Config struct {
	// Ops are the operations. Required.
	Ops *Ops
	// Keys checks the bearer keys. Required.
	Keys *apikeys.Verifier
	// Registerer takes the API's metrics. Nil: none registered.
	Registerer prometheus.Registerer
	// Logger takes the access log. Defaults to discarding.
	Logger *slog.Logger
	// MaxConcurrent bounds the requests served at once. Defaults to
	// [DefaultMaxConcurrent].
	MaxConcurrent int
	// KeyRate and KeyBurst bound each key's requests a second. Default to
	// [DefaultKeyRate] and [DefaultKeyBurst].
	KeyRate  float64
	KeyBurst int
	// RequestTimeout bounds reading a request and writing its answer.
	// Defaults to [DefaultRequestTimeout].
	RequestTimeout time.Duration
}

// Server is the HTTP API.
type Server struct {
	cfg      Config
	mux      *http.ServeMux
	slots    chan struct{}
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec

	mu    sync.Mutex
	rates map[string]*rate.Limiter
}

// New returns the HTTP API of cfg.
func New(cfg Config) (*Server, error) {
	if cfg.Ops == nil || cfg.Keys == nil {
		return nil, errors.New("api: New needs Ops and Keys")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxConcurrent <= 0 {
		cfg.MaxConcurrent = DefaultMaxConcurrent
	}
	if cfg.KeyRate <= 0 {
		cfg.KeyRate = DefaultKeyRate
	}
	if cfg.KeyBurst <= 0 {
		cfg.KeyBurst = DefaultKeyBurst
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	s := &Server{
		cfg:   cfg,
		mux:   http.NewServeMux(),
		slots: make(chan struct{}, cfg.MaxConcurrent),
		rates: map[string]*rate.Limiter{},
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "relay_api_requests_total",
			Help: "HTTP API requests answered, by route (its pattern) and status code."}, []string{"route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "relay_api_request_duration_seconds",
			Help: "How long the HTTP API took to answer a request, by route.", Buckets: prometheus.DefBuckets}, []string{"route"}),
	}
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{s.requests, s.duration} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, err
			}
		}
	}
	s.route("POST /v1/events/{type}", apikeys.Publish, s.publish)
	s.route("GET /v1/events/{id}/trace", apikeys.EventsRead, s.trace)
	s.route("GET /v1/status", apikeys.StatusRead, s.status)
	s.route("GET /v1/subscribers", apikeys.SubscribersRead, s.subscribers)
	s.route("GET /v1/subscribers/{id}", apikeys.SubscribersRead, s.subscriber)
	s.route("GET /v1/dlq", apikeys.DLQRead, s.deadLetters)
	s.route("GET /v1/dlq/{seq}", apikeys.DLQRead, s.deadLetter)
	s.routeWrites()
	s.route("GET /v1/openapi.json", "", func(w http.ResponseWriter, _ *http.Request, _ apikeys.Key) (int, any, error) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(OpenAPI)
		return http.StatusOK, nil, nil
	})
	s.route("/", "", func(http.ResponseWriter, *http.Request, apikeys.Key) (int, any, error) {
		return 0, nil, &notFoundError{}
	})
	return s, nil
}

// notFoundError answers a path no route has.
type notFoundError struct{}

func (*notFoundError) Error() string { return "no such route; GET /v1/openapi.json lists them" }

// handler is a route's translation: it answers code with v (nil: it wrote
// the answer itself), or fails with err.
type handler func(w http.ResponseWriter, r *http.Request, key apikeys.Key) (code int, v any, err error)

// ServeHTTP serves the API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Serve serves the API on ln, over TLS when certFile is given, until ctx is
// done; then it stops taking requests and waits for those in flight, up to
// 5 s.
func (s *Server) Serve(ctx context.Context, ln net.Listener, certFile, keyFile string) error {
	srv := &http.Server{Handler: s, ReadHeaderTimeout: readHeaderTimeout, IdleTimeout: 2 * time.Minute,
		BaseContext: func(net.Listener) context.Context { return context.WithoutCancel(ctx) }}
	errc := make(chan error, 1)
	go func() {
		if certFile != "" {
			errc <- srv.ServeTLS(ln, certFile, keyFile)
			return
		}
		errc <- srv.Serve(ln)
	}()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(stopCtx)
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// route serves pattern: a free slot, the key and its scope when scope is
// given, its rate, then h; every answer counted, timed and logged.
func (s *Server) route(pattern string, scope apikeys.Scope, h handler) {
	label := pattern
	if pattern == "/" {
		label = "unmatched"
	}
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		// Per request: a slow client holds its slot no longer than this.
		// Not supported by a writer without a connection (a test's
		// recorder), where there is nothing to hold.
		rc := http.NewResponseController(w)
		_ = rc.SetReadDeadline(start.Add(s.cfg.RequestTimeout))
		_ = rc.SetWriteDeadline(start.Add(s.cfg.RequestTimeout))
		rec := &recorder{ResponseWriter: w}
		keyName := s.serve(rec, r, scope, h)
		took := time.Since(start)
		code := rec.code
		if code == 0 {
			code = http.StatusOK
		}
		s.requests.WithLabelValues(label, strconv.Itoa(code)).Inc()
		s.duration.WithLabelValues(label).Observe(took.Seconds())
		s.cfg.Logger.Info("api request", "method", r.Method, "route", label, "path", r.URL.Path, "code", code,
			"key", keyName, "remote", r.RemoteAddr, "took", took)
	})
}

// serve answers r, and returns the name of its key ("" when none).
func (s *Server) serve(w http.ResponseWriter, r *http.Request, scope apikeys.Scope, h handler) string {
	select {
	case s.slots <- struct{}{}:
		defer func() { <-s.slots }()
	default:
		w.Header().Set("Retry-After", "1")
		writeProblem(w, http.StatusServiceUnavailable, "relay is serving as many requests as it may; ask again in a second")
		return ""
	}
	var key apikeys.Key
	if scope != "" {
		given, ok := bearer(r)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="relay"`)
			writeProblem(w, http.StatusUnauthorized, "an API key is needed: Authorization: Bearer rk_… (relay key add)")
			return ""
		}
		var err error
		if key, err = s.cfg.Keys.Verify(given); err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="relay", error="invalid_token"`)
			writeProblem(w, http.StatusUnauthorized, "unknown API key")
			return ""
		}
		if !apikeys.Allows(key.Scopes, scope) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="relay", error="insufficient_scope", scope="`+string(scope)+`"`)
			writeProblem(w, http.StatusForbidden, "key "+key.Name+" lacks the scope "+string(scope))
			return key.Name
		}
		if wait, ok := s.take(key.Name); !ok {
			w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
			writeProblem(w, http.StatusTooManyRequests, "key "+key.Name+" is over its request rate; ask again after Retry-After")
			return key.Name
		}
	}
	if r.Body != nil && scope != apikeys.Publish {
		r.Body = http.MaxBytesReader(w, r.Body, MaxBody)
	}
	ctx, cancel := context.WithTimeout(r.Context(), opTimeout)
	defer cancel()
	code, v, err := h(w, r.WithContext(ctx), key)
	if err != nil {
		code := Status(err)
		var nf *notFoundError
		if errors.As(err, &nf) {
			code = http.StatusNotFound
		}
		if code >= 500 {
			s.cfg.Logger.Error("api: request failed", "route", r.Pattern, "key", key.Name, "err", err)
		}
		writeProblem(w, code, detail(err, code))
		return key.Name
	}
	if v != nil {
		writeJSON(w, code, v)
	}
	return key.Name
}

// take takes one request of key's rate, or says how long until one is
// free.
func (s *Server) take(name string) (time.Duration, bool) {
	s.mu.Lock()
	lim, ok := s.rates[name]
	if !ok {
		lim = rate.NewLimiter(rate.Limit(s.cfg.KeyRate), s.cfg.KeyBurst)
		s.rates[name] = lim
	}
	s.mu.Unlock()
	res := lim.Reserve()
	if d := res.Delay(); d > 0 {
		res.Cancel()
		return max(d, time.Second), false
	}
	return 0, true
}

// bearer is the key of r's Authorization header.
func bearer(r *http.Request) (string, bool) {
	scheme, key, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	key = strings.TrimSpace(key)
	return key, key != ""
}

// recorder keeps the status code an answer was written with.
type recorder struct {
	http.ResponseWriter
	code int
}

func (r *recorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (s *Server) publish(_ http.ResponseWriter, r *http.Request, _ apikeys.Key) (int, any, error) {
	eventType := r.PathValue("type")
	if err := CheckEventType(eventType); err != nil {
		return 0, nil, err
	}
	limit, err := s.cfg.Ops.MaxEventBody(r.Context())
	if err != nil {
		return 0, nil, err
	}
	if r.ContentLength > limit {
		return 0, nil, tooLarge(limit)
	}
	body, err := readAll(http.MaxBytesReader(nil, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return 0, nil, tooLarge(limit)
		}
		return 0, nil, invalid("reading the body: " + err.Error())
	}
	p, err := s.cfg.Ops.Publish(r.Context(), Event{Type: eventType, Body: body, ID: r.Header.Get("Idempotency-Key"), Header: r.Header})
	if err != nil {
		return 0, nil, err
	}
	return http.StatusAccepted, p, nil
}

func tooLarge(limit int64) error {
	return &tooLargeError{msg: "the body is larger than EVENTS' max message size, " + strconv.FormatInt(limit, 10) + " bytes"}
}

func (s *Server) trace(_ http.ResponseWriter, r *http.Request, _ apikeys.Key) (int, any, error) {
	filtered, err := boolParam(r, "filtered")
	if err != nil {
		return 0, nil, err
	}
	t, err := s.cfg.Ops.Trace(r.Context(), r.PathValue("id"), filtered)
	return http.StatusOK, t, err
}

func (s *Server) status(_ http.ResponseWriter, r *http.Request, _ apikeys.Key) (int, any, error) {
	rows, err := s.cfg.Ops.Status(r.Context())
	return http.StatusOK, rows, err
}

func (s *Server) subscriber(_ http.ResponseWriter, r *http.Request, _ apikeys.Key) (int, any, error) {
	sub, err := s.cfg.Ops.Subscriber(r.Context(), r.PathValue("id"))
	return http.StatusOK, sub, err
}

// NextCursorHeader carries the cursor of a list's next page; absent on
// the last page.
const NextCursorHeader = "Relay-Next-Cursor"

func (s *Server) subscribers(w http.ResponseWriter, r *http.Request, _ apikeys.Key) (int, any, error) {
	limit, err := intParam(r, "limit")
	if err != nil {
		return 0, nil, err
	}
	subs, next, err := s.cfg.Ops.Subscribers(r.Context(), r.URL.Query().Get("cursor"), r.URL.Query().Get("owner"), limit)
	if err != nil {
		return 0, nil, err
	}
	if next != "" {
		w.Header().Set(NextCursorHeader, next)
	}
	return http.StatusOK, subs, nil
}

func (s *Server) deadLetters(w http.ResponseWriter, r *http.Request, _ apikeys.Key) (int, any, error) {
	limit, err := intParam(r, "limit")
	if err != nil {
		return 0, nil, err
	}
	var after uint64
	if c := r.URL.Query().Get("cursor"); c != "" {
		if after, err = strconv.ParseUint(c, 10, 64); err != nil {
			return 0, nil, invalid("cursor: not a DLQ sequence")
		}
	}
	entries, next, err := s.cfg.Ops.DeadLetters(r.Context(), filterParams(r), after, limit)
	if err != nil {
		return 0, nil, err
	}
	if next != 0 {
		w.Header().Set(NextCursorHeader, strconv.FormatUint(next, 10))
	}
	return http.StatusOK, entries, nil
}

func (s *Server) deadLetter(_ http.ResponseWriter, r *http.Request, _ apikeys.Key) (int, any, error) {
	seq, err := strconv.ParseUint(r.PathValue("seq"), 10, 64)
	if err != nil {
		return 0, nil, invalid("a DLQ sequence is a whole number from 1 (relay dlq ls shows them), got " + strconv.Quote(r.PathValue("seq")))
	}
	m, err := s.cfg.Ops.DeadLetter(r.Context(), seq)
	return http.StatusOK, m, err
}

// intParam reads an optional whole-number query parameter (0 when absent).
func intParam(r *http.Request, name string) (int, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, invalid(name + ": not a whole number: " + strconv.Quote(v))
	}
	return n, nil
}

// boolParam reads an optional true|false query parameter.
func boolParam(r *http.Request, name string) (bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, invalid(name + ": true or false, got " + strconv.Quote(v))
	}
	return b, nil
}
