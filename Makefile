# relay: run `make help` for the targets.
GO      ?= go
FUZZTIME ?= 10s
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)

.PHONY: help run build test lint bench fuzz

help: ## list the targets
	@grep -E '^[a-z]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-7s %s\n", $$1, $$2}'

run: ## run relay on an embedded NATS server (loopback targets allowed, for the local demo)
	$(GO) run ./cmd/relay run --allow-private-targets

build: ## build the static binary bin/relay
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/relay ./cmd/relay

test: ## run every test with the race detector, then fuzz each fuzz target for 20,000 inputs
	$(GO) test -race -count=1 -timeout 15m ./...
	@$(MAKE) --no-print-directory fuzz FUZZTIME=20000x

lint: ## gofmt and go vet
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); echo "gofmt: the files above need formatting"; exit 1)
	$(GO) vet ./...

bench: ## bench/engine, every scenario (the built relay end to end, the rate rule): about 23 minutes, 11 of them the scheduled scenario's span; tables on stdout, bench/results.json; see bench/README.md
	$(GO) run ./bench/engine -json bench/results.json

# Each fuzz target and its package, fuzzed one after another (go test fuzzes
# one target at a time); `go test ./...` runs only their seed corpora.
FUZZ_TARGETS := \
	FuzzParseRetryAfter:./internal/deliver/ \
	FuzzParseRateLimitReset:./internal/deliver/ \
	FuzzSignVerify:./internal/deliver/ \
	FuzzCheckAddr:./internal/deliver/ \
	FuzzWebhookID:./internal/deliver/ \
	FuzzFilterIndex:./internal/subscribers/ \
	FuzzDecode:./internal/subscribers/ \
	FuzzCompile:./internal/filter/ \
	FuzzEntryFromMsg:./internal/deadletter/

fuzz: ## fuzz each target for FUZZTIME (default 10s), one after another; a failing input lands in its package's testdata/fuzz/
	@set -e; for t in $(FUZZ_TARGETS); do \
		name=$${t%%:*}; pkg=$${t#*:}; \
		echo "== $$name ($$pkg, $(FUZZTIME))"; \
		$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) $$pkg; \
	done
