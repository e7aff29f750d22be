package subscribers

import (
	"encoding/json"
	"fmt"
	"time"
)

// Duration is a time.Duration that reads and writes JSON as a Go duration
// string ("10s"), so that a subscriber read with `nats kv get` is legible and
// one written by hand needs no arithmetic in nanoseconds. For the same
// reason it also reads a JSON number, taken as nanoseconds, which is how
// encoding/json writes a plain time.Duration.
type Duration time.Duration

// Std returns d as a time.Duration, for passing to the time package.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// String formats d as time.Duration does ("1m30s").
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalJSON writes d as a JSON string in Go duration syntax.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON reads a Go duration string ("10s", "1h30m") or a number of
// nanoseconds. A JSON null leaves d unchanged.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	switch v := v.(type) {
	case nil:
		// JSON null leaves d unchanged, as encoding/json does for its own
		// types; SetDefaults then fills it in.
	case string:
		parsed, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("duration %q: want a Go duration such as \"10s\": %w", v, err)
		}
		*d = Duration(parsed)
	case float64:
		var ns int64
		if err := json.Unmarshal(b, &ns); err != nil {
			return fmt.Errorf("duration %s: want a whole number of nanoseconds: %w", b, err)
		}
		*d = Duration(ns)
	default:
		return fmt.Errorf("duration %s: want a string such as \"10s\" or a number of nanoseconds", b)
	}
	return nil
}
