package api

import "time"

// The bounds of the HTTP API: what one client may ask of a relay.
const (
	// MaxBody bounds the body of a request other than an event's: a
	// subscriber or a filter is far smaller.
	MaxBody = 1 << 20
	// DefaultMaxConcurrent is how many requests a relay serves at once;
	// past it a request is answered 503 at once, with Retry-After.
	DefaultMaxConcurrent = 256
	// DefaultKeyRate and DefaultKeyBurst bound each key's requests: a
	// token bucket of DefaultKeyBurst filled at DefaultKeyRate a second,
	// per relay. Past it a request is answered 429 with Retry-After.
	DefaultKeyRate  = 1000
	DefaultKeyBurst = 2000
	// MaxPage bounds a page of a list; DefaultPage is a page's size when
	// the request gives none.
	MaxPage     = 1000
	DefaultPage = 100
	// opTimeout bounds one operation of a request that gave no sooner
	// deadline: a NATS cluster that does not answer ends in a 500, not a
	// request held open for ever.
	opTimeout = 30 * time.Second
	// DefaultRequestTimeout bounds reading one request's body and writing
	// its answer (per request, on the connection): a client sending a
	// byte a minute, or never reading its answer, gives its slot back
	// then. opTimeout and a few seconds to read and write around it.
	DefaultRequestTimeout = opTimeout + 5*time.Second
	// readHeaderTimeout bounds reading a request's headers, before any
	// route (and its deadlines) is reached.
	readHeaderTimeout = 10 * time.Second
	// eventsLimitEvery is how long the EVENTS stream's max message size is
	// taken as read before it is read again.
	eventsLimitEvery = 10 * time.Second
)
