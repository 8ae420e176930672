#!/usr/bin/env bash
# Builds (once) ory/hydra, the OAuth2 server of the auth tests (client credentials
# with tokens that expire every few seconds), from the Go module proxy. Prints the
# binary's path.
#
# `go install github.com/ory/hydra/v2@VERSION` is refused (hydra's go.mod has
# replace directives), so the module is required as a tool of a throwaway module
# and built from there. Replace directives of a dependency are ignored, so hydra's
# own (to modules, not to its local directories) are copied into the throwaway
# module: without `github.com/gobuffalo/pop/v6 => github.com/ory/pop/v6` the build
# fails (`p.conn.Store.SQLDB undefined`). The `sqlite` build tag is needed for `DSN=memory` (an
# in-memory SQLite database: without the tag hydra handles only MySQL, PostgreSQL
# and CockroachDB DSNs); SQLite is cgo, so a C compiler must be on the PATH.
# `sqlite_omit_load_extension` is what hydra's own Makefile and Dockerfile add.
# About 5-10 minutes of CPU the first time; cached under ~/.cache/courier/bin after.
set -euo pipefail
command -v go >/dev/null || PATH=$PATH:/usr/local/go/bin

HYDRA_VERSION=v2.3.0
cache=${COURIER_TOOL_CACHE:-$HOME/.cache/courier}/bin
bin=$cache/hydra-$HYDRA_VERSION
if [[ ! -x $bin ]]; then
    command -v cc >/dev/null || { echo "hydra.sh: a C compiler (cc) is needed: SQLite is cgo" >&2; exit 1; }
    mkdir -p "$cache"
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    echo "building ory/hydra $HYDRA_VERSION (once)" >&2
    (
        cd "$work"
        go mod init hydrabuild >&2 2>&1
        go get -tool "github.com/ory/hydra/v2@$HYDRA_VERSION" >&2
        gomod=$(go mod download -json "github.com/ory/hydra/v2@$HYDRA_VERSION" |
            sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')
        [[ -f $gomod ]] || { echo "hydra.sh: hydra's go.mod not found" >&2; exit 1; }
        # `replace OLD => NEW VERSION` lines; `=> ./dir` (local) ones are skipped.
        awk '$1 == "replace" && $3 == "=>" && NF == 5 { print $2 "=" $4 "@" $5 }' "$gomod" |
            while read -r r; do go mod edit -replace "$r"; done
        go mod tidy >&2
        CGO_ENABLED=1 go build -tags sqlite,sqlite_omit_load_extension \
            -ldflags "-X github.com/ory/hydra/v2/driver/config.Version=$HYDRA_VERSION" \
            -o "$work/hydra" github.com/ory/hydra/v2 >&2
    )
    mv "$work/hydra" "$bin"
fi
echo "$bin"
