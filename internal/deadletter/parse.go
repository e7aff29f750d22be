package deadletter

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/relay-dev/relay/internal/subscribers"
)

// FilterArgs are a filter as a person or a program writes it: the flags of
// `relay dlq ls|replay|purge`, the query parameters of the HTTP API, the
// fields of the NATS service (each named as the flag is). A nil field was
// not given.
type FilterArgs struct {
	Subscriber, Reason, Type, Event, Since, Until *string
}

// ParseFilter reads args as of now into a [Filter] (Seqs aside), the one
// reading of a filter's words: a subscriber id ([NoSubscriber] selects
// every one, as none given does), a
// reason, one event type or pattern, an event (its id or the webhook-id
// its receivers saw), and times that are RFC 3339 or a
// duration ago (24h), since no later than until. A bad value is an error
// wrapping [ErrInvalidFilter] whose one line names the field by its flag
// (--reason): the CLI, the HTTP API and the NATS service give that same
// line.
func ParseFilter(args FilterArgs, now time.Time) (Filter, error) {
	var f Filter
	name := func(field string) string { return "--" + field }
	bad := func(field, format string, a ...any) error {
		return &filterError{msg: name(field) + ": " + fmt.Sprintf(format, a...)}
	}
	if v := args.Subscriber; v != nil && *v != NoSubscriber {
		if err := subscribers.ValidateID(*v); err != nil {
			var ve *subscribers.ValidationError
			if errors.As(err, &ve) {
				return f, bad("subscriber", "%s", ve.Msg)
			}
			return f, bad("subscriber", "%v", err)
		}
		f.Subscriber = *v
	}
	if v := args.Reason; v != nil {
		r, err := ParseReason(*v)
		if err != nil {
			return f, bad("reason", "%q is not a reason; valid reasons are %s", *v, ReasonNames())
		}
		f.Reason = r
	}
	if v := args.Type; v != nil {
		if strings.Contains(*v, ",") {
			return f, bad("type", "takes one event type or pattern (video.*), got %q; run the command once for each", *v)
		}
		if err := subscribers.ValidateFilter(*v); err != nil {
			return f, bad("type", "must be an event type or a pattern with * and > as in relay sub add --events, such as video.* or order.>, got %q", *v)
		}
		f.Type = *v
	}
	if v := args.Event; v != nil {
		if *v == "" {
			return f, bad("event", "give an event id or a webhook-id")
		}
		f.Event = *v
	}
	var err error
	if v := args.Since; v != nil {
		if f.Since, err = parseTime(*v, now); err != nil {
			return f, bad("since", "%v", err)
		}
	}
	if v := args.Until; v != nil {
		if f.Until, err = parseTime(*v, now); err != nil {
			return f, bad("until", "%v", err)
		}
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && f.Until.Before(f.Since) {
		return f, bad("until", "%s is before %s %s; swap them", f.Until.Format(time.RFC3339), name("since"), f.Since.Format(time.RFC3339))
	}
	return f, nil
}

// filterError is a [ParseFilter] error: one line that begins with the
// field, wrapping [ErrInvalidFilter] without its words.
type filterError struct{ msg string }

func (e *filterError) Error() string { return e.msg }
func (e *filterError) Unwrap() error { return ErrInvalidFilter }

// parseTime reads a time of a filter: an RFC 3339 time, or a duration
// meaning that long before now, as the nats CLI's --since does.
func parseTime(v string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t.UTC(), nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(-d).UTC(), nil
	}
	return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time (2026-12-01T08:00:00Z) nor a duration ago (24h, 90m)", v)
}

// ReasonNames is every reason, comma-separated, for messages and help.
func ReasonNames() string {
	rs := Reasons()
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = string(r)
	}
	return strings.Join(s, ", ")
}
