package deliver

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// epochThreshold tells the two forms of a rate-limit reset apart: GitHub
// and others send X-RateLimit-Reset as unix seconds, the IETF draft's
// RateLimit-Reset is delta seconds. No sensible delta is above a billion
// seconds (31 years), and no epoch in use is below it (2001), so a value
// at or above it is an epoch.
const epochThreshold = 1_000_000_000

// ParseRateLimitReset reads the quota headers a response may carry
// (RateLimit-Remaining / RateLimit-Reset, or their X- forms) and reports how
// long until the quota resets when the remaining quota is zero; the second
// result is false when the quota is not exhausted or the reset is missing or
// unreadable.
func ParseRateLimitReset(h http.Header, now time.Time) (time.Duration, bool) {
	// Canonical names, looked up as they are: this runs on every response.
	for _, name := range quotaHeaders {
		remaining := strings.TrimSpace(headerValue(h, name.remaining))
		if remaining == "" {
			continue
		}
		if n, err := strconv.ParseInt(remaining, 10, 64); err != nil || n > 0 {
			return 0, false
		}
		return parseReset(headerValue(h, name.reset), now)
	}
	return 0, false
}

// quotaHeaders are the names of the quota headers in their canonical form,
// as net/http and the HTTP/1 client store them: the IETF draft's first.
var quotaHeaders = [...]struct{ remaining, reset string }{
	{"Ratelimit-Remaining", "Ratelimit-Reset"},
	{"X-Ratelimit-Remaining", "X-Ratelimit-Reset"},
}

// headerValue is h.Get(name) for a name already canonical.
func headerValue(h http.Header, name string) string {
	if v := h[name]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func parseReset(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if !isDecimal(v) || strings.HasPrefix(v, "-") {
		return 0, false
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n > maxRetryAfterSeconds {
		return 0, false
	}
	if n >= epochThreshold {
		return max(0, time.Unix(n, 0).Sub(now)), true
	}
	return time.Duration(n) * time.Second, true
}
