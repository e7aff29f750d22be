package requests

import "errors"

// ErrNotAcquired means [Gate.Acquire] returned without a request slot because
// its context ended first (the relay stopping, or the caller giving up). The
// error also wraps the context's own error, so errors.Is with
// context.Canceled or context.DeadlineExceeded tells which.
var ErrNotAcquired = errors.New("requests: no request slot acquired")
