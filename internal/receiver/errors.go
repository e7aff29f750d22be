package receiver

import (
	"errors"
	"fmt"
	"strings"

	"github.com/relay-dev/relay/internal/deliver"
)

// ErrInvalidConfig means a [Config] cannot run. The error that is it names
// the `relay listen` flag to fix and says nothing else, so the command can
// print it as its one line.
var ErrInvalidConfig = errors.New("invalid config")

// configError is a Config that cannot run, in the words the command prints,
// and the error that made it, if any.
type configError struct {
	msg string
	err error
}

func (e configError) Error() string            { return e.msg }
func (e configError) Unwrap() error            { return e.err }
func (configError) Is(target error) bool       { return target == ErrInvalidConfig }
func invalid(format string, args ...any) error { return configError{msg: fmt.Sprintf(format, args...)} }

// invalidKey is flag's secret or public key that err refused, said without
// the sentinel's words, which the flag's name already says.
func invalidKey(flag string, err error) error {
	return configError{msg: flag + ": " + strings.TrimPrefix(err.Error(), deliver.ErrInvalidSecret.Error()+": "), err: err}
}
