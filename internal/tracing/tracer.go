package tracing

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// ServiceName is the service.name of relay's spans unless OTEL_SERVICE_NAME
// (or service.name in OTEL_RESOURCE_ATTRIBUTES) says otherwise.
const ServiceName = "relay"

// scopeName names the instrumentation that makes relay's spans.
const scopeName = "github.com/relay-dev/relay"

// defaultTimeout bounds one export when OTEL_EXPORTER_OTLP_TIMEOUT is not
// set, as the specification's default.
const defaultTimeout = 10 * time.Second

// The variables relay reads itself; the SDK and the exporter read the
// others (the endpoint's path, headers, compression, OTEL_BSP_*,
// OTEL_TRACES_SAMPLER_ARG, OTEL_RESOURCE_ATTRIBUTES…).
const (
	envDisabled       = "OTEL_SDK_DISABLED"
	envExporter       = "OTEL_TRACES_EXPORTER"
	envEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	envTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	envSampler        = "OTEL_TRACES_SAMPLER"
)

// Tracer makes relay's spans and exports them over OTLP/HTTP. A nil
// *Tracer is tracing off: every method returns at once.
type Tracer struct {
	provider *sdktrace.TracerProvider
	tracer   trace.Tracer
	// transport is the exporter's own, so that Shutdown can close its
	// idle connections: no goroutine of it outlives the tracer.
	transport *http.Transport
}

// FromEnv builds the tracer the standard OTEL_* variables ask for, or nil
// when they ask for none. Spans are exported when
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT is set,
// or OTEL_TRACES_EXPORTER is otlp (then to the default
// http://localhost:4318); never when OTEL_SDK_DISABLED is true or
// OTEL_TRACES_EXPORTER is none. A setting relay cannot honour is an error
// wrapping [ErrConfig].
//
// The exporter speaks OTLP/HTTP (protobuf, or JSON with
// OTEL_EXPORTER_OTLP_PROTOCOL=http/json) and honours the exporter's
// variables (headers, compression, timeout, certificates, the per-signal
// TRACES_ forms); the SDK honours OTEL_TRACES_SAMPLER (default
// parentbased_always_on: an event's sampled flag decides), OTEL_BSP_* and
// OTEL_RESOURCE_ATTRIBUTES; service.name is [ServiceName] unless
// OTEL_SERVICE_NAME says otherwise. Errors of the exporter (a collector
// that is down) are logged to log as warnings, through OpenTelemetry's
// process-wide error handler, which FromEnv sets.
//
// The caller must call [Tracer.Shutdown] when done.
func FromEnv(ctx context.Context, log *slog.Logger, version string) (*Tracer, error) {
	if log == nil {
		log = slog.Default()
	}
	getenv := func(k string) string { return strings.TrimSpace(os.Getenv(k)) }
	if strings.EqualFold(getenv(envDisabled), "true") {
		return nil, nil
	}
	exporter := strings.ToLower(getenv(envExporter))
	switch exporter {
	case "none":
		return nil, nil
	case "", "otlp":
	default:
		return nil, fmt.Errorf("%w: %s=%s: relay exports traces over OTLP alone (otlp or none)", ErrConfig, envExporter, exporter)
	}
	endpoint := cmp.Or(getenv(envTracesEndpoint), getenv(envEndpoint))
	if endpoint == "" && exporter == "" {
		return nil, nil
	}
	if err := checkEnv(getenv, endpoint); err != nil {
		return nil, err
	}
	client, transport, err := exporterClient(getenv)
	if err != nil {
		return nil, err
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithHTTPClient(client))
	if err != nil {
		transport.CloseIdleConnections()
		return nil, fmt.Errorf("%w: the OTLP exporter: %w", ErrConfig, err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", ServiceName), attribute.String("service.version", version)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(), // last: OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
	)
	if err != nil {
		// A partial resource (an unreadable OTEL_RESOURCE_ATTRIBUTES) is
		// still the best there is.
		log.Warn("tracing: reading the resource attributes", "err", err)
	}
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("tracing: exporting spans", "err", err)
	}))
	provider := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	log.Info("tracing: exporting spans over OTLP/HTTP", "endpoint", redactEndpoint(cmp.Or(endpoint, "http://localhost:4318")))
	return &Tracer{
		provider:  provider,
		tracer:    provider.Tracer(scopeName, trace.WithInstrumentationVersion(version)),
		transport: transport,
	}, nil
}

