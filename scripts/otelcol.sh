#!/usr/bin/env bash
# Builds (once) an OpenTelemetry Collector with the OTLP receiver and the debug
# exporter, from the Go module proxy: `go install` of the collector's builder (ocb),
# then ocb with scripts/otelcol/builder.yaml. Prints the binary's path.
# About 3-4 minutes of CPU the first time; cached under ~/.cache/courier/bin after.
set -euo pipefail
command -v go >/dev/null || PATH=$PATH:/usr/local/go/bin
cd "$(dirname "$0")/.."

OCB_VERSION=v0.165.0
cache=${COURIER_TOOL_CACHE:-$HOME/.cache/courier}/bin
bin=$cache/otelcol-courier-$OCB_VERSION
if [[ ! -x $bin ]]; then
    mkdir -p "$cache"
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    echo "building the OpenTelemetry Collector $OCB_VERSION (ocb, once)" >&2
    GOBIN=$work go install "go.opentelemetry.io/collector/cmd/builder@$OCB_VERSION" >&2
    cp scripts/otelcol/builder.yaml "$work/"
    (cd "$work" && ./builder --config builder.yaml >&2)
    mv "$work/dist/otelcol-courier" "$bin"
fi
echo "$bin"
