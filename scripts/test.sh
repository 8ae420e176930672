#!/usr/bin/env bash
# The project's test command: starts the real services the tests need (Kafka from
# Maven Central, Redis and PostgreSQL from Debian), then runs formatting, lints and
# every test against them.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/services.sh up
# shellcheck disable=SC1091
source "${COURIER_STATE:-/tmp/courier-services}/services.env"

cargo fmt --all -- --check
cargo clippy --all-targets --features test-hooks -- -D warnings
cargo test --all-targets --features test-hooks -- --test-threads="${COURIER_TEST_THREADS:-2}"
