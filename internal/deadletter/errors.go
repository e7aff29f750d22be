package deadletter

import "errors"

var (
	// ErrInvalidReason means a string is not one of the dead-letter reasons
	// of docs/dead-letters.md. The wrapping error quotes the string and lists the valid
	// reasons, so that `relay dlq ls --reason` can print it as is.
	ErrInvalidReason = errors.New("invalid reason")

	// ErrInvalidDeath means a [Death] given to [Publish] cannot be stored: its
	// subscriber is not a valid subject token, its OriginSeq is zero (the
	// Nats-Msg-Id would then collide with every other such copy), or a count
	// is negative. Nothing is published.
	ErrInvalidDeath = errors.New("invalid death")

	// ErrInvalidFilter means a [Filter] names a subscriber that is not a valid
	// id or a reason that is not valid; either would change the meaning of
	// the filter subject instead of narrowing it.
	ErrInvalidFilter = errors.New("invalid filter")

	// ErrMalformedEntry means a message in the DLQ stream is not a DLQ copy
	// relay could have written: its subject is not dlq.<subscriber>.<reason>
	// or one of relay's headers does not parse. Such a message was written
	// around relay (with `nats pub`, say). The wrapping error names the DLQ
	// sequence, so that an operator can inspect or remove it.
	ErrMalformedEntry = errors.New("malformed DLQ message")

	// ErrNotFound means the DLQ holds no entry at a sequence: it was never
	// written, or it was replayed, purged or aged out since.
	ErrNotFound = errors.New("no such dead letter")

	// ErrUnknownSubscriber means a replay selected entries of a subscriber
	// the relay_subscribers bucket does not hold: they would only die again,
	// as unroutable, so nothing is replayed.
	ErrUnknownSubscriber = errors.New("no such subscriber")

	// ErrSubscriberDisabled means a replay selected entries of a disabled
	// subscriber without being asked to enable it: they would be held until
	// `relay sub enable`, which the operator should decide.
	ErrSubscriberDisabled = errors.New("subscriber is disabled")

	// ErrNoLane means a replay would put entries on a lane that has no
	// consumer on DELIVERIES, where no relay would ever read them.
	ErrNoLane = errors.New("no such lane")

	// ErrTruncated means [List] stopped at its limit while more entries
	// matched. The entries returned with it are valid: the oldest ones. The
	// wrapping error says how many more matched.
	ErrTruncated = errors.New("more entries match than the limit")
)
