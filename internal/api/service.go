package api

import (
	"context"
	"encoding/json"
	"log/slog"
	"regexp"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/relay-dev/relay/internal/deadletter"
	"github.com/relay-dev/relay/internal/service"
)

// ServiceName is the NATS service every relay run registers.
const ServiceName = "relay"

// ServiceQueue is the queue group of its endpoints: one relay answers each
// request.
const ServiceQueue = "relay"

// ServicePrefix begins every endpoint's subject: relay.api.v1.<group>.<verb>.
const ServicePrefix = "relay.api.v1"

// StartService registers the service on nc (the service connection) with
// version, and returns it; Stop it to stop answering.
func StartService(nc *nats.Conn, ops *Ops, version string, log *slog.Logger) (micro.Service, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	svc, err := micro.AddService(nc, micro.Config{Name: ServiceName, Version: ServiceVersion(version), QueueGroup: ServiceQueue,
		Description: "relay, webhook delivery on NATS JetStream: docs/api.md"})
	if err != nil {
		return nil, err
	}
	endpoints := []struct {
		subject string
		fn      func(ctx context.Context, data []byte, h micro.Headers) (any, micro.Headers, error)
	}{
		{"status", func(ctx context.Context, _ []byte, _ micro.Headers) (any, micro.Headers, error) {
			rows, err := ops.Status(ctx)
			return rows, nil, err
		}},
		{"events.trace", func(ctx context.Context, data []byte, _ micro.Headers) (any, micro.Headers, error) {
			var in struct {
				ID       string `json:"id"`
				Filtered bool   `json:"filtered"`
			}
			if err := decode(data, &in); err != nil {
				return nil, nil, err
			}
			t, err := ops.Trace(ctx, in.ID, in.Filtered)
			return t, nil, err
		}},
		{"subscribers.get", func(ctx context.Context, data []byte, _ micro.Headers) (any, micro.Headers, error) {
			var in struct {
				ID string `json:"id"`
			}
			if err := decode(data, &in); err != nil {
				return nil, nil, err
			}
			s, err := ops.Subscriber(ctx, in.ID)
			return s, nil, err
		}},
		{"subscribers.list", func(ctx context.Context, data []byte, _ micro.Headers) (any, micro.Headers, error) {
			var in struct {
				Cursor string `json:"cursor"`
				Owner  string `json:"owner"`
				Limit  int    `json:"limit"`
			}
			if err := decode(data, &in); err != nil {
				return nil, nil, err
			}
			subs, next, err := ops.Subscribers(ctx, in.Cursor, in.Owner, in.Limit)
			return subs, nextHeader(next), err
		}},
		{"dlq.list", func(ctx context.Context, data []byte, _ micro.Headers) (any, micro.Headers, error) {
			var in struct {
				Subscriber *string `json:"subscriber"`
				Reason     *string `json:"reason"`
				Type       *string `json:"type"`
				Since      *string `json:"since"`
				Until      *string `json:"until"`
				Cursor     uint64  `json:"cursor,string"`
				Limit      int     `json:"limit"`
			}
			if err := decode(data, &in); err != nil {
				return nil, nil, err
			}
			args := deadletter.FilterArgs{Subscriber: in.Subscriber, Reason: in.Reason, Type: in.Type, Since: in.Since, Until: in.Until}
			entries, next, err := ops.DeadLetters(ctx, args, in.Cursor, in.Limit)
			if next == 0 {
				return entries, nil, err
			}
			return entries, nextHeader(strconv.FormatUint(next, 10)), err
		}},
		{"dlq.get", func(ctx context.Context, data []byte, _ micro.Headers) (any, micro.Headers, error) {
			var in struct {
				Seq uint64 `json:"seq"`
			}
			if err := decode(data, &in); err != nil {
				return nil, nil, err
			}
			m, err := ops.DeadLetter(ctx, in.Seq)
			return m, nil, err
		}},
		{"subscribers.create", func(ctx context.Context, data []byte, _ micro.Headers) (any, micro.Headers, error) {
			var in NewSubscriber
			if err := decodeStrict(data, &in); err != nil {
				return nil, nil, err
			}
			c, err := ops.CreateSubscriber(ctx, in)
			return c, nil, err
		}},
		{"subscribers.update", func(ctx context.Context, data []byte, _ micro.Headers) (any, micro.Headers, error) {
			var in struct {
				ID string `json:"id"`
				SubscriberChange
			}
			if err := decodeStrict(data, &in); err != nil {
				return nil, nil, err
			}
			sub, err := ops.UpdateSubscriber(ctx, in.ID, in.SubscriberChange)
			return sub, nil, err
		}},
		{"subscribers.delete", func(ctx context.Context, data []byte, _ micro.Headers) (any, micro.Headers, error) {
			var in struct {
				ID    string `json:"id"`
				Force bool   `json:"force"`
			}
			if err := decodeStrict(data, &in); err != nil {
				return nil, nil, err
			}
			n, err := ops.DeleteSubscriber(ctx, in.ID, in.Force)
			return Deleted{ID: in.ID, Dropped: n}, nil, err
		}},
		{"subscribers.rotate_secret", func(ctx context.Context, data []byte, _ micro.Headers) (any, micro.Headers, error) {
			var in struct {
				ID string `json:"id"`
				Rotation
			}
			if err := decodeStrict(data, &in); err != nil {
				return nil, nil, err
			}
			c, err := ops.RotateSecret(ctx, in.ID, in.Rotation)
			return c, nil, err
		}},
		{"subscribers.pause", func(ctx context.Context, data []byte, _ micro.Headers) (any, micro.Headers, error) {
			var in struct {
				ID string `json:"id"`
				PauseArgs
			}
			if err := decodeStrict(data, &in); err != nil {
				return nil, nil, err
			}
			sub, err := ops.Pause(ctx, in.ID, in.Until)
			return sub, nil, err
		}},
		{"subscribers.resume", func(ctx context.Context, data []byte, _ micro.Headers) (any, micro.Headers, error) {
			id, err := decodeID(data)
			if err != nil {
				return nil, nil, err
			}
			sub, err := ops.Resume(ctx, id)
			return sub, nil, err
		}},
		{"subscribers.enable", func(ctx context.Context, data []byte, _ micro.Headers) (any, micro.Headers, error) {
			id, err := decodeID(data)
			if err != nil {
				return nil, nil, err
			}
			sub, err := ops.SetDisabled(ctx, id, false)
			return sub, nil, err
		}},
		{"subscribers.disable", func(ctx context.Context, data []byte, _ micro.Headers) (any, micro.Headers, error) {
			id, err := decodeID(data)
			if err != nil {
				return nil, nil, err
			}
			sub, err := ops.SetDisabled(ctx, id, true)
			return sub, nil, err
		}},
		{"dlq.replay", func(ctx context.Context, data []byte, _ micro.Headers) (any, micro.Headers, error) {
			var in ReplayRequest
			if err := decodeStrict(data, &in); err != nil {
				return nil, nil, err
			}
			out, err := ops.ReplayDeadLetters(ctx, in.args())
			return out, nil, err
		}},
		{"dlq.purge", func(ctx context.Context, data []byte, _ micro.Headers) (any, micro.Headers, error) {
			var in ReplayRequest
			if err := decodeStrict(data, &in); err != nil {
				return nil, nil, err
			}
			if in.DryRun || in.Enable || in.IgnoreDeadline {
				return nil, nil, invalid("dlq.purge takes the filters alone: subscriber, reason, type, event, since, until")
			}
			out, err := ops.PurgeDeadLetters(ctx, in.filter())
			return out, nil, err
		}},
	}
	for _, e := range endpoints {
		subject := ServicePrefix + "." + e.subject
		name := endpointName(e.subject)
		fn := e.fn
		err := svc.AddEndpoint(name, micro.HandlerFunc(func(req micro.Request) {
			answer(req, fn, log)
		}), micro.WithEndpointSubject(subject))
		if err != nil {
			_ = svc.Stop()
			return nil, err
		}
	}
	return svc, nil
}

