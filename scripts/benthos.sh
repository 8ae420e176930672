#!/usr/bin/env bash
# Builds (once) Benthos v4.27.0, the last MIT release, from the Go module proxy: the
# peer of the batch-delivery benchmark (benches/batch, issue 25). Prints the binary's path.
# The module's own command (all of its components: kafka_franz in, http_client out),
# built from the module's own go.mod and go.sum, as `go install MODULE/cmd/benthos@VERSION`
# would. Not `go install` itself: it also asks the proxy for the module's list of
# versions (to look for a deprecation notice), and the proxy refuses that list (403,
# "This module version is not available") while it serves v4.27.0 itself.
# `-checklinkname=0`: one of its dependencies (parquet-go's aeshash) reaches into
# the Go runtime with `go:linkname`, which Go 1.23 and later refuse to link by
# default ("invalid reference to runtime.aeskeysched"). `-X ...cli.Version`: what
# `go install` would have read from the build info, for `benthos --version`.
# About 5-10 minutes of CPU the first time; cached under ~/.cache/courier/benthos after.
set -euo pipefail
command -v go >/dev/null || PATH=$PATH:/usr/local/go/bin

BENTHOS_VERSION=v4.27.0
cache=${COURIER_TOOL_CACHE:-$HOME/.cache/courier}/benthos
bin=$cache/benthos-$BENTHOS_VERSION
if [[ ! -x $bin ]]; then
    mkdir -p "$cache"
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    echo "building Benthos $BENTHOS_VERSION (once)" >&2
    dir=$(cd "$work" && go mod download -json "github.com/benthosdev/benthos/v4@$BENTHOS_VERSION" |
        sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
    [[ -f $dir/go.mod ]] || { echo "benthos.sh: the module's source was not downloaded" >&2; exit 1; }
    go build -C "$dir" -trimpath \
        -ldflags "-checklinkname=0 -X github.com/benthosdev/benthos/v4/internal/cli.Version=$BENTHOS_VERSION" \
        -o "$work/benthos" ./cmd/benthos >&2
    mv "$work/benthos" "$bin"
fi
echo "$bin"
