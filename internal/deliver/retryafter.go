package deliver

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// maxRetryAfterSeconds keeps a parsed delay within a time.Duration. Callers
// bound pauses far lower (--max-pause); this only keeps the arithmetic sane.
const maxRetryAfterSeconds = math.MaxInt64 / int64(time.Second)

// ParseRetryAfter reads a Retry-After header value, which RFC 9110 allows as
// delta seconds ("120") or as an HTTP date, and returns how long from now the
// sender asked to wait. A negative number or a date in the past means "now"
// and gives 0; the second result is false when the value is neither form, so
// that a malformed header is not mistaken for "retry at once".
func ParseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if isDecimal(v) {
		n, err := strconv.ParseInt(v, 10, 64)
		switch {
		case err != nil || n > maxRetryAfterSeconds:
			// Only a range error is possible for decimal digits.
			n = maxRetryAfterSeconds
			if v[0] == '-' {
				n = 0
			}
		case n < 0:
			n = 0
		}
		return time.Duration(n) * time.Second, true
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	d := at.Sub(now)
	if d < 0 {
		d = 0
	}
	return d, true
}

// isDecimal says whether v is an optionally negative run of ASCII digits;
// strconv alone would also accept a leading "+".
func isDecimal(v string) bool {
	v = strings.TrimPrefix(v, "-")
	if v == "" {
		return false
	}
	for i := range len(v) {
		if v[i] < '0' || v[i] > '9' {
			return false
		}
	}
	return true
}
