#!/usr/bin/env bash
# Builds one of the checkers in scripts/checks (Go) and prints the binary's path. The
# binary is cached under ~/.cache/courier/bin, keyed by a hash of the module's sources,
# so it is rebuilt only when they change. Usage: bash scripts/checks/build.sh dashcheck
set -euo pipefail
# The Go toolchain of this kind of machine lives in /usr/local/go.
command -v go >/dev/null || PATH=$PATH:/usr/local/go/bin
name=${1:?usage: build.sh dashcheck|k8scheck}
here=$(cd "$(dirname "$0")" && pwd)
cache=${COURIER_TOOL_CACHE:-$HOME/.cache/courier}/bin
command -v go >/dev/null || { echo "build.sh: go is not installed" >&2; exit 1; }
hash=$(cd "$here" && cat go.mod go.sum $(find cmd -name '*.go' | sort) | sha256sum | cut -c1-16)
bin="$cache/$name-$hash"
if [[ ! -x $bin ]]; then
    mkdir -p "$cache"
    echo "building $name (scripts/checks, first run downloads its Go modules)" >&2
    (cd "$here" && go build -o "$bin.tmp" "./cmd/$name") && mv "$bin.tmp" "$bin"
    # Older builds of the same tool are stale.
    find "$cache" -maxdepth 1 -name "$name-*" ! -name "$name-$hash" -delete
fi
echo "$bin"
