# relay: run `make help` for the targets.
GO      ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)

.PHONY: help run build test lint bench

help: ## list the targets
	@grep -E '^[a-z]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-7s %s\n", $$1, $$2}'

run: ## run relay on an embedded NATS server (loopback targets allowed, for the local demo)
	$(GO) run ./cmd/relay run --allow-private-targets

build: ## build the static binary bin/relay
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/relay ./cmd/relay

test: ## run every test with the race detector
	$(GO) test -race -count=1 -timeout 15m ./...

lint: ## gofmt and go vet
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); echo "gofmt: the files above need formatting"; exit 1)
	$(GO) vet ./...

bench: ## bench/engine, every scenario (the built relay end to end, the rate rule): about 10 minutes; tables on stdout, bench/results.json; see bench/README.md
	$(GO) run ./bench/engine -json bench/results.json
