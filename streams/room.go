package streams

import (
	"errors"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// JetStream error codes that say a stream or the account has no room for a
// message or a stream (nats-server's jetstream_errors_generated.go), which
// nats.go does not name.
const (
	codeAccountResourcesExceeded jetstream.ErrorCode = 10002
	codeInsufficientResources    jetstream.ErrorCode = 10023
	codeMemoryResourcesExceeded  jetstream.ErrorCode = 10028
	codeStorageResourcesExceeded jetstream.ErrorCode = 10047
	codeStoreFailed              jetstream.ErrorCode = 10077
)

// NoRoom reports whether a publish was refused for want of room: the
// stream's own bound with discard-new (10077 "maximum bytes exceeded",
// "maximum messages exceeded", "maximum messages per subject exceeded"),
// or the account's or server's storage (10002, 10023, 10028, 10047). Such a
// refusal lasts until something is acked, purged or the limit raised, so the
// ways out of a full DELIVERIES take another road rather than ask again
// (see package overflow).
func NoRoom(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.ErrorCode {
	case codeAccountResourcesExceeded, codeInsufficientResources, codeMemoryResourcesExceeded, codeStorageResourcesExceeded:
		return true
	case codeStoreFailed:
		return strings.Contains(apiErr.Description, "maximum bytes exceeded") ||
			strings.Contains(apiErr.Description, "maximum messages")
	}
	return false
}
