#!/usr/bin/env bash
# Installs (once) mdBook from crates.io, the tool that builds the user guide
# (docs/guide). Prints the directory holding its binary. Cached under
# ~/.cache/courier/bin; a few minutes of CPU the first time.
# The guide's links are checked by tests/guide_links.rs: mdbook-linkcheck 0.7.7 (the
# last release) cannot read mdBook 0.5's render context ("missing field `sections`").
set -euo pipefail

MDBOOK_VERSION=0.5.4
cache=${COURIER_TOOL_CACHE:-$HOME/.cache/courier}/bin
root=$cache/mdbook-$MDBOOK_VERSION
if [[ ! -x $root/bin/mdbook ]]; then
    mkdir -p "$cache"
    echo "installing mdbook $MDBOOK_VERSION (once)" >&2
    # A target directory of its own, removed after: not the project's.
    target=$(mktemp -d)
    trap 'rm -rf "$target"' EXIT
    CARGO_TARGET_DIR=$target cargo install --locked --root "$root.tmp" \
        mdbook --version "$MDBOOK_VERSION" >&2
    rm -rf "$root"
    mv "$root.tmp" "$root"
fi
echo "$root/bin"
