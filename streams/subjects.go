package streams

import (
	"strconv"
	"strings"
)

// SubjectToken returns the i-th dot-separated token of subject, counted from
// zero, and whether subject has a non-empty one: the subscriber of
// deliveries.<lane>.<id>, retries.wait.<id>.<unique> or dlq.<id>.<reason>.
// A subject too short was not written by relay and is left out of every
// count.
func SubjectToken(subject string, i int) (string, bool) {
	parts := strings.SplitN(subject, ".", i+2)
	if len(parts) <= i || parts[i] == "" {
		return "", false
	}
	return parts[i], true
}

// BodySubject is the BODIES subject of the body of the event at EVENTS
// sequence seq.
func BodySubject(seq uint64) string { return "bodies." + strconv.FormatUint(seq, 10) }
