#!/usr/bin/env bash
# The project's test command: starts the real services the tests need (Kafka from
# Maven Central, Redis and PostgreSQL from Debian), then runs formatting, lints and
# every test against them.
set -euo pipefail
cd "$(dirname "$0")/.."

# Commit subjects at most 72 characters (details in the body): first, since it is
# cheap. The commits since scripts/commit-subjects.baseline are checked here, and
# the hook that refuses a long subject as it is written is installed into this
# repository's hooks directory (a worktree's `.git` is a file: ask git where it is).
bash scripts/check-commit-subjects.sh
if hooks=$(git rev-parse --git-path hooks 2>/dev/null); then
    mkdir -p "$hooks"
    if [[ ! -e $hooks/commit-msg ]] || grep -q '^# courier commit-msg hook' "$hooks/commit-msg"; then
        install -m 755 scripts/hooks/commit-msg "$hooks/commit-msg"
    else
        echo "[test] $hooks/commit-msg is not Courier's: left as it is" \
            "(scripts/hooks/commit-msg is)" >&2
    fi
fi

# The tools the tests use, made ready (built or fetched once, cached under
# ~/.cache/courier) in the background from the start, so that their Go builds and
# downloads overlap the services' start and the Rust build instead of following them
# (on a fresh machine: otelcol and hydra about 6 minutes of CPU each). Each is
# collected (`ready`) just before the tests.
# The static checks' Go checkers (scripts/checks) are built the same way, and mdBook
# (scripts/mdbook.sh, from crates.io) for the user guide.
declare -A tool_pid
declare -A tool_cmd=(
    [otelcol]=scripts/otelcol.sh [hydra]=scripts/hydra.sh [pytools]=scripts/pytools.sh
    [pyschema]=scripts/pyschema.sh [apicurio]=scripts/apicurio.sh
    [dashcheck]="scripts/checks/build.sh dashcheck" [k8scheck]="scripts/checks/build.sh k8scheck"
    [mdbook]=scripts/mdbook.sh
)
tool_dir=$(mktemp -d)
trap 'kill "${tool_pid[@]}" 2>/dev/null || true; rm -rf "$tool_dir"' EXIT
for t in "${!tool_cmd[@]}"; do
    # shellcheck disable=SC2086 # a script and its argument
    bash ${tool_cmd[$t]} >"$tool_dir/$t" 2>"$tool_dir/$t.log" &
    tool_pid[$t]=$!
done
# Waits for tool $1's script; on failure shows its log and stops the run.
ready() {
    if ! wait "${tool_pid[$1]}"; then
        echo "[test] ${tool_cmd[$1]} failed:" >&2
        cat "$tool_dir/$1.log" >&2
        exit 1
    fi
}

# A broker with fresh storage: topics and groups left by earlier runs only slow it down
# (a restart loads every partition; see `kafka-reset` in services.sh).
bash scripts/services.sh kafka-reset
bash scripts/services.sh up

