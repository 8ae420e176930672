#!/bin/sh
# Creates empty stand-ins for the crate's sources and its declared targets, so that
# `cargo build --release --locked --bin courier` compiles every dependency (librdkafka,
# jemalloc and the crates) in a Docker layer that only Cargo.toml / Cargo.lock
# invalidate. Used by the Dockerfile; scripts/check-dockerfile.sh runs it too, to check
# that Cargo accepts the stubbed manifest. Run in the crate's root.
set -eu
mkdir -p src benches tests
echo 'fn main() {}' > src/main.rs
: > src/lib.rs
# The workspace members under crates/ (only their manifests are copied): a stand-in
# main.rs for one that declares a [[bin]], a lib.rs for the others.
for manifest in crates/*/Cargo.toml; do
    [ -f "$manifest" ] || continue
    dir=${manifest%/Cargo.toml}
    mkdir -p "$dir/src"
    if grep -q '^\[\[bin\]\]' "$manifest"; then
        echo 'fn main() {}' > "$dir/src/main.rs"
    else
        : > "$dir/src/lib.rs"
    fi
done
# Targets Cargo.toml declares by name ([[bench]], [[test]]): their files must exist for
# any build. Read from the manifest, so a new declared target needs no edit here.
awk '
    /^\[\[(bench|test)\]\]/ { kind = ($0 ~ /bench/) ? "benches" : "tests"; next }
    /^\[/ { kind = "" }
    kind != "" && /^name *= *"/ { n = $0; sub(/^name *= *"/, "", n); sub(/".*/, "", n); print kind "/" n ".rs" }
' Cargo.toml | while read -r f; do
    case $f in
    benches/*) echo 'fn main() {}' > "$f" ;;
    *) : > "$f" ;;
    esac
done