// Shutdown exports the spans still queued, stops the exporter and closes
// its connections, within ctx. Nil-safe.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	err := t.provider.Shutdown(ctx)
	t.transport.CloseIdleConnections()
	return err
}

// redactEndpoint is an endpoint safe to print: without a password, and
// with its query string (which may carry an API key) elided.
func redactEndpoint(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "an endpoint that does not parse"
	}
	if u.RawQuery != "" {
		u.RawQuery = "…"
	}
	return u.Redacted()
}

// checkEnv refuses the settings the exporter would only complain of later,
// or ignore: a protocol other than OTLP/HTTP, an endpoint that is not an
// http or https URL, a sampler the SDK does not know.
func checkEnv(getenv func(string) string, endpoint string) error {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		switch v := getenv(k); v {
		case "", "http/protobuf", "http/json":
		default:
			return fmt.Errorf("%w: %s=%s: relay exports over OTLP/HTTP (http/protobuf or http/json)", ErrConfig, k, v)
		}
	}
	if endpoint != "" {
		u, err := url.Parse(endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("%w: OTLP endpoint %q: must be an http or https URL", ErrConfig, redactEndpoint(endpoint))
		}
	}
	switch v := strings.ToLower(getenv(envSampler)); v {
	case "", "always_on", "always_off", "traceidratio", "parentbased_always_on", "parentbased_always_off", "parentbased_traceidratio":
	default:
		return fmt.Errorf("%w: %s=%s: not a sampler the OpenTelemetry Go SDK knows", ErrConfig, envSampler, v)
	}
	return nil
}

// exporterClient is the exporter's HTTP client, with a transport of its own
// (see Tracer.transport). Handing the exporter a client makes it skip the
// certificate and timeout variables, which are therefore read here, with
// the same precedence: the TRACES_ form over the general one.
func exporterClient(getenv func(string) string) (*http.Client, *http.Transport, error) {
	env := func(name string) (string, string) {
		if v := getenv("OTEL_EXPORTER_OTLP_TRACES_" + name); v != "" {
			return "OTEL_EXPORTER_OTLP_TRACES_" + name, v
		}
		return "OTEL_EXPORTER_OTLP_" + name, getenv("OTEL_EXPORTER_OTLP_" + name)
	}
	timeout := defaultTimeout
	if k, v := env("TIMEOUT"); v != "" {
		ms, err := strconv.Atoi(v)
		if err != nil || ms <= 0 {
			return nil, nil, fmt.Errorf("%w: %s=%s: must be a number of milliseconds above 0", ErrConfig, k, v)
		}
		timeout = time.Duration(ms) * time.Millisecond
	}
	var tlsCfg *tls.Config
	if k, v := env("CERTIFICATE"); v != "" {
		pem, err := os.ReadFile(v)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %s: %w", ErrConfig, k, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, nil, fmt.Errorf("%w: %s=%s: no PEM certificate in it", ErrConfig, k, v)
		}
		tlsCfg = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	kc, cert := env("CLIENT_CERTIFICATE")
	kk, key := env("CLIENT_KEY")
	if cert != "" || key != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %s and %s: %w", ErrConfig, kc, kk, err)
		}
		if tlsCfg == nil {
			tlsCfg = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		tlsCfg.Certificates = []tls.Certificate{pair}
	}
	// As net/http's default transport (the exporter's own default is a
	// copy of it), proxy variables included.
	transport := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          10,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		TLSClientConfig:       tlsCfg,
	}
	return &http.Client{Transport: transport, Timeout: timeout}, transport, nil
}
