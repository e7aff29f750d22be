package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sourcegraph/conc"

	"github.com/relay-dev/relay/internal/api"
	"github.com/relay-dev/relay/internal/apikeys"
	"github.com/relay-dev/relay/internal/metrics"
	"github.com/relay-dev/relay/internal/subscribers"
	"github.com/relay-dev/relay/streams"
)

// checkAPI checks --api and its TLS flags: both files or neither, and only
// with --api.
func (f *runFlags) checkAPI() error {
	switch {
	case (f.apiTLSCert == "") != (f.apiTLSKey == ""):
		return usagef("--api-tls-cert and --api-tls-key go together: give both, or neither for plain HTTP")
	case f.apiAddr == "" && f.apiTLSCert != "":
		return usagef("--api-tls-cert: serves the HTTP API, which needs --api ADDR")
	}
	return nil
}

// startAPI registers the NATS service relay on svc, the service
// connection (none when svc is nil: relay has no connection of its own to
// answer from, said at its start by openServiceConn), and, with --api, serves the HTTP API once the keys are read,
// its loop in wg sending its end to errs. The function it returns stops
// the service; the HTTP API stops with runCtx.
func startAPI(setupCtx, runCtx context.Context, f *runFlags, js jetstream.JetStream, store *subscribers.Store, svc *nats.Conn,
	m *metrics.Metrics, log *slog.Logger, wg *conc.WaitGroup, errs chan<- error) (func(), error) {
	ops := &api.Ops{JS: js, Store: store, SharedLanes: f.lanes}
	stop := func() {}
	// The service failing to start stops no delivery.
	if svc != nil {
		if service, err := api.StartService(svc, ops, version, log); err != nil {
			log.Error("relay: the NATS service relay cannot start", "err", err)
		} else {
			stop = func() { _ = service.Stop() }
		}
	}
	if f.apiAddr == "" {
		return stop, nil
	}
	if err := streams.EnsureKeys(setupCtx, js, f.replicas); err != nil {
		stop()
		return nil, err
	}
	keys, err := apikeys.Open(setupCtx, js)
	if err != nil {
		stop()
		return nil, err
	}
	verifier := apikeys.NewVerifier(keys, log)
	wg.Go(func() { verifier.Run(runCtx) })
	select {
	case <-verifier.Ready():
	case <-setupCtx.Done():
		stop()
		return nil, fmt.Errorf("reading the API keys of bucket relay_keys: %w", setupCtx.Err())
	}
	srv, err := api.New(api.Config{Ops: ops, Keys: verifier, Registerer: m.Registry, Logger: log})
	if err != nil {
		stop()
		return nil, err
	}
	ln, err := net.Listen("tcp", f.apiAddr)
	if err != nil {
		stop()
		return nil, fmt.Errorf("--api: %w", err)
	}
	wg.Go(func() { errs <- srv.Serve(runCtx, ln, f.apiTLSCert, f.apiTLSKey) })
	log.Info("relay: HTTP API listening", "addr", ln.Addr().String(), "tls", f.apiTLSCert != "")
	return stop, nil
}