// semVer is what micro takes as a version.
var semVer = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$`)

// ServiceVersion is relay's version as the service gives it: micro takes
// semantic versions alone, so v1.2.3 is 1.2.3, and a build that is not a
// release (dev, a commit) is 0.0.0-<its version>.
func ServiceVersion(version string) string {
	if v := strings.TrimPrefix(version, "v"); semVer.MatchString(v) {
		return v
	}
	clean := strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r == '-' {
			return r
		}
		return '-'
	}, version)
	if clean == "" {
		clean = "unknown"
	}
	return "0.0.0-" + clean
}

// endpointName is an endpoint's name in `nats micro info`: its subject
// after the prefix, dots as underscores (subscribers_get).
func endpointName(subject string) string {
	b := []byte(subject)
	for i, c := range b {
		if c == '.' {
			b[i] = '_'
		}
	}
	return string(b)
}

// decodeID reads a request that names a subscriber alone: {"id": "..."}.
func decodeID(data []byte) (string, error) {
	var in struct {
		ID string `json:"id"`
	}
	err := decodeStrict(data, &in)
	return in.ID, err
}

// nextHeader carries a list's next cursor, none on the last page.
func nextHeader(next string) micro.Headers {
	if next == "" {
		return nil
	}
	return micro.Headers{NextCursorHeader: []string{next}}
}

// decode reads a request's JSON; an empty request is an empty object.
func decode(data []byte, v any) error {
	if len(data) == 0 {
		return nil
	}
	if err := json.Unmarshal(data, v); err != nil {
		return invalid("the request is not the JSON this endpoint takes: " + err.Error())
	}
	return nil
}

// answer serves one request: nothing at all unless its reply subject is an
// inbox ([service.CheckReply]); else fn's answer, or its error's code and
// line in Nats-Service-Error-Code and Nats-Service-Error.
func answer(req micro.Request, fn func(context.Context, []byte, micro.Headers) (any, micro.Headers, error), log *slog.Logger) {
	if err := service.CheckReply(req.Reply()); err != nil {
		log.Warn("api: service request ignored", "subject", req.Subject(), "err", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	v, h, err := fn(ctx, req.Data(), req.Headers())
	if err != nil {
		code := Status(err)
		if code != 400 && code != 404 && code != 409 {
			code = 500
		}
		if code == 500 {
			log.Error("api: service request failed", "subject", req.Subject(), "err", err)
		}
		_ = req.Error(strconv.Itoa(code), detail(err, code), nil)
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		_ = req.Error("500", detail(err, 500), nil)
		return
	}
	if h != nil {
		_ = req.Respond(b, micro.WithHeaders(h))
		return
	}
	_ = req.Respond(b)
}
