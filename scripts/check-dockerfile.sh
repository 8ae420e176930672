#!/usr/bin/env bash
# Static checks of the Dockerfile (no Docker engine here, so the image is never built in
# CI; hadolint is a Haskell tool and not installable from the registries available).
# What the Dockerfile claims, checked:
#   - every base image pinned by a version tag (or a digest), never `latest` or untagged;
#   - the final stage: a numeric USER, no curl or wget, a HEALTHCHECK that runs the binary
#     itself (exec form `["courier", "healthcheck", ...]`, the same --config as CMD), no
#     COURIER__* ENV (it would beat a mounted config file's settings, metrics.listen
#     included);
#   - a dependency layer: a `cargo build` runs before the sources are copied in;
#   - each `cargo build` of the build stage sees files Cargo accepts: the stage's COPY
#     instructions are replayed into a scratch directory (and, in RUN lines, what this
#     Dockerfile does there: deploy/docker/stub-crate.sh, `rm -rf src`), and at each
#     `cargo build` `cargo fetch --locked` loads the manifest and its declared targets as
#     the build would (a target Cargo.toml declares whose file was not copied fails);
#   - what the Dockerfile COPYs exists and is not excluded by .dockerignore;
#   - the image's default config (deploy/docker/image-config.sh) listens on 0.0.0.0 and
#     passes `courier check-config` (when target/debug/courier is built).
# Usage: scripts/check-dockerfile.sh [DOCKERFILE]   (exit 1 on a violation)
set -euo pipefail
cd "$(dirname "$0")/.."
df=${1:-Dockerfile}
bad=0
problem() { echo "check-dockerfile: $df: $*"; bad=1; }

