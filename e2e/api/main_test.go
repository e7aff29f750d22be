// Package api tests, end to end with the built relay and a real
// nats-server, the HTTP API of `relay run --api`, the keys of `relay key`
// and the NATS service relay: a key made with the CLI, an event published
// over HTTP twice with one Idempotency-Key and delivered once, signed,
// byte for byte; a subscriber the CLI made seen over HTTP as `relay sub
// get --json` shows it; a removed key refused; the service found and asked
// with the nats CLI.
package api

import (
	"os"
	"testing"

	"github.com/relay-dev/relay/internal/testutil"
)

// TestMain removes the relay binary once every test is done with it, and
// fails a green run that left a goroutine behind.
func TestMain(m *testing.M) { os.Exit(testutil.RunBuilt(m)) }
