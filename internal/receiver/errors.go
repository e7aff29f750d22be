package receiver

import "errors"

// ErrInvalidConfig means a [Config] cannot run; the wrapping error names the
// `relay listen` flag to fix, so the command can print it as its one line.
var ErrInvalidConfig = errors.New("receiver: invalid config")
