#!/usr/bin/env bash
# Installs (once) mdBook and mdbook-linkcheck from crates.io, the tools that build the
# user guide (docs/guide) and check its links. Prints the directory holding both
# binaries. Cached under ~/.cache/courier/bin; about 5 minutes of CPU the first time.
set -euo pipefail

MDBOOK_VERSION=0.5.4
LINKCHECK_VERSION=0.7.7
cache=${COURIER_TOOL_CACHE:-$HOME/.cache/courier}/bin
root=$cache/mdbook-$MDBOOK_VERSION-linkcheck-$LINKCHECK_VERSION
if [[ ! -x $root/bin/mdbook || ! -x $root/bin/mdbook-linkcheck ]]; then
    mkdir -p "$cache"
    echo "installing mdbook $MDBOOK_VERSION and mdbook-linkcheck $LINKCHECK_VERSION (once)" >&2
    # A target directory of its own, removed after: not the project's.
    target=$(mktemp -d)
    trap 'rm -rf "$target"' EXIT
    CARGO_TARGET_DIR=$target cargo install --locked --root "$root.tmp" \
        mdbook --version "$MDBOOK_VERSION" >&2
    CARGO_TARGET_DIR=$target cargo install --locked --root "$root.tmp" \
        mdbook-linkcheck --version "$LINKCHECK_VERSION" >&2
    rm -rf "$root"
    mv "$root.tmp" "$root"
fi
echo "$root/bin"
