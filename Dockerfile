# Courier's image: a release binary on a slim Debian runtime, run as a numeric non-root
# user. Build: docker build -t courier:0.1.0 .   (tag with Cargo.toml's version: the Helm
# chart's default image tag is its appVersion, never `latest`).
#
# Base images are pinned by version tag, builder and runtime on the same Debian release
# (13, trixie: the binary links its glibc and libssl). Rust 1.95: Cargo.toml's
# rust-version, the one Courier is built and tested with. Pin digests on top where your
# registry policy asks for them: `docker buildx imagetools inspect
# rust:1.95.0-slim-trixie` prints the digest to append as @sha256:... (none is written
# here: none could be verified from where this file was written).
# scripts/check-dockerfile.sh checks the rules this file claims.
ARG RUST_IMAGE=rust:1.95.0-slim-trixie
ARG RUNTIME_IMAGE=debian:13.1-slim

FROM ${RUST_IMAGE} AS build
WORKDIR /src
# librdkafka is compiled from the rdkafka-sys crate with CMake (its `cmake-build`
# feature, which links the bundled static libcurl for OAUTHBEARER/OIDC), against OpenSSL.
RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential cmake python3 libssl-dev pkg-config \
    && rm -rf /var/lib/apt/lists/*

# 1. Dependencies only, with stand-ins for the sources: this layer (librdkafka, jemalloc,
#    every crate: most of the build time) is reused until Cargo.toml or Cargo.lock change.
#    The workspace's tooling crates (crates/: testkit, drill) are never built here, but
#    Cargo loads their manifests to resolve the workspace: manifests only, stubbed too.
#    The stand-ins (crates/courier-standins: `courier sink`, `courier demo`) are a
#    dependency of the binary: stubbed here like the others, their sources come in step 2.
COPY Cargo.toml Cargo.lock ./
COPY crates/courier-standins/Cargo.toml crates/courier-standins/
COPY crates/courier-testkit/Cargo.toml crates/courier-testkit/
COPY crates/courier-drill/Cargo.toml crates/courier-drill/
COPY deploy/docker/stub-crate.sh /usr/local/bin/
RUN stub-crate.sh \
    && cargo build --release --locked --bin courier \
    && rm -rf src crates/courier-standins/src target/release/courier \
       target/release/deps/courier-* target/release/deps/libcourier-* \
       target/release/deps/libcourier_standins-* target/release/.fingerprint/courier-*

# 2. Courier itself. COPY keeps the files' modification times, which can be older than
#    the stand-ins' build: touch them so Cargo never mistakes the stand-ins for the crate.
#    build.rs embeds the commit shown on /status: there is no .git in the build
#    context, so pass it: docker build --build-arg COURIER_GIT_COMMIT=$(git rev-parse HEAD) .
ARG COURIER_GIT_COMMIT=""
ENV COURIER_GIT_COMMIT=${COURIER_GIT_COMMIT}
COPY build.rs ./
COPY build ./build
COPY src ./src
COPY crates/courier-standins/src ./crates/courier-standins/src
RUN find src crates/courier-standins/src build build.rs -name '*.rs' -exec touch {} + \
    && cargo build --release --locked --bin courier

# The image's default config: config/courier.toml with the listener on all interfaces.
COPY config/courier.toml deploy/docker/image-config.sh ./
RUN sh image-config.sh courier.toml courier.image.toml

FROM ${RUNTIME_IMAGE}
# Runtime libraries only: CA certificates, OpenSSL (librdkafka's TLS). No curl, no shell
# tools beyond the base image's: Courier probes itself (see HEALTHCHECK below).
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates libssl3t64 \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 courier \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin courier
COPY --from=build /src/target/release/courier /usr/local/bin/courier
COPY --from=build /src/courier.image.toml /etc/courier/courier.toml
# Numeric, so Kubernetes' runAsNonRoot can verify it without a passwd lookup.
USER 10001:10001
# The metrics listener (/metrics, /healthz, /readyz): config's metrics.listen, 0.0.0.0:9464
# in the image's default config. No COURIER__METRICS__LISTEN here: an environment variable
# beats the config file, and would silently override a mounted config's metrics.listen.
EXPOSE 9464
# The image checks itself with its own binary (the runtime has no curl, and needs none):
# `courier healthcheck` asks /healthz on the config's metrics.listen (0.0.0.0 is asked on
# loopback) within 2 s and exits 0 (healthy) or 1. Docker and Compose use it; Kubernetes
# ignores HEALTHCHECK and runs the chart's probes on /healthz and /readyz instead. With
# a mounted config or COURIER__* variables it asks where the instance listens.
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["courier", "healthcheck", "--config", "/etc/courier/courier.toml"]
# Mount your own config over /etc/courier/courier.toml (or set COURIER__* variables).
ENTRYPOINT ["courier"]
CMD ["run", "--config", "/etc/courier/courier.toml"]
