#!/usr/bin/env bash
# Commit subjects are at most 72 characters (details go into the body). Checks every
# commit since the baseline in scripts/commit-subjects.baseline (main's head when the
# rule came in: older commits are left as they are), merges' default subjects
# ("Merge branch ...") excepted. scripts/test.sh runs it first; it needs no services
# and may be run alone: `bash scripts/check-commit-subjects.sh`.
# Not a git checkout, or a shallow clone that does not reach the baseline: says so and
# passes (nothing to check against), so a source archive or a depth-1 CI clone still
# tests. The same rule for each new commit as it is made: scripts/hooks/commit-msg.
set -euo pipefail
cd "$(dirname "$0")/.."
max=72
baseline=$(tr -d '[:space:]' <scripts/commit-subjects.baseline)

if ! git rev-parse --git-dir >/dev/null 2>&1; then
    echo "[subjects] not a git checkout: commit subjects not checked" >&2
    exit 0
fi
if ! git cat-file -e "$baseline^{commit}" 2>/dev/null; then
    if [[ $(git rev-parse --is-shallow-repository) == true ]]; then
        echo "[subjects] shallow clone without the baseline $baseline: commit subjects" \
            "not checked (fetch more history: git fetch --unshallow)" >&2
        exit 0
    fi
    echo "[subjects] the baseline $baseline (scripts/commit-subjects.baseline) is not" \
        "a commit of this repository" >&2
    exit 1
fi

bad=0
checked=0
while IFS=$'\t' read -r hash parents subject; do
    checked=$((checked + 1))
    # A merge's default subject names branches, not work; its length is git's.
    if [[ $parents == *" "* && $subject == "Merge "* ]]; then
        continue
    fi
    len=$(printf '%s' "$subject" | LC_ALL=C.UTF-8 wc -m)
    if ((len > max)); then
        echo "[subjects] $hash: subject of $len characters (at most $max): $subject" >&2
        bad=$((bad + 1))
    fi
done < <(git log --format=$'%h\t%p\t%s' "$baseline..HEAD")

if ((bad > 0)); then
    echo "[subjects] $bad of $checked commits since $baseline have a subject over $max" \
        "characters: reword them (git rebase -i), details in the body" >&2
    exit 1
fi
echo "[subjects] $checked commits since ${baseline:0:10}: every subject at most $max characters" >&2
