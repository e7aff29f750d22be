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
	for _, prefix := range []string{"RateLimit-", "X-RateLimit-"} {
		remaining := strings.TrimSpace(h.Get(prefix + "Remaining"))
		if remaining == "" {
			continue
		}
		if n, err := strconv.ParseInt(remaining, 10, 64); err != nil || n > 0 {
			return 0, false
		}
		return parseReset(h.Get(prefix+"Reset"), now)
	}
	return 0, false
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