# Instructions, with continuation lines joined and comments dropped.
instructions=$(sed -e 's/[[:space:]]*#.*$//' "$df" | awk '
    /\\$/ { sub(/\\$/, ""); buf = buf $0 " "; next }
    { line = buf $0; buf = ""; if (line ~ /[^[:space:]]/) print line }')

declare -A args
build_stage=""
stage=0
stages=0
final_user=""
final_lines=""
cargo_build_before_src=0
seen_src_copy=0
while IFS= read -r line; do
    op=$(awk '{print toupper($1)}' <<<"$line")
    rest=${line#* }
    case $op in
    ARG)
        if [[ $stage -eq 0 && $rest == *=* ]]; then args[${rest%%=*}]=${rest#*=}; fi ;;
    FROM)
        stages=$((stages + 1)); stage=$stages
        image=$(awk '{print $1}' <<<"$rest")
        for k in "${!args[@]}"; do image=${image//\$\{$k\}/${args[$k]}}; image=${image//\$$k/${args[$k]}}; done
        if [[ $image == *'$'* ]]; then problem "FROM $image: unresolved variable"
        elif [[ $image == *@sha256:* ]]; then :
        elif [[ $image != *:* ]]; then problem "FROM $image: no tag (means latest): pin a version"
        else
            tag=${image##*:}
            if [[ $tag == latest || ! $tag =~ [0-9]+\.[0-9]+ ]]; then
                problem "FROM $image: tag '$tag' is not a version (pin e.g. rust:1.95.0-slim-trixie, debian:13.1-slim)"
            fi
        fi
        final_lines=""; final_user="" ;;
    *)
        final_lines+="$line"$'\n'
        if [[ $op == USER ]]; then final_user=$rest; fi
        if [[ $stage -eq 1 && $op == RUN && $line == *"cargo build"* && $seen_src_copy -eq 0 ]]; then cargo_build_before_src=1; fi
        if [[ $stage -eq 1 && $op == COPY && $line =~ (^|[[:space:]])src($|/|[[:space:]]) ]]; then seen_src_copy=1; fi
        if [[ $stage -eq 1 ]]; then build_stage+="$line"$'\n'; fi
        if [[ $op == COPY && $line != *--from=* ]]; then
            read -ra words <<<"$rest"
            for src in "${words[@]:0:${#words[@]}-1}"; do
                [[ $src == --* ]] && continue
                [[ -e $src ]] || problem "COPY $src: not in the repository"
                allowed=0
                while IFS= read -r pat; do
                    pat=${pat#!}; pat=${pat%/}
                    [[ $src == "$pat" || $src == "$pat"/* ]] && allowed=1
                done < <(grep '^!' .dockerignore 2>/dev/null || true)
                [[ -f .dockerignore && $allowed -eq 0 ]] && problem "COPY $src: excluded by .dockerignore"
            done
        fi ;;
    esac
done <<<"$instructions"

[[ $stages -ge 2 ]] || problem "expected a build stage and a runtime stage"
[[ $final_user =~ ^[0-9]+(:[0-9]+)?$ ]] || problem "final stage USER '$final_user': use a numeric uid[:gid]"
if grep -qiwE 'curl|wget' <<<"$final_lines"; then problem "final stage installs or runs curl/wget"; fi
healthcheck=$(grep -E '^HEALTHCHECK ' <<<"$final_lines" || true)
if [[ -z $healthcheck ]]; then
    problem "final stage has no HEALTHCHECK (use CMD [\"courier\", \"healthcheck\", \"--config\", ...]: the binary checks itself)"
elif ! grep -qE 'CMD \["courier", *"healthcheck"' <<<"$healthcheck"; then
    problem "final stage HEALTHCHECK does not run [\"courier\", \"healthcheck\", ...] in exec form: $healthcheck"
else
    hc_config=$(sed -n 's/.*"healthcheck", *"--config", *"\([^"]*\)".*/\1/p' <<<"$healthcheck")
    cmd_config=$(grep -E '^CMD ' <<<"$final_lines" | sed -n 's/.*"--config", *"\([^"]*\)".*/\1/p')
    [[ -n $hc_config && $hc_config == "$cmd_config" ]] || problem "HEALTHCHECK --config '$hc_config' is not the config CMD runs with ('$cmd_config')"
fi
if grep -qE '^ENV .*COURIER__' <<<"$final_lines"; then problem "final stage sets COURIER__* (it would override a mounted config file)"; fi
[[ $cargo_build_before_src -eq 1 ]] || problem "no dependency layer: no 'cargo build' before 'COPY src' in the build stage"

# Replay the build stage's files and run Cargo's manifest checks at each `cargo build`.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
ctx=$work/ctx
mkdir -p "$ctx"
fetch() { (cd "$ctx" && { cargo fetch --locked --offline >/dev/null 2>&1 || cargo fetch --locked >"$work/fetch.log" 2>&1 || { cat "$work/fetch.log"; false; }; }); }
builds=0
while IFS= read -r line; do
    op=$(awk '{print toupper($1)}' <<<"$line")
    rest=${line#* }
    case $op in
    COPY)
        [[ $line == *--from=* ]] && continue
        read -ra words <<<"$rest"
        dest=${words[${#words[@]}-1]}
        case $dest in /src/*) dest=${dest#/src/} ;; /*) continue ;; esac
        for src in "${words[@]:0:${#words[@]}-1}"; do
            [[ $src == --* || ! -e $src ]] && continue
            if [[ $dest == */ || $dest == . ]]; then mkdir -p "$ctx/$dest"; cp -r "$src" "$ctx/$dest"
            else mkdir -p "$(dirname "$ctx/$dest")"; rm -rf "${ctx:?}/$dest"; cp -r "$src" "$ctx/$dest"; fi
        done ;;
    RUN)
        if [[ $line == *stub-crate.sh* ]]; then (cd "$ctx" && sh "$OLDPWD/deploy/docker/stub-crate.sh"); fi
        if [[ $line == *"cargo build"* ]]; then
            builds=$((builds + 1))
            fetch || problem "RUN cargo build #$builds: Cargo refuses the files the stage has at that point (a target Cargo.toml declares was not copied or stubbed?)"
        fi
        if [[ $line =~ rm\ -rf\ src([[:space:]]|$) ]]; then rm -rf "$ctx/src"; fi ;;
    esac
done <<<"$build_stage"
[[ $builds -ge 2 ]] || problem "expected two cargo builds in the build stage (dependencies, then Courier)"

# The image's default config.
if sh deploy/docker/image-config.sh config/courier.toml "$work/courier.image.toml"; then
    bin=${COURIER_BIN:-target/debug/courier}
    if [[ -x $bin ]]; then
        out=$("$bin" check-config --config "$work/courier.image.toml" 2>&1) || problem "the image's config fails check-config: $out"
    else
        echo "check-dockerfile: $bin not built: the image's config is not run through check-config"
    fi
else
    problem "deploy/docker/image-config.sh failed"
fi

if [[ $bad -ne 0 ]]; then exit 1; fi
echo "check-dockerfile: $df ok (pinned bases, numeric USER, HEALTHCHECK by courier healthcheck, no curl/wget or COURIER__ env in the runtime, dependency layer, build stages accepted by Cargo)"