# The chaos drill (crates/courier-drill/tests/drills.rs) stops and starts Kafka and
# Redis, so it gets services of its own (another state directory, other ports),
# started now in the background; it then runs beside the other tests instead of
# after them (it is the longest test: about 7 minutes, mostly waiting on its faults).
# Its ports lie below the kernel's ephemeral range (32768-60999 on Linux): a port
# there can be taken by any client's outgoing connection while the drill has its
# broker stopped, and a listener then fails to bind (seen: Toxiproxy on 39096).
drill_state="${COURIER_STATE:-/tmp/courier-services}-drill"
drill_services() {
    COURIER_STATE=$drill_state \
        COURIER_KAFKA_PORT=31092 COURIER_KAFKA_CONTROLLER_PORT=31093 COURIER_KAFKA_SASL_PORT=31094 \
        COURIER_KAFKA_PROXIED_PORT=31095 COURIER_KAFKA_PROXIED_ADVERTISED_PORT=31096 \
        COURIER_KAFKA_SSL_PORT=31097 COURIER_KAFKA_SASL_SSL_PORT=31098 \
        COURIER_REDIS_PORT=31379 COURIER_REDIS_TLS_PORT=31380 COURIER_PG_PORT=31432 \
        bash scripts/services.sh "$@"
}
(drill_services kafka-reset && drill_services up) >"$tool_dir/drill-services.log" 2>&1 &
drill_services_pid=$!

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
# --workspace: the service (the root package), its stand-ins (crates/courier-standins)
# and the tooling in crates/ (the testkit, the drill and its CI test,
# crates/courier-drill/tests/drills.rs).
cargo clippy --workspace --all-targets --features test-hooks -- -D warnings
# The binary the deploy checks run (`courier check-config`); cargo test reuses it.
cargo build --bin courier --features test-hooks
# Static checks of dashboards/ and deploy/ (promtool, Grafana schema, helm, Kubernetes
# schemas, Pod Security "restricted", Dockerfile): no services, about 10 s once the tools
# are cached under ~/.cache/courier (the first run installs helm and builds the checkers).
ready dashcheck
ready k8scheck
bash scripts/check-dashboards.sh
bash scripts/check-deploy.sh
# The user guide (docs/guide, an mdBook): built (a chapter SUMMARY.md names that does not
# exist fails it). Its links are checked by tests/guide_links.rs and its configuration
# page against the config types by config::reference::tests, both in `cargo test` below.
ready mdbook
PATH="$(cat "$tool_dir/mdbook"):$PATH" mdbook build docs/guide
# The OpenTelemetry Collector tests/otlp.rs exports to; the OAuth2 server tests/auth.rs
# gets tokens from (ory/hydra); the python with the Standard Webhooks reference library
# tests/signing.rs's receiver verifies with; confluent-kafka's serializers, the real
# producers of tests/schema_registry.rs and tests/schema_formats.rs, and the real Schema
# Registry they register with (Apicurio Registry, from Maven Central).
for t in otelcol hydra pytools pyschema apicurio; do ready "$t"; done
COURIER_TEST_OTELCOL=$(cat "$tool_dir/otelcol")
COURIER_TEST_HYDRA=$(cat "$tool_dir/hydra")
COURIER_TEST_PYTHON=$(cat "$tool_dir/pytools")
COURIER_TEST_PYSCHEMA=$(cat "$tool_dir/pyschema")
COURIER_TEST_APICURIO=$(cat "$tool_dir/apicurio")
export COURIER_TEST_OTELCOL COURIER_TEST_HYDRA COURIER_TEST_PYTHON COURIER_TEST_PYSCHEMA \
    COURIER_TEST_APICURIO
# Libraries, binaries and tests: the benches are type-checked by clippy above, and
# under `cargo test` they would only say they are skipped (courier_testkit::
# asked_as_benchmark) after being built and linked, each one a binary of its own.
cargo test --workspace --lib --bins --tests --features test-hooks --no-run
drill_test=$PWD/$(cargo test -p courier-drill --test drills --no-run 2>&1 |
    sed -n 's/.*Executable tests\/drills.rs (\(.*\))$/\1/p')
[[ -x $drill_test ]] || { echo "[test] the drill's test binary was not found" >&2; exit 1; }
if ! wait "$drill_services_pid"; then
    echo "[test] the drill's services did not start:" >&2
    cat "$tool_dir/drill-services.log" >&2
    exit 1
fi
# The drill's test with the drill's services in its environment, from its package's
# directory (as cargo runs it).
(
    set -a
    # shellcheck disable=SC1091
    source "$drill_state/services.env"
    set +a
    cd crates/courier-drill
    exec "$drill_test" --test-threads=1
) >"$tool_dir/drill.log" 2>&1 &
drill_pid=$!
status=0
cargo test --workspace --lib --bins --tests --features test-hooks -- \
    --test-threads="${COURIER_TEST_THREADS:-2}" --skip short_drill_sequence_loses_nothing ||
    status=$?
drill_status=0
wait "$drill_pid" || drill_status=$?
echo "[test] the chaos drill (crates/courier-drill/tests/drills.rs, on services of its own):"
cat "$tool_dir/drill.log"
drill_services down >/dev/null 2>&1 || true
if ((status != 0 || drill_status != 0)); then
    echo "[test] FAILED: cargo test exit $status, the drill's test exit $drill_status" >&2
    exit 1
fi
