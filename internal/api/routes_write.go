package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/relay-dev/relay/internal/apikeys"
	"github.com/relay-dev/relay/internal/deadletter"
	"github.com/relay-dev/relay/internal/subscribers"
)

// routeWrites serves the routes that change subscribers and dead letters.
func (s *Server) routeWrites() {
	ops := s.cfg.Ops
	s.route("POST /v1/subscribers", apikeys.SubscribersWrite, func(_ http.ResponseWriter, r *http.Request, _ apikeys.Key) (int, any, error) {
		var in NewSubscriber
		if err := decodeBody(r, &in); err != nil {
			return 0, nil, err
		}
		c, err := ops.CreateSubscriber(r.Context(), in)
		return http.StatusCreated, c, err
	})
	s.route("PATCH /v1/subscribers/{id}", apikeys.SubscribersWrite, func(_ http.ResponseWriter, r *http.Request, _ apikeys.Key) (int, any, error) {
		var in SubscriberChange
		if err := decodeBody(r, &in); err != nil {
			return 0, nil, err
		}
		sub, err := ops.UpdateSubscriber(r.Context(), r.PathValue("id"), in)
		return http.StatusOK, sub, err
	})
	s.route("DELETE /v1/subscribers/{id}", apikeys.SubscribersWrite, func(_ http.ResponseWriter, r *http.Request, _ apikeys.Key) (int, any, error) {
		force, err := boolParam(r, "force")
		if err != nil {
			return 0, nil, err
		}
		id := r.PathValue("id")
		n, err := ops.DeleteSubscriber(r.Context(), id, force)
		return http.StatusOK, Deleted{ID: id, Dropped: n}, err
	})
	s.route("POST /v1/subscribers/{id}/rotate-secret", apikeys.SubscribersWrite, func(_ http.ResponseWriter, r *http.Request, _ apikeys.Key) (int, any, error) {
		var in Rotation
		if err := decodeBody(r, &in); err != nil {
			return 0, nil, err
		}
		c, err := ops.RotateSecret(r.Context(), r.PathValue("id"), in)
		return http.StatusOK, c, err
	})
	s.route("POST /v1/subscribers/{id}/pause", apikeys.SubscribersWrite, func(_ http.ResponseWriter, r *http.Request, _ apikeys.Key) (int, any, error) {
		var in PauseArgs
		if err := decodeBody(r, &in); err != nil {
			return 0, nil, err
		}
		sub, err := ops.Pause(r.Context(), r.PathValue("id"), in.Until)
		return http.StatusOK, sub, err
	})
	s.route("POST /v1/subscribers/{id}/resume", apikeys.SubscribersWrite, func(_ http.ResponseWriter, r *http.Request, _ apikeys.Key) (int, any, error) {
		sub, err := ops.Resume(r.Context(), r.PathValue("id"))
		return http.StatusOK, sub, err
	})
	for verb, disable := range map[string]bool{"enable": false, "disable": true} {
		s.route("POST /v1/subscribers/{id}/"+verb, apikeys.SubscribersWrite, func(_ http.ResponseWriter, r *http.Request, _ apikeys.Key) (int, any, error) {
			sub, err := ops.SetDisabled(r.Context(), r.PathValue("id"), disable)
			return http.StatusOK, sub, err
		})
	}
	s.route("POST /v1/dlq/replay", apikeys.DLQWrite, func(_ http.ResponseWriter, r *http.Request, _ apikeys.Key) (int, any, error) {
		var in ReplayRequest
		if err := decodeBody(r, &in); err != nil {
			return 0, nil, err
		}
		out, err := ops.ReplayDeadLetters(r.Context(), in.args())
		return http.StatusOK, out, err
	})
	s.route("DELETE /v1/dlq", apikeys.DLQWrite, func(_ http.ResponseWriter, r *http.Request, _ apikeys.Key) (int, any, error) {
		out, err := ops.PurgeDeadLetters(r.Context(), filterParams(r))
		return http.StatusOK, out, err
	})
}

// Deleted is what a removal answers: the id, and the deliveries dropped.
type Deleted struct {
	ID      string              `json:"id"`
	Dropped subscribers.Dropped `json:"dropped"`
}

// PauseArgs are what a pause takes: until, an RFC 3339 time or a duration
// from now ("": until a resume).
type PauseArgs struct {
	Until string `json:"until,omitempty"`
}

// ReplayRequest is what a replay takes: the filter, as dlq ls's flags, and
// replay's flags.
type ReplayRequest struct {
	Subscriber     *string `json:"subscriber,omitempty"`
	Reason         *string `json:"reason,omitempty"`
	Type           *string `json:"type,omitempty"`
	Event          *string `json:"event,omitempty"`
	Since          *string `json:"since,omitempty"`
	Until          *string `json:"until,omitempty"`
	DryRun         bool    `json:"dry_run,omitempty"`
	Enable         bool    `json:"enable,omitempty"`
	IgnoreDeadline bool    `json:"ignore_deadline,omitempty"`
}

func (in ReplayRequest) args() ReplayArgs {
	return ReplayArgs{FilterArgs: in.filter(), DryRun: in.DryRun, Enable: in.Enable, IgnoreDeadline: in.IgnoreDeadline}
}

func (in ReplayRequest) filter() deadletter.FilterArgs {
	return deadletter.FilterArgs{Subscriber: in.Subscriber, Reason: in.Reason, Type: in.Type, Event: in.Event, Since: in.Since, Until: in.Until}
}

// filterParams are the dlq ls filters given as query parameters.
func filterParams(r *http.Request) deadletter.FilterArgs {
	q := r.URL.Query()
	given := func(name string) *string {
		if !q.Has(name) {
			return nil
		}
		v := q.Get(name)
		return &v
	}
	return deadletter.FilterArgs{Subscriber: given("subscriber"), Reason: given("reason"), Type: given("type"),
		Event: given("event"), Since: given("since"), Until: given("until")}
}

// decodeBody reads a request's JSON body into v; an empty body is an
// empty object.
func decodeBody(r *http.Request, v any) error {
	body, err := readAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return &tooLargeError{msg: "the body is larger than the API takes"}
		}
		return invalid("reading the body: " + err.Error())
	}
	return decodeStrict(body, v)
}

// decodeStrict reads JSON into v, refusing a field v lacks (a setting
// misspelt is not silently ignored); empty data is an empty object.
func decodeStrict(data []byte, v any) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return invalid("the request is not the JSON this endpoint takes: " + err.Error())
	}
	if _, err := dec.Token(); err != io.EOF {
		return invalid("the request is not the JSON this endpoint takes: more than one value")
	}
	return nil
}
