# Multi-stage build: a release binary on a small Debian runtime, run as non-root.
FROM rust:1-bookworm AS build
WORKDIR /src
# librdkafka is compiled from the rdkafka-sys crate (configure + make).
RUN apt-get update && apt-get install -y --no-install-recommends build-essential python3 libssl-dev pkg-config \
    && rm -rf /var/lib/apt/lists/*
COPY Cargo.toml Cargo.lock ./
COPY src ./src
# Cargo.toml declares the benchmark target; its sources must be present to build.
COPY benches ./benches
RUN cargo build --release --locked --bin courier

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates curl libssl3 \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --no-create-home courier
COPY --from=build /src/target/release/courier /usr/local/bin/courier
COPY config/courier.toml /etc/courier/courier.toml
USER courier
# Metrics and health must be reachable from outside the container.
ENV COURIER__METRICS__LISTEN=0.0.0.0:9464
EXPOSE 9464
HEALTHCHECK --interval=10s --timeout=3s --retries=3 CMD curl -fsS http://127.0.0.1:9464/healthz || exit 1
# Mount your own config over /etc/courier/courier.toml (or set COURIER__* variables).
ENTRYPOINT ["courier"]
CMD ["run", "--config", "/etc/courier/courier.toml"]
