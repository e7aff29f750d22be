// Command relay delivers events published on NATS JetStream to subscriber
// webhooks, within each subscriber's rate, without losing any to a transient
// failure or a crash. See README.md and docs/.
package main

import (
	"context"
	"os"
)

func main() {
	// The first SIGINT or SIGTERM stops cleanly; a second ends the process
	// at once (see stopSignals).
	ctx, signals := watchStopSignals(context.Background(), os.Exit)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	signals.close()
	os.Exit(signals.code(code))
}
