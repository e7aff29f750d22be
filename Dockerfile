# syntax=docker/dockerfile:1

# relay's image: the static binary of `make build` on distroless, run as the
# non-root user nonroot (65532). distroless/static carries the CA
# certificates HTTPS webhooks need, and no shell.
#
#   docker build -t relay --build-arg VERSION=$(git describe --tags --always --dirty) .
#   docker run --rm -p 4222:4222 -p 9469:9469 relay      # embedded NATS server, data in /data
#   docker run --rm relay run --nats nats://nats:4222    # a NATS cluster of your own
#
# docker-compose.yml runs two of them on a three-node NATS cluster.

# The Go of go.mod's go line (cmd/relay/compose_test.go checks that they agree).
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG VERSION=dev
# As the Makefile's build target. The smoke check runs the binary it built:
# a build that cannot start, or lost its version, fails here and not in a
# deployment.
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/relay ./cmd/relay \
 && test "$(/out/relay version)" = "relay ${VERSION}" \
 && mkdir /out/data

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/relay /relay
# The embedded NATS server's store, writable by nonroot.
COPY --from=build --chown=65532:65532 /out/data /data
VOLUME /data
USER 65532:65532
# 9469: /metrics, /healthz and /readyz. 4222: the embedded NATS server's
# clients, when relay run is given no --nats.
EXPOSE 9469 4222
ENTRYPOINT ["/relay"]
# Reachable from outside the container: relay run's defaults listen on
# 127.0.0.1, which nothing outside the container can reach.
CMD ["run", "--listen", "0.0.0.0:4222", "--metrics", "0.0.0.0:9469", "--data", "/data"]
