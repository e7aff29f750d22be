package tracing

import "errors"

// ErrConfig is wrapped by [FromEnv]'s errors about an OTEL_* variable that
// relay cannot honour (an exporter or protocol other than OTLP/HTTP, a
// sampler the SDK does not know, an unreadable certificate): the operator
// fixes the environment, so relay run exits 2 rather than run without the
// traces asked for.
var ErrConfig = errors.New("tracing: invalid OTEL_* setting")
