#!/usr/bin/env bash
# The project's test command: starts the real services the tests need (Kafka from
# Maven Central, Redis and PostgreSQL from Debian), then runs formatting, lints and
# every test against them.
set -euo pipefail
cd "$(dirname "$0")/.."

# A broker with fresh storage: topics and groups left by earlier runs only slow it down
# (a restart loads every partition; see `kafka-reset` in services.sh).
bash scripts/services.sh kafka-reset
bash scripts/services.sh up

# Debian's Chromium for the status page's browser test (tests/status_page.rs renders
# /status headless). Installed here, not by services.sh: it is a test tool, not a service.
if ! command -v chromium >/dev/null; then
    echo "[test] installing chromium (headless browser for tests/status_page.rs)" >&2
    sudo_=()
    if [[ $(id -u) -ne 0 ]]; then sudo_=(sudo); fi
    "${sudo_[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null
    "${sudo_[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        chromium >/dev/null
fi

# shellcheck disable=SC1091
source "${COURIER_STATE:-/tmp/courier-services}/services.env"

cargo fmt --all -- --check
# --workspace: the service (the root package) and the tooling in crates/ (the testkit,
# the drill and its CI test, crates/courier-drill/tests/drills.rs).
cargo clippy --workspace --all-targets --features test-hooks -- -D warnings
# The binary the deploy checks run (`courier check-config`); cargo test reuses it.
cargo build --bin courier --features test-hooks
# Static checks of dashboards/ and deploy/ (promtool, Grafana schema, helm, Kubernetes
# schemas, Pod Security "restricted", Dockerfile): no services, about 10 s once the tools
# are cached under ~/.cache/courier (the first run installs helm and builds the checkers).
bash scripts/check-dashboards.sh
bash scripts/check-deploy.sh
# The OpenTelemetry Collector tests/otlp.rs exports to (built once, cached).
COURIER_TEST_OTELCOL=$(bash scripts/otelcol.sh)
export COURIER_TEST_OTELCOL
# The OAuth2 server tests/auth.rs gets tokens from (ory/hydra, built once, cached),
# and the python with the Standard Webhooks reference library tests/signing.rs's
# receiver verifies with (a venv, made once).
COURIER_TEST_HYDRA=$(bash scripts/hydra.sh)
export COURIER_TEST_HYDRA
COURIER_TEST_PYTHON=$(bash scripts/pytools.sh)
export COURIER_TEST_PYTHON
# confluent-kafka's serializers, the real producers of tests/schema_registry.rs and
# tests/schema_formats.rs.
COURIER_TEST_PYSCHEMA=$(bash scripts/pyschema.sh)
export COURIER_TEST_PYSCHEMA
cargo test --workspace --all-targets --features test-hooks -- --test-threads="${COURIER_TEST_THREADS:-2}"
