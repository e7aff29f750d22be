// Package api owns relay's ways in for programs (DESIGN.md, "HTTP API" and
// "NATS service"): the HTTP API `relay run --api ADDR` serves, and the NATS
// service `relay` every `relay run` registers. Both are thin translators:
// each route or endpoint decodes its input, calls one operation of [Ops],
// which calls the package that owns the noun (status, attempts,
// subscribers, deadletter) as the CLI does, and encodes the answer; no
// rule lives in a handler. An error is classified once ([Status]): 400 for
// bad input, with the CLI's one-line message; 404 for an unknown
// subscriber, entry or event; 409 for a create of an id that exists and a
// removal that would drop deliveries without force; 413 for a body too
// large; else 500.
//
// The writes (write.go) take the fields `relay sub get --json` prints and
// the flags' long names with `_`, read strictly: a field a route does not
// take is 400, so that a setting misspelt is not ignored.
//
// # HTTP
//
// Every route but GET /v1/openapi.json needs `Authorization: Bearer rk_…`
// (package apikeys): none or an unknown key is 401 with `WWW-Authenticate:
// Bearer`, a key without the route's scope 403. Errors are
// application/problem+json (RFC 9457) whose detail is the one-line
// message. Bounds, all in tuning.go: request bodies (the EVENTS stream's
// max message size for events, [MaxBody] otherwise), concurrent requests
// (503 with Retry-After past them), and a per-key request rate (429 with
// Retry-After). Every request is counted in relay_api_requests_total{route,
// code} and relay_api_request_duration_seconds{route}, where route is the
// route's pattern, and logged with the key's name, never the key.
//
// # NATS service
//
// [StartService] registers the service `relay` (nats.go micro, version =
// relay's) in the queue group "relay", endpoints relay.api.v1.<group>.<verb>.
// Every request goes through [service.CheckReply] before anything is done:
// a request without a reply or whose reply lies in relay's own namespaces
// is neither acted on nor answered. relay runs it on the service
// connection, whose user may publish to _INBOX.> alone.
package api
