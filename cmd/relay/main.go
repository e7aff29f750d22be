// Command relay delivers events published on NATS JetStream to subscriber
// webhooks, within each subscriber's rate, without losing any to a transient
// failure or a crash. See README.md and docs/.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
