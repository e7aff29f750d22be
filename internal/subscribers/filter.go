package subscribers

import (
	"fmt"
	"strings"

	"github.com/relay-dev/relay/internal/opevent"
)

// Wildcards of NATS subjects, which event filters share: [singleWildcard]
// matches exactly one token, [fullWildcard] one or more trailing tokens.
const (
	singleWildcard = "*"
	fullWildcard   = ">"
)

// MaxFilterLen is the longest event type or filter: far more than a type
// needs, and far less than the 4,096 bytes of a NATS control line, which a
// subject past it would break (the server closes the connection that sent
// it, and nats.go does not reconnect).
const MaxFilterLen = 255

// ValidateFilter reports whether f is a valid event filter: a NATS subject
// pattern over the event type (the subject after "events."), such as
// "video.*", "order.shipped" or "video.>". Tokens are separated by dots and
// must not be empty, "*" and ">" must be whole tokens, ">" may only be the
// last token, and no whitespace is allowed. The error is a
// [*ValidationError] for --events, wrapping [ErrInvalid].
func ValidateFilter(f string) error {
	if len(f) > MaxFilterLen {
		return invalid("--events", fmt.Sprintf("a filter must be at most %d bytes, got %d", MaxFilterLen, len(f)))
	}
	if f == "" {
		return invalid("--events", "a filter must not be empty (give event types or patterns separated by commas, such as video.*,order.shipped)")
	}
	if strings.ContainsFunc(f, isSpaceOrControl) {
		return invalid("--events", fmt.Sprintf("a filter must not contain spaces or control characters, got %q", f))
	}
	toks := strings.Split(f, ".")
	for i, tok := range toks {
		switch {
		case tok == "":
			return invalid("--events", fmt.Sprintf("a filter must not have empty tokens (a leading, trailing or doubled dot), got %q", f))
		case tok != singleWildcard && tok != fullWildcard && strings.ContainsAny(tok, "*>"):
			return invalid("--events", fmt.Sprintf("* and > must be whole tokens between dots, got %q", f))
		case tok == fullWildcard && i != len(toks)-1:
			return invalid("--events", fmt.Sprintf("> must be the last token, got %q", f))
		}
	}
	return nil
}

// ValidateReservedFilter refuses an --events filter of the reserved
// "relay." prefix that cannot match any of relay's operational event types,
// which all have three tokens (relay.circuit.opened): relay.* and
// relay.circuit match none, and a subscriber given one would wait for
// events that never come. `relay sub add|update` call it on the filters
// they are given; a stored subscriber is not judged by it, so that one
// written before it stays readable.
func ValidateReservedFilter(f string) error {
	toks := strings.Split(f, ".")
	if toks[0] != "relay" || toks[len(toks)-1] == fullWildcard || len(toks) == 3 {
		return nil
	}
	return invalid("--events", fmt.Sprintf("%s matches no operational event: their types have three tokens, such as relay.circuit.opened; give relay.> for all of them, or relay.circuit.* for some", f))
}

// isSpaceOrControl reports runes that a NATS subject token cannot hold.
func isSpaceOrControl(r rune) bool {
	return r == ' ' || r == '\t' || r == '\r' || r == '\n' || r < 0x20 || r == 0x7f
}

// Matches reports whether the subscriber wants events of eventType, the
// subject of the event after "events.". A subscriber without filters wants
// every event; otherwise one matching filter is enough. In a filter, "*"
// matches exactly one token and ">" one or more trailing tokens, as in NATS,
// so "video.*" matches "video.trending" but neither "video" nor "video.a.b",
// and "video.>" matches "video.a.b" but not "video".
//
// The fan-out calls Matches for every enabled subscriber on every event, so
// it does not allocate.
//
// Event types starting "relay." are relay's operational events: only a
// filter whose first token is "relay" (relay.>, relay.subscriber.*,
// relay.circuit.opened) matches them, never "*", ">" nor no filter.
func (s Subscriber) Matches(eventType string) bool {
	reserved := strings.HasPrefix(eventType, opevent.Prefix)
	if len(s.Events) == 0 {
		return !reserved
	}
	for _, f := range s.Events {
		if reserved && !strings.HasPrefix(f, opevent.Prefix) {
			continue
		}
		if matchFilter(f, eventType) {
			return true
		}
	}
	return false
}

// MatchFilter reports whether one event filter (as [ValidateFilter]
// accepts) matches an event type, with the wildcards of
// [Subscriber.Matches]. `relay dlq` selects dead letters by event type with
// it, so that --type means what --events means.
func MatchFilter(filter, eventType string) bool {
	return matchFilter(filter, eventType)
}

// matchFilter matches one filter against an event type token by token,
// without splitting either into a slice.
func matchFilter(filter, subject string) bool {
	for {
		if filter == "" || subject == "" {
			return false
		}
		ftok, frest, fmore := strings.Cut(filter, ".")
		stok, srest, smore := strings.Cut(subject, ".")
		if ftok == fullWildcard {
			// ">" needs at least one token, and subject is not empty here.
			return true
		}
		if stok == "" || (ftok != singleWildcard && ftok != stok) {
			return false
		}
		if !fmore || !smore {
			return fmore == smore
		}
		filter, subject = frest, srest
	}
}
